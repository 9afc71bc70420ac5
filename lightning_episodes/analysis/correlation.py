"""Does episode difficulty transfer? (Arnold et al., NeurIPS 2021, §4.2).

The paper scores the same episodes with two models (different algorithms, backbones or training
times) and measures how well their difficulties agree with Spearman's rank correlation ρ: a high ρ
means an episode that is hard for one model is hard for the other, which is what lets a frozen
reference model supply the difficulties for offline weighting.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats

from lightning_episodes.analysis._arrays import ArrayLike, as_vector


class RankCorrelation(NamedTuple):
    """Spearman's ``rho`` and the two-sided ``pvalue`` of the test ρ = 0."""

    rho: float
    pvalue: float


def paired_vectors(a: ArrayLike, b: ArrayLike, min_size: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` as finite 1-d float arrays of the same length (≥ ``min_size``).

    Raises:
        ValueError: naming the argument if either is not 1-d, holds NaN/inf or is too short, or if
            their lengths differ.
    """
    x, y = as_vector(a, "a"), as_vector(b, "b")
    if x.size != y.size:
        raise ValueError(
            f"`a` and `b` must score the same episodes: got {x.size} and {y.size} values "
            f"(align them by episode id first, e.g. with join_on_episode)"
        )
    if x.size < min_size:
        raise ValueError(f"`a` and `b` need at least {min_size} values each, got {x.size}")
    return x, y


def rank_correlation(a: ArrayLike, b: ArrayLike) -> RankCorrelation:
    """Spearman rank correlation between two models' difficulties of the same episodes (§4.2).

    ``a[i]`` and ``b[i]`` must be the same episode scored by the two models. Ties get their average
    rank, so ρ is the Pearson correlation of the (average) ranks.

    Args:
        a: 1-d difficulties under the first model (numpy array, torch tensor or sequence).
        b: 1-d difficulties under the second model, same length and order.

    Returns:
        :class:`RankCorrelation` ``(rho, pvalue)`` from :func:`scipy.stats.spearmanr`.

    Raises:
        ValueError: if the lengths differ, either has fewer than 3 values or holds NaN/inf, or
            either is constant (ρ is undefined).

    Example::

        >>> a = np.array([0.3, 1.2, 0.7, 2.0, 1.5])
        >>> round(rank_correlation(a, np.exp(a)).rho, 6)  # any increasing transform keeps the ranks
        1.0
        >>> round(rank_correlation(a, -a).rho, 6)
        -1.0
    """
    x, y = paired_vectors(a, b)
    for name, array in (("a", x), ("b", y)):
        if np.ptp(array) == 0.0:
            raise ValueError(f"`{name}` is constant: its rank correlation is undefined")
    result = stats.spearmanr(x, y)
    return RankCorrelation(float(result.statistic), float(result.pvalue))

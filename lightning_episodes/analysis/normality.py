"""Is episode difficulty normally distributed? (Arnold et al., NeurIPS 2021, §4.2).

The paper models the difficulty of episodes drawn by plain sampling as a normal N(μ, σ²) (the
proposal q of the importance weights) and checks it with a subsampled Shapiro-Wilk test: draw 50
difficulties without replacement, test them at α = 0.05, repeat 100 times and report how often
normality is rejected. For truly normal values the rejection rate is ≈ α; a rate far above it says
the normal model is poor. Subsampling matters: on thousands of values Shapiro-Wilk rejects even
tiny, harmless departures from normality.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import stats

from lightning_episodes.analysis._arrays import ArrayLike, as_vector


class NormalFit(NamedTuple):
    """Maximum-likelihood normal fit: ``mean`` and ``std`` (ddof = 0, as the weighting uses)."""

    mean: float
    std: float


@dataclass(frozen=True)
class ShapiroResult:
    """Outcome of :func:`shapiro_rejection_rate`.

    Args:
        rejection_rate: fraction of subsamples whose Shapiro-Wilk p-value is below ``alpha``.
        rejections: number of such subsamples.
        repeats: number of subsamples tested.
        subsample: values per subsample.
        alpha: significance level of each test.
        mean_statistic: mean Shapiro-Wilk W over the subsamples (1 = perfectly normal ordering).
        mean_pvalue: mean p-value over the subsamples.
        statistics: W of each subsample, in drawing order.
        pvalues: p-value of each subsample, in drawing order.
    """

    rejection_rate: float
    rejections: int
    repeats: int
    subsample: int
    alpha: float
    mean_statistic: float
    mean_pvalue: float
    statistics: tuple[float, ...]
    pvalues: tuple[float, ...]

    @property
    def standard_error(self) -> float:
        """Binomial standard error of ``rejection_rate``: √(r (1 − r) / repeats)."""
        r = self.rejection_rate
        return float(np.sqrt(r * (1.0 - r) / self.repeats))


def fit_normal(values: ArrayLike) -> NormalFit:
    """Fit N(μ, σ²) to ``values`` by maximum likelihood (σ with ddof = 0).

    Args:
        values: 1-d difficulties (numpy array, torch tensor or sequence), all finite.

    Returns:
        The :class:`NormalFit` ``(mean, std)``.

    Raises:
        ValueError: if ``values`` is empty, not 1-d or holds NaN/inf.

    Example::

        >>> fit_normal([1.0, 2.0, 3.0])
        NormalFit(mean=2.0, std=0.816496580927726)
    """
    array = as_vector(values, "values")
    return NormalFit(float(array.mean()), float(array.std()))


def shapiro_rejection_rate(
    values: ArrayLike,
    subsample: int = 50,
    repeats: int = 100,
    alpha: float = 0.05,
    seed: int = 0,
) -> ShapiroResult:
    """The paper's normality protocol (§4.2): Shapiro-Wilk on random subsamples, rejection rate.

    Subsample ``r`` (``r = 0 .. repeats − 1``) is ``values[rng.choice(len(values), subsample,
    replace=False)]`` with ``rng = numpy.random.default_rng(seed)`` drawn in order, so a result is
    reproducible from ``seed`` alone and the draws can be replayed by hand. Each subsample is tested
    with :func:`scipy.stats.shapiro` and counts as a rejection when its p-value is strictly below
    ``alpha``.

    Args:
        values: 1-d episode difficulties (numpy array, torch tensor or sequence). Non-finite values
            are an error, not silently dropped: they usually mean a diverged model.
        subsample: values per Shapiro-Wilk test (≥ 3; default 50 as in the paper).
        repeats: number of subsamples (≥ 1; default 100 as in the paper).
        alpha: significance level of each test, in (0, 1) (default 0.05).
        seed: seed of the numpy Generator that draws the subsamples.

    Returns:
        A :class:`ShapiroResult` with the rejection rate, the mean W and p-value, and every
        subsample's W and p-value.

    Raises:
        ValueError: if ``values`` is not 1-d, holds NaN/inf, is constant or has fewer than
            ``subsample`` values; if ``subsample`` < 3, ``repeats`` < 1 or ``alpha`` is not in (0, 1).

    Example::

        >>> rng = np.random.default_rng(1)
        >>> result = shapiro_rejection_rate(rng.normal(size=1000))
        >>> result.repeats, result.subsample, result.rejection_rate < 0.15
        (100, 50, True)
        >>> shapiro_rejection_rate(rng.exponential(size=1000)).rejection_rate > 0.5
        True
    """
    if isinstance(subsample, bool) or not isinstance(subsample, int | np.integer) or subsample < 3:
        raise ValueError(f"`subsample` must be an integer >= 3 (Shapiro-Wilk's minimum), got {subsample!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int | np.integer) or repeats < 1:
        raise ValueError(f"`repeats` must be a positive integer, got {repeats!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"`alpha` must lie in (0, 1), got {alpha!r}")
    array = as_vector(values, "values")
    if array.size < subsample:
        raise ValueError(
            f"`values` has {array.size} values, fewer than `subsample`={subsample}: "
            f"pass more values or a smaller `subsample`"
        )
    if np.ptp(array) == 0.0:
        raise ValueError("`values` is constant: normality is undefined for a zero-variance sample")

    rng = np.random.default_rng(seed)
    w_values = np.empty(repeats)
    p_values = np.empty(repeats)
    for r in range(repeats):
        picked = array[rng.choice(array.size, size=subsample, replace=False)]
        test = stats.shapiro(picked)
        w_values[r], p_values[r] = test.statistic, test.pvalue
    rejections = int(np.count_nonzero(p_values < alpha))
    return ShapiroResult(
        rejection_rate=rejections / repeats,
        rejections=rejections,
        repeats=int(repeats),
        subsample=int(subsample),
        alpha=float(alpha),
        mean_statistic=float(w_values.mean()),
        mean_pvalue=float(p_values.mean()),
        statistics=tuple(float(w) for w in w_values),
        pvalues=tuple(float(p) for p in p_values),
    )

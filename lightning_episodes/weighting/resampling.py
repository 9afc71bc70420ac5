"""Choosing a step's episodes from a pool of plain candidates in proportion to their importance weights.

Sampling-importance-resampling (Rubin, 1988): ``k |B|`` plainly sampled candidates with weights ``w = p / q``
are resampled down to ``|B|``; the chosen episodes' difficulties follow the target ``p`` (exactly as ``k`` grows)
and each is trained with weight 1. :func:`systematic_resample` is the low-variance scheme of Kitagawa (1996),
with replacement or, through capped inclusion probabilities (Madow's systematic sampling), without;
:func:`select_candidates` is the whole choice, a pure function of the weights, a seed and the step;
:func:`target_cdf` is the target's distribution function, whose values at the chosen difficulties are uniform
when the choice follows the target (the logged goodness of fit); :func:`selection_fidelity` simulates how closely a
pool of a given size can follow it on a sample of difficulties. See ``docs/method.md``, "Resampling".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from lightning_episodes.weighting.targets import Target

if TYPE_CHECKING:
    from lightning_episodes.weighting.proposals import Proposal

__all__ = [
    "inclusion_probabilities",
    "placebo_permutation",
    "select_candidates",
    "selection_fidelity",
    "selection_generator",
    "standardize",
    "systematic_resample",
    "target_cdf",
    "target_quantiles",
]

#: mixed into the selection's seed so that it never shares a random stream with the placebo's permutations
_SELECTION_SALT: Final[int] = 0x5E1EC7
_CDF_POINTS: Final[int] = 4097


def selection_generator(seed: int, step: int, salt: int | None = _SELECTION_SALT) -> torch.Generator:
    """A CPU generator seeded from ``(seed, step, salt)`` (``numpy.random.SeedSequence`` mixes them into the 32
    bits torch keeps, which drops a seed's upper bits): the same on every rank and in a resumed run. ``salt=None``
    seeds from ``(seed, step)`` alone: the placebo's permutations."""
    entropy = [seed, step] if salt is None else [seed, step, salt]
    state = np.random.SeedSequence(entropy).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


def placebo_permutation(seed: int, step: int, size: int) -> Tensor:
    """The placebo's permutation of a step's ``size`` weights (CPU int64): a pure function of ``seed`` and ``step``,
    the same on every rank; re-weighting's placebo shuffles the batch's weights with it, resampling's the pool's."""
    return torch.randperm(size, generator=selection_generator(seed, step, salt=None))


def inclusion_probabilities(weights: Tensor, count: int) -> Tensor:
    """``pi_i = min(1, count w_i / sum w)``, capped ones fixed at 1 and the rest rescaled until ``sum pi = count``.

    The probabilities with which sampling ``count`` distinct candidates includes each (proportional to ``w``
    except where that would exceed 1). Needs at least ``count`` positive weights.

    Example::

        >>> inclusion_probabilities(torch.tensor([8.0, 1.0, 1.0, 0.0]), 2).tolist()
        [1.0, 0.5, 0.5, 0.0]
    """
    w = weights.to(torch.float64)
    capped = torch.zeros_like(w, dtype=torch.bool)
    for _ in range(w.numel()):
        free = w.masked_fill(capped, 0.0)
        pi = torch.where(capped, 1.0, (count - int(capped.sum())) * free / free.sum())
        over = pi > 1.0
        if not bool(over.any()):
            return pi
        capped |= over
    return capped.to(torch.float64)


def systematic_resample(weights: Tensor, count: int, offset: float, replacement: bool = True) -> Tensor:
    """Systematic resampling: ``count`` candidate indices, in increasing order, from non-negative ``weights``.

    With replacement, candidate ``i`` is chosen ``floor`` or ``ceil`` of ``count w_i / sum w`` times (its expected
    count; Kitagawa, 1996): the points ``offset + m``, ``m = 0..count-1``, fall in the cumulative sums of the
    expected counts. Without replacement, the same points on the cumulative :func:`inclusion_probabilities`
    (each ``<= 1``: no candidate twice); with fewer than ``count`` positive weights it falls back to replacement.

    Args:
        weights: ``[N]`` finite, non-negative, with a positive sum.
        count: candidates to choose, ``>= 1``.
        offset: in ``[0, 1)``, the one random number of the scheme.
        replacement: whether a candidate may be chosen more than once.

    Returns:
        ``[count]`` int64 indices into ``weights``, sorted.

    Raises:
        ValueError: if a weight is negative or not finite, the weights do not sum to a positive number, or
            ``offset`` is outside ``[0, 1)``.

    Example::

        >>> systematic_resample(torch.tensor([1.0, 0.0, 3.0, 0.0]), 4, 0.5).tolist()
        [0, 2, 2, 2]
        >>> systematic_resample(torch.tensor([1.0, 0.0, 3.0, 1.0]), 2, 0.25, replacement=False).tolist()
        [0, 2]
    """
    w = weights.detach().to("cpu", torch.float64)
    total = float(w.sum())
    if not (total > 0.0 and math.isfinite(total) and bool((w >= 0).all())):
        raise ValueError(
            f"systematic_resample needs finite non-negative weights with a positive sum, got sum {total!r}"
        )
    if not 0.0 <= offset < 1.0:
        raise ValueError(f"offset must be in [0, 1), got {offset!r}")
    positive = w > 0
    distinct = not replacement and int(positive.sum()) >= count
    expected = inclusion_probabilities(w, count) if distinct else count * w / total
    edges = expected.cumsum(0)
    # an edge that is an integer up to rounding (equal weights: 3, 6, 9 summed as 3.0000000000000004, ...) is that
    # integer, or a point landing on it (offset 0) goes to the wrong side and one candidate gets ceil + 1
    whole = edges.round()
    edges = torch.where((edges - whole).abs() <= 1e-12 * count, whole, edges)
    points = offset + torch.arange(count, dtype=torch.float64)
    chosen = torch.searchsorted(edges, points, right=True)
    # rounding may leave the last edge a hair below the last point: that point belongs to the last positive weight
    last = int(positive.nonzero().max())
    return chosen.clamp_(max=last)


def select_candidates(
    weights: Tensor | None,
    count: int,
    seed: int,
    step: int,
    replacement: bool = True,
    placebo: bool = False,
) -> tuple[Tensor, bool]:
    """The ``count`` candidates a step trains on: a pure function of ``(weights, count, seed, step)``.

    Args:
        weights: ``[N]`` the pool's importance weights, in pool order; ``None``: plain sampling (the warm-up, the
            ``baseline`` target), which takes the pool's first ``count`` candidates, i.e. the plain stream's batch.
        count: ``|B|``, at most ``N``.
        seed: the run's seed of the selection.
        step: the global step.
        replacement: systematic resampling with (default) or without replacement.
        placebo: deal the weights to the candidates at random (:func:`placebo_permutation`) before the draw: the
            same draw as the targeted choice (as many repeats), blind to which candidate is which.

    Returns:
        ``(indices, fallback)``: ``[count]`` sorted int64 pool indices, and whether the weights summed to 0 so that
        the plain choice (the first ``count``) was taken instead.

    Example::

        >>> select_candidates(None, 3, seed=0, step=5)
        (tensor([0, 1, 2]), False)
        >>> select_candidates(torch.tensor([0.0, 0.0, 2.0, 2.0]), 2, seed=0, step=5)
        (tensor([2, 3]), False)
    """
    plain = torch.arange(count)
    if weights is None:
        return plain, False
    if placebo:
        weights = weights[placebo_permutation(seed, step, weights.numel())]
    if not float(weights.double().sum()) > 0.0:
        return plain, True
    offset = float(torch.rand((), generator=selection_generator(seed, step), dtype=torch.float64))
    return systematic_resample(weights, count, offset, replacement), False


def standardize(difficulties: Tensor, low: float, high: float, support_sigmas: float) -> Tensor:
    """``z = (difficulty - a) / s`` with ``a = (low + high) / 2``, ``s = (high - low) / (2 c)``: the affine map of
    the support ``S = [low, high]`` onto ``[-c, c]`` on which every target is defined (float64)."""
    center, scale = 0.5 * (low + high), (high - low) / (2.0 * support_sigmas)
    return (difficulties.to(torch.float64) - center) / scale


def target_cdf(z: Tensor, target: Target, support_sigmas: float, progress: float | None = None) -> Tensor:
    """The target's distribution function at standardised difficulties ``z`` (0 below ``-c``, 1 above ``c``).

    Integrates :meth:`Target.density` with the trapezoidal rule on 4,097 points of ``[-c, c]`` (error ~1e-4 at a
    jump, as the easy/hard halves have at 0). If the chosen episodes follow the target, these values are uniform
    on ``[0, 1]`` whatever ``mu``, ``sigma`` and the progress were at each step, so those of many steps can be
    pooled into one goodness-of-fit test.

    Example::

        >>> from lightning_episodes.weighting import get_target
        >>> [round(v, 4) for v in target_cdf(torch.tensor([-3.0, 0.0, 1.29]), get_target("uniform"), 2.58).tolist()]
        [0.0, 0.5, 0.75]
    """
    c = float(support_sigmas)
    grid = torch.linspace(-c, c, _CDF_POINTS, dtype=torch.float64)
    density = target.density(grid, c, progress).to(torch.float64)
    steps = 0.5 * (density[1:] + density[:-1]) * (grid[1:] - grid[:-1])
    cumulative = torch.cat([torch.zeros(1, dtype=torch.float64), steps.cumsum(0)])
    cumulative = cumulative / cumulative[-1]
    values = np.interp(z.detach().to("cpu", torch.float64).numpy(), grid.numpy(), cumulative.numpy())
    return torch.from_numpy(values)


def target_quantiles(difficulties: Tensor, proposal: Proposal, target: Target, progress: float | None = None) -> Tensor:
    """:func:`target_cdf` at ``difficulties`` standardised on ``proposal``'s support as it stands: uniform on
    ``[0, 1]`` when the difficulties follow the target (float64, CPU)."""
    low, high = proposal.support()
    c = proposal.support_sigmas
    return target_cdf(standardize(difficulties, low, high, c), target, c, progress)


def selection_fidelity(
    difficulties: Tensor,
    proposal: Proposal,
    target: Target,
    pool: int,
    batch: int,
    chosen: int = 1000,
    seed: int = 0,
    progress: float | None = None,
    out_of_support: str = "zero",
) -> float:
    """How closely resampling with ``pool`` candidates per episode follows ``target`` on ``difficulties``: the
    Kolmogorov-Smirnov distance from the uniform law of :func:`target_cdf` at ``chosen`` simulated choices.

    Each simulated step draws ``pool x batch`` candidates from ``difficulties`` (with replacement: their empirical law
    stands for the plain stream's), weighs them with ``proposal`` as it stands and chooses ``batch`` of them as
    :func:`select_candidates` does; the steps continue until ``chosen`` episodes are chosen. The distance is what the
    callback's ``weighting/ks`` would read over as many episodes if the difficulties stayed as they are (about
    ``1.36 / sqrt(chosen)`` of it is sampling noise). Deterministic in ``seed``.

    Args:
        difficulties: a sample of plain difficulties (e.g. the warm-up's), any shape; non-finite ones are dropped.
        proposal: a fitted (ready) proposal ``q``.
        target: the target ``p``.
        pool: ``k``, candidates per chosen episode, ``>= 1`` (1: plain sampling).
        batch: ``|B|``, episodes chosen per step, ``>= 1``.
        chosen: how many chosen episodes the distance is measured on.
        seed: seeds the draws and the choices.
        progress: ``t / T`` for a target that depends on it.
        out_of_support: ``"zero"`` or ``"clamp"``, for the weights.

    Raises:
        ValueError: for ``pool``, ``batch`` or ``chosen`` below 1, or no finite difficulty.
    """
    if min(pool, batch, chosen) < 1:
        raise ValueError(f"pool, batch and chosen must be >= 1, got {pool}, {batch} and {chosen}")
    sample = difficulties.detach().to("cpu", torch.float64).reshape(-1)
    sample = sample[torch.isfinite(sample)]
    if not sample.numel():
        raise ValueError("selection_fidelity needs at least one finite difficulty")
    steps = -(-chosen // batch)
    generator = torch.Generator().manual_seed(seed)
    candidates = sample[torch.randint(sample.numel(), (steps, pool * batch), generator=generator)]
    weights = proposal.weights(candidates, target, out_of_support, progress).to(torch.float64)
    picks = [
        candidates[step, select_candidates(None if pool == 1 else weights[step], batch, seed, step)[0]]
        for step in range(steps)
    ]
    values = target_quantiles(torch.cat(picks)[:chosen], proposal, target, progress)
    return float(stats.kstest(values.numpy(), "uniform").statistic)

"""Effective sample size and the ESS-normalised weighted loss (Arnold et al., NeurIPS 2021, Eq. 3).

Algorithm 1 of the paper trains on ``sum_j w_j L_j / ESS`` with ``ESS = (sum_j w_j)^2 / sum_j w_j^2``
(``divisor="ess"``); ``divisor="sum_weights"`` gives the self-normalised estimate ``sum_j w_j L_j / sum_j w_j``
instead, and ``"denominator"`` divides by a given ``denominator`` (a running average of ``sum w``, see
:mod:`~lightning_episodes.weighting.normalizers`, whose ``normalization`` names choose among these). All reduce to
the plain mean of the losses when every weight is 1 (for ``"denominator"``: with ``denominator = |B|``).
:class:`EpisodeWeights` carries a step's weights and their divisor from the weighting strategy to the module.

Under data parallelism each of ``W`` processes holds a slice of the global batch. The statistics
(``sum w``, ``sum w^2``, counts) are summed over processes and each process returns
``W sum_local w L / ESS_global``; averaging the gradients over processes, as DDP does, then gives
exactly the single-process gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, Literal, NamedTuple

import torch
from torch import Tensor

__all__ = [
    "LOSS_DIVISORS",
    "EpisodeWeights",
    "LossDivisor",
    "WeightedLoss",
    "effective_sample_size",
    "ess_weighted_loss",
    "weighted_loss",
]

#: What :func:`weighted_loss` divides ``sum w L`` by: the ESS, ``sum w``, or a given denominator.
LossDivisor = Literal["ess", "sum_weights", "denominator"]

#: Accepted values of ``divisor`` in :func:`weighted_loss`.
LOSS_DIVISORS: Final[tuple[str, ...]] = ("ess", "sum_weights", "denominator")


class EpisodeWeights(NamedTuple):
    """A step's importance weights for this process's episodes and what the loss divides by.

    What a weighting strategy returns to :meth:`EpisodicModule.training_step`, which passes it on to
    :func:`weighted_loss`.

    Attributes:
        weights: ``[B_local]`` detached, finite, non-negative weights of this process's episodes.
        divisor: ``"ess"`` (``sum w L / ESS``), ``"sum_weights"`` (``sum w L / sum w``) or ``"denominator"``
            (``sum w L / denominator``), each over the global batch.
        denominator: the global denominator for ``"denominator"`` (> 0; a 0-d tensor keeps it on the device);
            ``None`` otherwise.
    """

    weights: Tensor
    divisor: LossDivisor = "ess"
    denominator: float | Tensor | None = None


def stat_dtype(device: torch.device) -> torch.dtype:
    """The dtype in which statistics of weights and difficulties are summed on ``device``: float64, or float32 on
    MPS, which has no float64 (the one place this is decided)."""
    return torch.float32 if device.type == "mps" else torch.float64


def _clean_weights(weights: Tensor, dtype: torch.dtype) -> Tensor:
    w = weights.detach().to(dtype)
    return torch.where(torch.isfinite(w) & (w > 0), w, torch.zeros_like(w))


def effective_sample_size(weights: Tensor) -> Tensor:
    """Kish's effective sample size ``ESS = (sum w)^2 / sum w^2`` of importance weights.

    Args:
        weights: importance weights, any shape; non-finite or negative entries count as 0.

    Returns:
        A 0-d tensor in ``[0, weights.numel()]`` (0 when ``sum w = 0``), in the floating dtype of
        ``weights`` (the default dtype for integer input), detached.

    Example::

        >>> effective_sample_size(torch.tensor([1.0, 1.0, 1.0, 1.0])).item()
        4.0
        >>> round(effective_sample_size(torch.tensor([2.0, 1.0, 1.0, 0.0])).item(), 6)  # 4^2 / 6
        2.666667
    """
    out_dtype = weights.dtype if weights.is_floating_point() else torch.get_default_dtype()
    w = _clean_weights(weights, stat_dtype(weights.device))
    # Scaling by the largest weight keeps the squares finite for any finite weights.
    scale = w.max() if w.numel() else w.new_zeros(())
    w = w / torch.where(scale > 0, scale, torch.ones_like(scale))
    s1, s2 = w.sum(), (w * w).sum()
    ess = torch.where(s2 > 0, s1 * s1 / torch.where(s2 > 0, s2, torch.ones_like(s2)), torch.zeros_like(s1))
    return ess.clamp(0.0, float(weights.numel())).to(out_dtype)


class WeightedLoss(NamedTuple):
    """What :func:`weighted_loss` returns; every tensor but ``loss`` is detached.

    Attributes:
        loss: this process's loss to back-propagate (in the dtype of the losses).
        ess: global effective sample size ``(sum w)^2 / sum w^2`` (0 when skipped).
        sum_weights: global ``sum w`` over the episodes with a finite loss.
        sum_squared_weights: global ``sum w^2``.
        batch_size: ``|B|``, the global number of episodes (non-finite ones included).
        batch_over_ess: ``|B| / ESS``, the factor by which the ESS normalisation scales the plain
            importance-sampling estimate up (logged each step; 0 when the step is skipped).
        skipped: 0-d bool tensor, ``True`` when ``sum w = 0``: the loss is ``0 * sum L`` (zero gradient).
        nonfinite: 0-d int64 tensor, the global number of episodes whose loss was not finite (given weight 0).
        divided_by: the global number the weighted sum was divided by: the ESS with ``"ess"``, ``sum w`` with
            ``"sum_weights"``, the denominator with ``"denominator"`` (1 when the step is skipped).

    Every field stays on the device: reading one (``bool(out.skipped)``, ``int(out.nonfinite)``) synchronises
    with it, which a training step leaves to its logging steps.
    """

    loss: Tensor
    ess: Tensor
    sum_weights: Tensor
    sum_squared_weights: Tensor
    batch_size: Tensor
    batch_over_ess: Tensor
    skipped: Tensor
    nonfinite: Tensor
    divided_by: Tensor

    @property
    def loss_scale(self) -> Tensor:
        """``sum w / divided_by``, the factor by which the step's loss exceeds the self-normalised estimate ``sum w L /
        sum w`` of the same weights: ``sum w / ESS`` with ``"ess"``, 1 with ``"sum_weights"``, ``sum w /
        denominator`` with ``"denominator"`` (0 when the step is skipped). Computed when read (a logging step), not
        in every training step."""
        return torch.where(self.skipped, 0.0, self.sum_weights / self.divided_by)


def _check_inputs(
    losses: Tensor, weights: Tensor, divisor: str, world_size: int, denominator: float | Tensor | None
) -> None:
    if divisor not in LOSS_DIVISORS:
        raise ValueError(f"divisor must be one of {list(LOSS_DIVISORS)}, got {divisor!r}")
    if (divisor == "denominator") != (denominator is not None):
        raise ValueError(f"denominator must be given exactly for divisor='denominator', got {denominator!r}")
    if isinstance(denominator, float | int) and not (math.isfinite(denominator) and denominator > 0):
        raise ValueError(f"denominator must be a finite number > 0, got {denominator!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if losses.shape != weights.shape:
        raise ValueError(f"weights must have the shape of losses, got {tuple(weights.shape)} and {tuple(losses.shape)}")


def weighted_loss(
    losses: Tensor,
    weights: Tensor,
    divisor: str = "ess",
    reduce: Callable[[Tensor], Tensor] | None = None,
    world_size: int = 1,
    denominator: float | Tensor | None = None,
) -> WeightedLoss:
    """The weighted loss of a (slice of a) batch of episodes, with its statistics (Algorithm 1, Eq. 3).

    With ``divisor="ess"`` the loss is ``W sum_local w L / ESS_global``; with ``"sum_weights"`` it is
    ``W sum_local w L / sum_global w``; with ``"denominator"`` it is ``W sum_local w L / denominator``. Weights are
    detached (no gradient flows through them).
    Episodes whose loss is not finite get weight 0 and their loss is masked to 0 before the product.
    When the global ``sum w`` is 0 the loss is ``0 * sum L`` (graph connected, zero gradient) and the
    step is reported as skipped.

    Args:
        losses: per-episode losses of this process, shape ``[B_local]`` (any shape matching
            ``weights``).
        weights: importance weights of the same shape (finite, >= 0; others count as 0).
        divisor: ``"ess"`` (default, the paper's), ``"sum_weights"`` or ``"denominator"``.
        reduce: sums a float64 tensor over processes (e.g.
            ``lambda t: trainer.strategy.reduce(t, reduce_op="sum")``); called exactly once, on
            every process. ``None``: a single process.
        world_size: ``W``, the number of processes that share the global batch.
        denominator: for ``"denominator"`` only: the global denominator (> 0), the same on every process; a 0-d
            tensor is used without a device sync (a non-positive one makes the step skipped).

    Returns:
        A :class:`WeightedLoss`, computed without a host synchronisation.

    Raises:
        ValueError: if ``divisor`` is unknown, ``world_size`` is not an integer >= 1, the shapes differ,
            or ``denominator`` is missing, superfluous or not a finite number > 0.

    Example::

        >>> out = weighted_loss(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 1.0, 2.0]))
        >>> round(out.ess.item(), 4), round(out.loss.item(), 4)  # ESS = 16 / 6; loss = 9 / ESS
        (2.6667, 3.375)
        >>> round(out.loss_scale.item(), 4)  # sum w / ESS = 4 / (16 / 6): the loss is 1.5 times 9 / sum w
        1.5
    """
    _check_inputs(losses, weights, divisor, world_size, denominator)
    # (few, small ops: a step's handful of episodes costs the dispatch of each op, not its arithmetic)
    dtype = stat_dtype(losses.device)
    finite = torch.isfinite(losses.detach())
    w = weights.detach().to(losses.device, dtype)
    w = torch.where(finite & torch.isfinite(w) & (w > 0), w, 0.0)
    # Mask before the product: 0 * inf is NaN.
    masked = torch.where(finite, losses, 0.0).to(dtype)
    size = torch.full((), float(losses.numel()), dtype=dtype, device=losses.device)  # no host-to-device copy
    local = torch.stack([w.sum(), (w * w).sum(), size, (~finite).sum().to(dtype)])
    stats = local if reduce is None else reduce(local).to(device=losses.device, dtype=dtype)
    s1, s2, size, nonfinite = stats.unbind()
    sums = stats[:2]
    ok = ((sums > 0) & torch.isfinite(sums)).all()
    # s1 * (s1 / s2) rather than s1^2 / s2: no overflow; Cauchy-Schwarz bounds it by |B| (rounding aside). With
    # s1, s2 finite and > 0 it is > 0 or +inf, never NaN, and finite after the clamp: only its sign is checked.
    ess = torch.where(ok, s1 * (s1 / torch.where(ok, s2, 1.0)), 0.0).clamp(max=size)
    ok = ok & (ess > 0)
    if divisor == "denominator":
        assert denominator is not None  # checked above
        if isinstance(denominator, Tensor):
            divide_by = denominator.to(device=losses.device, dtype=dtype)
        else:
            divide_by = torch.full((), float(denominator), dtype=dtype, device=losses.device)
        ok = ok & torch.isfinite(divide_by) & (divide_by > 0)  # a tensor is checked here, without a sync
        divide_by = torch.where(ok, divide_by, 1.0)
    else:
        divide_by = torch.where(ok, ess if divisor == "ess" else s1, 1.0)
    weighted = (w * masked).sum() * (world_size / divide_by)
    loss = torch.where(ok, weighted, 0.0 * masked.sum())
    return WeightedLoss(
        loss=loss.to(losses.dtype),
        ess=torch.where(ok, ess, 0.0),
        sum_weights=s1,
        sum_squared_weights=s2,
        batch_size=size,
        batch_over_ess=torch.where(ok, size / torch.where(ok, ess, 1.0), 0.0),
        skipped=~ok,
        nonfinite=nonfinite.to(torch.int64),
        divided_by=divide_by,
    )


def ess_weighted_loss(losses: Tensor, weights: Tensor, divisor: str = "ess") -> Tensor:
    """``sum w L / ESS`` (or ``sum w L / sum w``) of one process's batch, without device sync.

    The single-process case of :func:`weighted_loss`; see there for the degenerate cases.

    Args:
        losses: per-episode losses, shape ``[B]``.
        weights: importance weights of the same shape (detached inside).
        divisor: ``"ess"`` (default, Eq. 3) or ``"sum_weights"``.

    Returns:
        The scalar loss, in the dtype of ``losses``.

    Raises:
        ValueError: if ``divisor`` is unknown or the shapes differ.

    Example::

        >>> losses = torch.tensor([1.0, 2.0, 3.0, 6.0])
        >>> ess_weighted_loss(losses, torch.ones(4)).item()  # w = 1: the plain mean
        3.0
        >>> ess_weighted_loss(losses, torch.tensor([1.0, 1.0, 2.0, 0.0]), divisor="sum_weights").item()
        2.25
    """
    return weighted_loss(losses, weights, divisor).loss

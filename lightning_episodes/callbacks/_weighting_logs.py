"""What :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback` records and logs about a training step.

:class:`WeightingStep` is the record of one step over the global batch; :func:`step_metrics` turns it into the
``weighting/*`` values the callback logs where the loggers write (:func:`log_values`, :func:`log_grad_norm`);
:func:`log_histograms` sends the global batch's difficulties and weights to TensorBoard.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger
from torch import Tensor

from lightning_episodes._lightning import logger_writes  # the module logs train/* on the same steps

__all__ = ["WeightingStep", "log_grad_norm", "log_histograms", "log_values", "logger_writes", "step_metrics"]


class WeightingStep(NamedTuple):
    """What the callback did at the last training step, over the global batch (all ranks, in order).

    Attributes:
        step: ``trainer.global_step`` when the step's weights were computed (0-based).
        progress: ``t / T`` with ``T = trainer.max_steps`` (``None`` without ``max_steps``).
        mu: the proposal's location the weights used (before the step's update; see ``Proposal.location``).
        sigma: the proposal's scale the weights used.
        difficulties: float64 ``[|B|]`` on the CPU: the difficulties the weights were computed from (the
            reference model's offline, the trained model's online).
        weights: float64 ``[|B|]`` on the CPU: the weights the loss used (after shuffling and normalising).
        warmup: ``True`` while the online warm-up gave every episode weight 1.
        raw_weights: float64 ``[|B|]``: ``p / q`` before shuffling and normalising.
        support: the support ``(low, high)`` the weights used.
    """

    step: int
    progress: float | None
    mu: float
    sigma: float
    difficulties: Tensor
    weights: Tensor
    warmup: bool
    raw_weights: Tensor | None = None
    support: tuple[float, float] = (math.nan, math.nan)


def step_metrics(step: WeightingStep, weighted: Any, curriculum: bool, estimated: bool = True) -> dict[str, float]:
    """The step's ``weighting/*`` values (without the prefix) from its record and the module's ``WeightedLoss``.

    Args:
        step: the step's record.
        weighted: the :class:`~lightning_episodes.weighting.WeightedLoss` of the step (global statistics).
        curriculum: add ``mu_t``, the curriculum target's centre ``low + (high - low) t / T``.
        estimated: whether the support was estimated from any difficulty yet (``outside_support`` is 0 before).

    Returns:
        ``mu``, ``sigma``, ``low``, ``high``, ``ess``, ``batch_over_ess``, ``ess_over_batch``, ``sum_w_over_ess``,
        ``weight_min``/``mean``/``max`` and ``outside_support`` (fraction of the finite difficulties outside S).
    """
    size, ess, (low, high) = len(step.weights), float(weighted.ess), step.support
    finite = step.difficulties[torch.isfinite(step.difficulties)]
    outside = float(((finite < low) | (finite > high)).double().mean()) if finite.numel() and estimated else 0.0
    values = {
        "mu": step.mu,
        "sigma": step.sigma,
        "low": low,
        "high": high,
        "ess": ess,
        "batch_over_ess": float(weighted.batch_over_ess),
        "ess_over_batch": ess / float(weighted.batch_size) if float(weighted.batch_size) else 0.0,
        "sum_w_over_ess": float(weighted.sum_weights) / ess if ess > 0 else 0.0,
        "weight_min": float(step.weights.min()) if size else 0.0,
        "weight_mean": float(step.weights.mean()) if size else 0.0,
        "weight_max": float(step.weights.max()) if size else 0.0,
        "outside_support": outside,
    }
    if curriculum and step.progress is not None:
        values["mu_t"] = low + (high - low) * step.progress
    return values


def log_histograms(trainer: pl.Trainer, step: WeightingStep, every: int) -> None:
    """The global batch's difficulties and weights as TensorBoard histograms every ``every`` steps (0: never)."""
    if not every or step.step % every or not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):  # other loggers have no histograms
            logger.experiment.add_histogram("weighting/difficulties", step.difficulties, step.step)
            logger.experiment.add_histogram("weighting/weights", step.weights, step.step)


def log_values(pl_module: pl.LightningModule, values: dict[str, float], batch_size: int) -> None:
    """``weighting/<key>`` for each value, on this step (identical on every rank already: no sync)."""
    for key, value in values.items():
        pl_module.log(f"weighting/{key}", value, on_step=True, on_epoch=False, sync_dist=False, batch_size=batch_size)


def log_grad_norm(pl_module: pl.LightningModule) -> None:
    """``weighting/grad_norm``: the total 2-norm of the gradients (in float64), before the optimizer step."""
    norms = [p.grad.detach().double().norm() for p in pl_module.parameters() if p.grad is not None]
    total = torch.stack(norms).norm() if norms else torch.zeros((), dtype=torch.float64)
    pl_module.log("weighting/grad_norm", total.float(), on_step=True, on_epoch=False, sync_dist=False)

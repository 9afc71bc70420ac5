"""The default optimiser, and learning-rate schedules that anneal to zero at the last step (``trainer.max_steps``).

PyTorch's schedulers take the length of the run when they are built (``CosineAnnealingLR(T_max=...)``), which
a YAML config cannot know without repeating ``max_steps``. These take it from the Trainer instead:
:meth:`~lightning_episodes.EpisodicModule.configure_optimizers` binds them to ``trainer.max_steps``, and a run
without ``max_steps`` is refused before it starts. The step schedule (halve every N steps, as learn2learn's
examples do) and the constant rate need no length: they are PyTorch's ``StepLR`` and no scheduler
(``configs/schedules/``).

Every schedule here is stepped once per optimiser step (``interval: step``) and is a closed form of the step
count, so a resumed run continues with exactly the rates of an uninterrupted one.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["AnnealToZero", "CosineToZero", "LinearToZero", "check_schedule", "default_optimizer"]


def default_optimizer(params: Any) -> torch.optim.Optimizer:
    """Adam with learning rate 1e-3, the paper's optimiser; on CUDA its fused kernel (the same update in one launch,
    which :class:`~lightning_episodes.callbacks.NonFiniteGuard` can skip without a host read, and CUDA graphs can
    capture)."""
    params = list(params)
    tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
    on_cuda = bool(tensors) and all(t.is_cuda for t in tensors)
    return torch.optim.Adam(params, lr=1e-3, fused=True if on_cuda else None)


class AnnealToZero(LRScheduler):
    """Keep each group's initial learning rate for ``start`` steps, then anneal it to 0 at ``max_steps``.

    Subclasses give the shape of the anneal (:meth:`shape`: 1 at its start, 0 at its end).

    Args:
        optimizer: the optimiser whose learning rates it sets.
        start: optimiser steps at the initial rate before the anneal begins (default 0).
        max_steps: the step at which the rate reaches 0; ``None`` (default): ``trainer.max_steps``, bound when
            the module configures its optimiser.
        last_epoch: the index of the last step (``-1``: a new run), as in PyTorch's schedulers.

    Raises:
        ValueError: ``start`` is negative, or ``max_steps`` is given and not larger than ``start``.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, start: int = 0, max_steps: int | None = None, last_epoch: int = -1
    ) -> None:
        if start < 0:
            raise ValueError(f"lr_scheduler start must be >= 0 optimiser steps, got {start}")
        self.start = start
        self.max_steps: int | None = None
        if max_steps is not None:
            self.bind(max_steps)
        super().__init__(optimizer, last_epoch)

    def shape(self, progress: float) -> float:
        """The rate's factor at ``progress`` in [0, 1] of the anneal (1 at 0, 0 at 1)."""
        raise NotImplementedError

    def bind(self, max_steps: int | None) -> None:
        """Anneal to 0 at ``max_steps`` (the Trainer's).

        Raises:
            ValueError: ``max_steps`` is unset (``None`` or -1) or not larger than ``start``.
        """
        name = type(self).__name__
        if max_steps is None or max_steps < 0:
            raise ValueError(
                f"lr_scheduler {name} anneals to 0 at trainer.max_steps, which is not set: set --trainer.max_steps N"
            )
        if max_steps <= self.start:
            raise ValueError(
                f"lr_scheduler {name}: trainer.max_steps ({max_steps}) must be larger than its start ({self.start})"
            )
        self.max_steps = max_steps

    def factor(self, step: int) -> float:
        """The multiple of the initial rate after ``step`` optimiser steps."""
        if step <= self.start:
            return 1.0  # also before bind(): at step 0 every anneal is at its initial rate
        if self.max_steps is None:
            raise RuntimeError(f"{type(self).__name__} was stepped before it was bound to max_steps")
        return self.shape(min(1.0, (step - self.start) / (self.max_steps - self.start)))

    def get_lr(self) -> list[float]:  # type: ignore[override]
        factor = self.factor(self.last_epoch)
        return [float(base) * factor for base in self.base_lrs]

    def state_dict(self) -> dict[str, Any]:
        # the run's length is the Trainer's, bound anew on resume (a resumed run may be given more steps)
        return {key: value for key, value in super().state_dict().items() if key != "max_steps"}


class CosineToZero(AnnealToZero):
    """Cosine annealing of the learning rate to 0 at ``trainer.max_steps``, after ``start`` steps at the initial rate:
    ``lr_t = lr_0 · (1 + cos(π (t − start) / (max_steps − start))) / 2`` (Loshchilov & Hutter, 2017, without
    restarts)."""

    def shape(self, progress: float) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * progress))


class LinearToZero(AnnealToZero):
    """Linear decay of the learning rate to 0 at ``trainer.max_steps``, after ``start`` steps at the initial rate
    (``start=100`` in ``configs/schedules/linear.yaml``: the weighting callback's warm-up, so that the proposal is
    fitted at the full rate)."""

    def shape(self, progress: float) -> float:
        return 1.0 - progress


def check_schedule(scheduler: object, max_steps: int | None) -> None:
    """Bind an :class:`AnnealToZero` schedule to the run's ``max_steps`` (other schedulers need nothing).

    Raises:
        ValueError: the schedule anneals to the last step and the run has none, or ``max_steps <= start``.
    """
    if isinstance(scheduler, AnnealToZero) and scheduler.max_steps is None:
        scheduler.bind(max_steps)

"""Non-finite training steps: skipped, counted and, after a few in a row, a clear stop.

A learning rate that is far too large makes the parameters NaN after one step, or the batch-norm running statistics
inf; every later step is then non-finite too. Without a check, the run goes on, exits 0 and evaluates a broken model
at chance level. :class:`NonFiniteGuard` skips each step whose averaged gradients, parameters or floating-point
buffers (batch-norm statistics) hold a NaN or an inf, and stops the run after ``max_consecutive`` such steps in a
row. The command line adds one to every Trainer that has none (:func:`~lightning_episodes.callbacks.default_callbacks`),
and :class:`~lightning_episodes.EpisodicModule` refuses to evaluate a model with non-finite parameters, buffers or
outputs (:mod:`lightning_episodes.algorithms.nonfinite`).
"""

from __future__ import annotations

import math
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor
from typing_extensions import override

from lightning_episodes._lightning import logger_writes
from lightning_episodes.algorithms.nonfinite import (
    KINDS,
    NonFiniteError,
    Owned,
    any_nonfinite,
    floating_tensors,
    nonfinite_flags,
    nonfinite_report,
    nonfinite_suspicion,
    state_owners,
    tensors_nonfinite,
)
from lightning_episodes.callbacks._nonfinite_tally import Tally

#: the checks live with the algorithms, which refuse to evaluate a non-finite model; kept importable from here
__all__ = ["KINDS", "NonFiniteError", "NonFiniteGuard", "any_nonfinite", "nonfinite_flags", "nonfinite_report",
           "nonfinite_suspicion"]  # fmt: skip


class NonFiniteGuard(Callback):
    """Skip training steps with non-finite gradients, parameters or buffers; stop after several in a row.

    Checked after the backward pass and DDP's gradient averaging, before the optimiser step. A non-finite step is
    skipped: the optimiser changes no parameter and none of its state (the step still counts as a global step, and a
    scheduler still steps). It is counted (``skipped_steps``, logged as ``train/nonfinite_steps``) with a warning;
    after ``max_consecutive`` skipped steps in a row the run stops with :class:`NonFiniteError`. Non-finite
    parameters or batch-norm statistics do not recover by skipping, so such a run stops too. Under 16-bit mixed
    precision the gradient scaler skips overflowing steps itself; only the parameters and buffers are checked then.

    Two ways to decide, the same skips:

    * **On the host** (the default on a CPU, and before the optimiser has state): one fused 2-norm per gradient,
      parameter and buffer, summed into one number (:func:`nonfinite_suspicion`; ProtoNet ResNet-12 on one CPU
      thread: ~15 ms; conv4: ~0.4 ms), one all-reduce of it under DDP (every rank skips the same steps) and one host
      read; an exact ``isfinite`` check decides a suspicious step. A skip drops the gradients
      (``zero_grad(set_to_none=True)``). A diverged run stops at exactly its ``max_consecutive``-th non-finite step
      in a row, before that step's optimiser step.
    * **On the device** (``on_device``; by default on CUDA), with an optimiser that takes a ``found_inf`` flag — the
      fused ones (``torch.optim.Adam``/``AdamW``/``SGD`` with ``fused=True``; the default optimiser is fused on
      CUDA): one max-|x| per tensor (exact: no overflow), one all-reduce of three flags, and the step's skip flag
      handed to the optimiser, whose kernel then leaves the parameters and its state (moments, step counts) as they
      were — GradScaler's mechanism. Nothing is read per step: the host reads the counts on the steps where the
      loggers write, every ``max_consecutive``-th step (global steps ``max_consecutive - 1``, ``2 max_consecutive -
      1``, ...), on the last step of ``max_steps`` and when training ends. The warnings then cover every step skipped
      since the last read, and a diverged run stops at the first read at or after its ``max_consecutive``-th
      non-finite step in a row (so at most ``max_consecutive - 1`` steps later than on the host, each of those
      steps skipped too); the message names the step where the limit was reached. Until every parameter has
      optimiser state (the first step), the host decides: a fused SGD with momentum skipped by ``found_inf`` on its
      first step would keep an uninitialised momentum buffer.

    The parameters and buffers are those of the submodules found at the start of each training epoch.
    The command line adds a ``NonFiniteGuard()`` to every Trainer without one: list one in ``trainer.callbacks`` to
    change its options; in Python, add it yourself (:func:`~lightning_episodes.callbacks.default_callbacks`).

    Args:
        max_consecutive: non-finite steps in a row after which training stops (>= 1). Default: 5.
        on_device: decide on the device without a host read per step, where the optimiser allows it (see above).
            ``None`` (default): on CUDA devices only (a host read costs nothing on a CPU).

    Raises:
        ValueError: if ``max_consecutive`` is not an integer >= 1.

    Example::

        >>> NonFiniteGuard(max_consecutive=3).max_consecutive
        3
    """

    def __init__(self, max_consecutive: int = 5, on_device: bool | None = None) -> None:
        if isinstance(max_consecutive, bool) or not isinstance(max_consecutive, int) or max_consecutive < 1:
            raise ValueError(f"NonFiniteGuard: max_consecutive must be an integer >= 1, got {max_consecutive!r}")
        self.max_consecutive = max_consecutive
        self.on_device = on_device
        #: non-finite steps skipped in this run, and how many in a row up to the last step (on the device path: up
        #: to the last read; :meth:`state_dict` reads the device)
        self.skipped_steps = 0
        self.consecutive = 0
        self._owners: tuple[list[Owned], list[Owned]] | None = None
        self._tally: Tally | None = None
        #: optimisers whose every parameter has state (the device path may skip their steps)
        self._ready: set[int] = set()

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the walk over the submodules, once an epoch rather than every step (the dictionaries are read live)
        self._owners = state_owners(pl_module)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._read(trainer, pl_module, log=False)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._owners, self._tally = None, None
        self._ready.clear()

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        grads = [] if scaler is not None else [p.grad for p in params if p.grad is not None]
        if self._owners is None:
            self._owners = state_owners(pl_module)
        if scaler is None and self._decides_on_device(pl_module, optimizer, params):
            self._judge_on_device(trainer, pl_module, optimizer, grads)
            return
        self._read(trainer, pl_module, log=False)  # nothing pending: the host path counts from here
        with torch.no_grad():  # the hook runs inside the optimiser's closure, where autograd records
            suspicion = nonfinite_suspicion(
                grads + floating_tensors(self._owners[0] + self._owners[1]), pl_module.device
            )
        # summed over ranks (every rank skips the same steps: DDP averages gradients, but buffers are per rank); the
        # one host read of the step
        if math.isfinite(trainer.strategy.reduce(suspicion, reduce_op="sum").item()):
            self.consecutive = 0
            return
        # the fast check may have met a finite value above ~1e19: decide exactly (every rank is here, since the
        # suspicion was summed over the ranks)
        flags = trainer.strategy.reduce(nonfinite_flags(pl_module, grads), reduce_op="sum")
        bad = [flag > 0 for flag in flags.tolist()]
        if not any(bad):
            self.consecutive = 0
            return
        grads_by_name = {n: p.grad for n, p in pl_module.named_parameters() if p.grad is not None}
        report = nonfinite_report(pl_module, bad, grads_by_name)
        optimizer.zero_grad(set_to_none=True)  # the skip: the optimiser changes nothing without gradients
        self.skipped_steps += 1
        self.consecutive += 1
        step = trainer.global_step
        pl_module.log("train/nonfinite_steps", float(self.skipped_steps), on_step=True, on_epoch=False)
        if self.consecutive >= self.max_consecutive:
            raise self._stop(step, step, report)
        rank_zero_warn(
            f"step {step}: {report}; the step is skipped ({self.consecutive} in a row, training stops at "
            f"NonFiniteGuard.max_consecutive={self.max_consecutive})"
        )

    # -- the device path -------------------------------------------------------------------------------------
    def _decides_on_device(self, pl_module: pl.LightningModule, optimizer: Any, params: list[Tensor]) -> bool:
        on_device = pl_module.device.type == "cuda" if self.on_device is None else self.on_device
        if not (on_device and getattr(optimizer, "_step_supports_amp_scaling", False)):
            return False
        if not all(group.get("fused") for group in optimizer.param_groups):
            return False
        if id(optimizer) not in self._ready:
            if not all(p in optimizer.state for p in params if p.grad is not None):
                return False
            self._ready.add(id(optimizer))
        return True

    def _judge_on_device(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any, grads: list[Tensor]
    ) -> None:
        assert self._owners is not None
        device = pl_module.device
        if self._tally is None:
            self._tally = Tally(self.max_consecutive, device, run=self.consecutive)
        parameters, buffers = floating_tensors(self._owners[0]), floating_tensors(self._owners[1])
        with torch.no_grad():
            kinds = torch.stack([tensors_nonfinite(group, device) for group in (grads, parameters, buffers)])
            kinds = trainer.strategy.reduce(kinds, reduce_op="sum")
            optimizer.found_inf = self._tally.judge(kinds, trainer.global_step)
        step = trainer.global_step
        last = 0 < trainer.max_steps <= step + 1
        if logger_writes(trainer) or (step + 1) % self.max_consecutive == 0 or last:
            self._read(trainer, pl_module)

    def _read(self, trainer: pl.Trainer, pl_module: pl.LightningModule, log: bool = True) -> None:
        """Bring the device counts to the host: warn about the steps skipped since the last read, stop at the
        limit."""
        if self._tally is None:
            return
        reading = self._tally.read()
        self.consecutive = reading.run
        if not reading.skipped:
            return
        self.skipped_steps += reading.skipped
        report = "non-finite " + " and ".join(k for k, bad in zip(KINDS, reading.kinds, strict=True) if bad)
        if any(reading.kinds[1:]):  # parameters and buffers keep their values: name them
            report = nonfinite_report(pl_module, [False, *reading.kinds[1:]])
            report += " and gradients" if reading.kinds[0] else ""
        if log:
            pl_module.log("train/nonfinite_steps", float(self.skipped_steps), on_step=True, on_epoch=False)
        if reading.limit_step >= 0:
            raise self._stop(trainer.global_step, reading.limit_step, report)
        steps = f"step {reading.last}" if reading.skipped == 1 else f"steps {reading.first}-{reading.last}"
        rank_zero_warn(
            f"{steps}: {report}; {reading.skipped} step(s) skipped ({self.consecutive} in a row, training stops at "
            f"NonFiniteGuard.max_consecutive={self.max_consecutive})"
        )

    def _stop(self, step: int, limit_step: int, report: str) -> NonFiniteError:
        where = f"step {step}" if step == limit_step else f"step {step} (the limit was reached at step {limit_step})"
        return NonFiniteError(
            f"training stopped at {where}: {self.max_consecutive} steps in a row with {report} "
            f"({self.skipped_steps} skipped in all). The model diverged: lower the learning rate (e.g. "
            "--model.optimizer.init_args.lr) or clip gradients (--trainer.gradient_clip_val). "
            "NonFiniteGuard(max_consecutive) in trainer.callbacks sets how many such steps are skipped first."
        )

    @override
    def state_dict(self) -> dict[str, Any]:
        if self._tally is None:
            return {"skipped_steps": self.skipped_steps, "consecutive": self.consecutive}
        # a checkpoint in the middle of the device path: its counts, without warning or stopping here
        values = self._tally.values.tolist()
        return {"skipped_steps": self.skipped_steps + int(values[1]), "consecutive": int(values[0])}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped_steps = int(state_dict.get("skipped_steps", 0))
        self.consecutive = int(state_dict.get("consecutive", 0))
        self._tally = None

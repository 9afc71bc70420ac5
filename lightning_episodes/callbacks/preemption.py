"""A fit stopped by ``SIGTERM`` (a scheduler's preemption), ``SIGINT`` (Ctrl-C) or ``SIGUSR1`` (SLURM's
``--signal=USR1`` ahead of a time limit) stops at the same step in every process.

Lightning's own handler sets a flag that each process checks on its own, and broadcasts from inside the signal
handler: under DDP, a signal that reaches the processes at different moments (or twice, as Lightning forwards it to
the processes it started) leaves them in different collectives, and the run hangs, ignoring further ``SIGTERM``\\ s.
Ctrl-C is worse: Lightning ends the fit at once with status 1 and nothing saved, and ``SIGUSR1`` without Lightning's
SLURM auto-requeue kills the process outright. :class:`PreemptionHandler` replaces these handlers during ``fit`` by
one that only notes the signal; at the end of each training batch the processes agree whether any of them got one
(one small all-reduce, under DDP only) and, if so, all set Lightning's ``SIGTERM`` flag there, so that every process
raises Lightning's ``SIGTERMException`` at the end of that batch.
:class:`~lightning_episodes.callbacks.ResumableCheckpoint` then writes ``last.ckpt`` at that step, and the command
line exits with status 128 + the signal's number (143, 130, 138) and one line saying how to resume.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities import rank_zero_info
from pytorch_lightning.utilities.exceptions import SIGTERMException

__all__ = ["PREEMPTION_SIGNALS", "PreemptionHandler"]

#: The signals that stop a fit at the end of its training batch (``SIGUSR1`` where the platform has it).
PREEMPTION_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGUSR1") if hasattr(signal, name)
)
#: A signal's handler that this one replaces: the process's default (Python's ``KeyboardInterrupt`` for ``SIGINT``).
#: Any other handler of ``SIGINT`` or ``SIGUSR1`` is left in charge; ``SIGTERM``'s is always Lightning's own.
_DEFAULTS = (signal.SIG_DFL, signal.default_int_handler)


class PreemptionHandler(Callback):
    """Turn ``SIGTERM``, ``SIGINT`` or ``SIGUSR1`` during ``fit`` into a stop at the end of the current training
    batch, in every process.

    Between ``on_train_start`` and the end of ``fit`` it is this process's handler of these signals (the previous
    ones are restored after). A signal during a validation takes effect at the end of the next training batch. A
    second ``SIGINT`` (Ctrl-C again) raises ``KeyboardInterrupt`` at once, and once the fit stops (while
    ``last.ckpt`` is written) the previous handlers are back: a Ctrl-C then interrupts the write, which keeps the
    previous ``last.ckpt``.

    It takes ``SIGINT`` and ``SIGUSR1`` only from their default handlers. A handler that someone else installed stays
    in charge: Lightning's SLURM auto-requeue handler of ``SIGUSR1`` (``SLURMEnvironment(auto_requeue=True)``, the
    default in a SLURM batch job) still saves its ``hpc_ckpt_*.ckpt`` and requeues the job, and the ``SIGTERM`` that
    SLURM sends at the end of the job then stops the fit here; a ``SIGINT`` that a shell ignores (a background job)
    stays ignored.

    Attributes:
        stopped_by: the signal that stopped the last fit (the same in every process; the highest-numbered one if
            the processes got different signals), or ``None``.

    Example::

        >>> import pytorch_lightning as pl
        >>> trainer = pl.Trainer(max_steps=10, callbacks=[PreemptionHandler()])  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.stopped_by: signal.Signals | None = None
        self._requested = 0  # the number of the signal noted in this process, 0 for none
        self._previous: dict[signal.Signals, Any] = {}

    def _note(self, signum: int, frame: FrameType | None) -> None:
        # no collective and no I/O in a signal handler: the processes agree at the end of the batch
        if signum == signal.SIGINT and self._requested:
            # Ctrl-C twice: stop now, without waiting for the end of the batch or for the checkpoint
            self._restore()
            raise KeyboardInterrupt
        self._requested = self._requested or signum

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._requested, self.stopped_by = 0, None
        if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
            return
        for signum in PREEMPTION_SIGNALS:
            if signum == signal.SIGTERM or signal.getsignal(signum) in _DEFAULTS:
                self._previous[signum] = signal.signal(signum, self._note)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        requested = self._requested
        if trainer.world_size > 1:
            noted = torch.tensor(requested, device=trainer.strategy.root_device)
            requested = int(trainer.strategy.reduce(noted, reduce_op="max"))  # every process: the same signal
        if requested:
            self.stopped_by = signal.Signals(requested)
            rank_zero_info(f"{self.stopped_by.name} received: the fit stops after step {trainer.global_step}")
            connector = getattr(trainer, "_signal_connector", None)
            if connector is None or not hasattr(connector, "received_sigterm"):
                raise SIGTERMException
            # Lightning's own flag (a private attribute, set here in every process at once): the loop raises
            # SIGTERMException itself at the end of this batch, after the batch's validation and logging, so the
            # metrics of the last step are written and a resumed run continues exactly
            connector.received_sigterm = True

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)  # None: not set from Python
        self._previous = {}

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()

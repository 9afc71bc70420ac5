"""A fit stopped by ``SIGTERM`` (a scheduler's preemption) stops at the same step in every process.

Lightning's own handler sets a flag that each process checks on its own, and broadcasts from inside the signal
handler: under DDP, a signal that reaches the processes at different moments (or twice, as Lightning forwards it to
the processes it started) leaves them in different collectives, and the run hangs, ignoring further ``SIGTERM``\\ s.
:class:`PreemptionHandler` replaces that handler during ``fit`` by one that only notes the signal; at the end of each
training batch the processes agree whether any of them got it (one small all-reduce, under DDP only) and, if so, all
set Lightning's flag there, so that every process raises Lightning's ``SIGTERMException`` at the end of that batch.
:class:`~lightning_episodes.callbacks.ResumableCheckpoint` then writes ``last.ckpt`` at that step, and the command
line exits with status 143 and one line saying how to resume.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities import rank_zero_info
from pytorch_lightning.utilities.exceptions import SIGTERMException

__all__ = ["PreemptionHandler"]


class PreemptionHandler(Callback):
    """Turn ``SIGTERM`` during ``fit`` into a stop at the end of the current training batch, in every process.

    Between ``on_train_start`` and the end of ``fit`` it is this process's ``SIGTERM`` handler (the previous one is
    restored after). A signal during a validation takes effect at the end of the next training batch.

    Example::

        >>> import pytorch_lightning as pl
        >>> trainer = pl.Trainer(max_steps=10, callbacks=[PreemptionHandler()])  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._requested = False
        self._previous: Any = None
        self._installed = False

    def _note(self, signum: int, frame: FrameType | None) -> None:
        # no collective and no I/O in a signal handler: the processes agree at the end of the batch
        self._requested = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._requested = False
        if threading.current_thread() is threading.main_thread():  # signal handlers belong to the main thread
            self._previous = signal.signal(signal.SIGTERM, self._note)
            self._installed = True

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        requested = self._requested
        if trainer.world_size > 1:
            requested = trainer.strategy.reduce_boolean_decision(requested, all=False)
        if requested:
            rank_zero_info(f"SIGTERM received: the fit stops after step {trainer.global_step}")
            connector = getattr(trainer, "_signal_connector", None)
            if connector is None or not hasattr(connector, "received_sigterm"):
                raise SIGTERMException
            # Lightning's own flag (a private attribute, set here in every process at once): the loop raises
            # SIGTERMException itself at the end of this batch, after the batch's validation and logging, so the
            # metrics of the last step are written and a resumed run continues exactly
            connector.received_sigterm = True

    def _restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()

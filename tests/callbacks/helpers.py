"""Callbacks shared by the callback tests."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback


class CrashAt(Callback):
    """Raises ``RuntimeError("CRASH")`` before the batch of global step ``step`` (a killed run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("CRASH")


class SigtermAt(Callback):
    """Sends this process SIGTERM at the end of the batch that makes global step ``step`` (a preempted run); under
    DDP only in the process of global rank ``rank`` (``None``: in every process)."""

    def __init__(self, step: int, rank: int | None = None) -> None:
        self.step = step
        self.rank = rank

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step and self.rank in (None, trainer.global_rank):
            os.kill(os.getpid(), signal.SIGTERM)

"""Callbacks shared by the callback tests."""

from __future__ import annotations

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

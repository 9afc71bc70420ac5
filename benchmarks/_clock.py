"""A callback that timestamps training steps (its own module, so that the CLI and the benchmark that
configures it by class path share one class)."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback


class StepClock(Callback):
    """Wall-clock times at which every training step's compute began and ended."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        self.starts.append(time.perf_counter())

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        self.ends.append(time.perf_counter())

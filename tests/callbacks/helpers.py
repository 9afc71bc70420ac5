"""Callbacks and runs shared by the callback and data tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from lightning_episodes import ProtoNet
from lightning_episodes.testing import tiny_trainer


class CrashAt(Callback):
    """Raises ``RuntimeError("CRASH")`` before the batch of global step ``step`` (a killed run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("CRASH")


class CrashInValidationAt(Callback):
    """Raises ``RuntimeError("CRASH")`` inside the validation after global step ``step`` (a run killed there)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_validation_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step and not trainer.sanity_checking:
            raise RuntimeError("CRASH")


class SignalAt(Callback):
    """Sends this process ``signal`` (a name: SIGTERM, SIGINT, SIGUSR1) at the end of the batch that makes global step
    ``step`` (a preempted or interrupted run); under DDP only in the process of global rank ``rank`` (``None``: in
    every process)."""

    def __init__(self, step: int, rank: int | None = None, signal: str = "SIGTERM") -> None:
        self.step = step
        self.rank = rank
        self.signal = signal

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step and self.rank in (None, trainer.global_rank):
            os.kill(os.getpid(), getattr(signal, self.signal))


def save_rank(folder: Path, trainer: pl.Trainer, state: dict[str, Any]) -> None:
    """Saves one process's ``state`` as ``world<W>-rank<R>.pt`` in ``folder`` (a forked DDP process's own copy)."""
    torch.save(state, folder / f"world{trainer.world_size}-rank{trainer.global_rank}.pt")


def one_and_two_processes(folder: Path, fit: Callable[[int], object]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Runs ``fit(devices)`` in one process, then two (each saving with :func:`save_rank` into ``folder``, from the
    same seed): the single process's saved state and the two processes' states, in rank order."""
    runs = {}
    for devices in (1, 2):
        pl.seed_everything(0)
        fit(devices)
        runs[devices] = [torch.load(folder / f"world{devices}-rank{r}.pt", weights_only=True) for r in range(devices)]
    return runs[1][0], runs[2]


def killed_and_resumed(
    folder: Path, datamodule: Callable[[], pl.LightningDataModule], recorder: Callable[[], Callback]
) -> tuple[Callback, Callback, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A tiny ProtoNet fitted on ``datamodule()`` three ways: without interruption (seed 0); killed before step 3 with
    a checkpoint every 3 steps into ``folder`` (seed 0); resumed from its ``last.ckpt`` under another seed (1), so
    that only the file can make it continue. Returns the uninterrupted and the resumed run's ``recorder()`` and their
    final state dicts."""

    def fit(seed: int, *callbacks: Callback, ckpt_path: Path | None = None) -> dict[str, torch.Tensor]:
        pl.seed_everything(seed)
        model = ProtoNet(backbone_options={"hidden": 8}, image_size=16)
        trainer = tiny_trainer(limit_val_batches=0, callbacks=list(callbacks), enable_checkpointing=True)
        trainer.fit(model, datamodule(), ckpt_path=ckpt_path)
        return model.state_dict()

    def checkpoints() -> ModelCheckpoint:
        return ModelCheckpoint(dirpath=folder, every_n_train_steps=3, save_last=True)

    straight, resumed = recorder(), recorder()
    expected = fit(0, straight)
    with pytest.raises(RuntimeError, match="CRASH"):
        fit(0, checkpoints(), CrashAt(3))
    return straight, resumed, expected, fit(1, resumed, checkpoints(), ckpt_path=folder / "last.ckpt")

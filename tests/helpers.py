"""Small builders shared by the Trainer-level tests."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import DDPStrategy
from torch import nn

from lightning_episodes import EpisodicDataModule


def tiny_datamodule(**overrides: Any) -> EpisodicDataModule:
    options: dict[str, Any] = {
        "dataset": "tiny",
        "ways": 5,
        "shots": 2,
        "queries": 3,
        "episodes_per_batch": 4,
        "val_episodes": 30,
        "test_episodes": 30,
        "image_size": 16,
        "seed": 0,
    }
    options.update(overrides)
    return EpisodicDataModule(**options)


def tiny_trainer(devices: int = 1, **overrides: Any) -> pl.Trainer:
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": devices,
        "max_steps": 6,
        "val_check_interval": 3,
        "check_val_every_n_epoch": None,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "deterministic": True,
    }
    if devices > 1:
        # fork starts in ~0.2 s and works inside pytest; a short timeout turns a hang into a failure
        options["strategy"] = DDPStrategy(start_method="fork", timeout=timedelta(seconds=60))
    options.update(overrides)
    return pl.Trainer(**options)


def tiny_cli_options(folder: Path | str, **overrides: Any) -> list[str]:
    """Command-line options after ``--config configs/quickstart.yaml`` (and maybe a sampling config): the tiny
    dataset, a few small steps, every output under ``folder``; ``overrides`` are ``"section.key": value`` pairs."""
    options: dict[str, Any] = {
        "trainer.default_root_dir": folder,
        "trainer.logger.init_args.save_dir": folder,
        "data.dataset": "tiny",
        "data.image_size": 16,
        "data.shots": 2,
        "data.queries": 3,
        "data.episodes_per_batch": 4,
        "data.val_episodes": 8,
        "data.test_episodes": 8,
        "trainer.enable_progress_bar": "false",
        "trainer.enable_model_summary": "false",
    }
    options.update(overrides)
    return [f"--{key}={value}" for key, value in options.items()]


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` through ``torch.save`` and a ``weights_only`` load, as a checkpoint carries it (plain values and
    CPU tensors only, or the load fails)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def same_state(a: object, b: object) -> bool:
    """Whether two (nested) state dicts hold the same keys, equal tensors and equal values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.equal(a, b)
    return a == b


def fit_and_test_record(
    folder: Path, callbacks: list[Any], ckpt_path: str | None = None, **trainer: Any
) -> dict[str, Any]:
    """Fit a tiny ProtoNet (seed 0) and test it with a ``TestResultsWriter`` logging into ``folder``; the
    ``test_results.json`` it wrote. ``trainer``: options of :func:`tiny_trainer`."""
    from pytorch_lightning.loggers import CSVLogger

    from lightning_episodes import ProtoNet
    from lightning_episodes.callbacks import TestResultsWriter
    from lightning_episodes.evaluation import RESULTS_FILE

    pl.seed_everything(0)
    writer = TestResultsWriter()
    fit = tiny_trainer(logger=CSVLogger(folder, name="", version=""), callbacks=[*callbacks, writer], **trainer)
    model, data = ProtoNet(image_size=16, backbone_options={"hidden": 8}), tiny_datamodule()
    fit.fit(model, data)
    fit.test(model, data, ckpt_path=ckpt_path, verbose=False)
    return json.loads((folder / RESULTS_FILE).read_text())


#: torchvision's ResNet-18 as a class path (``torchvision.models.resnet18`` is a function: refused)
RESNET18 = {
    "class_path": "torchvision.models.ResNet",
    "init_args": {"block": "torchvision.models.resnet.BasicBlock", "layers": [2, 2, 2, 2]},
}


class SmallNet(nn.Module):
    """A user's own network: images ``[M, C, H, W]`` to ``[M, width]``, with a batch norm."""

    def __init__(self, in_channels: int = 3, width: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, width, 3, padding=1)
        self.norm = nn.BatchNorm2d(width)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.norm(self.conv(images)))).flatten(1)

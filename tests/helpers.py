"""Small builders shared by the Trainer-level tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn

from lightning_episodes.testing import roundtrip, same_state, tiny_datamodule, tiny_trainer

__all__ = [  # the tiny data module and trainer and the state helpers are the package's, imported from here
    "RESNET18",
    "SmallNet",
    "fit_and_test_record",
    "roundtrip",
    "same_state",
    "tiny_cli_options",
    "tiny_datamodule",
    "tiny_trainer",
]


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


def assert_same_evaluation_episodes(a: Any, b: Any) -> None:
    """Two data modules give the same validation and test episodes (classes, support and query images)."""
    for loader in ("val_dataloader", "test_dataloader"):
        for x, y in zip(getattr(a, loader)(), getattr(b, loader)(), strict=True):
            assert torch.equal(x.identity.classes, y.identity.classes)
            assert torch.equal(x.identity.support_indices, y.identity.support_indices)
            assert torch.equal(x.identity.query_indices, y.identity.query_indices)

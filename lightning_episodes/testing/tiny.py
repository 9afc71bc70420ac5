"""A tiny in-memory dataset, registered as ``"tiny"``, with the data module and CPU Trainer that fit on it in
seconds: what the algorithm harness trains on, and what a test of a whole run needs.

The pixels of each image encode its own row index (:func:`decode_rows`), so a test can tell which images an
episode holds.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import DDPStrategy

from lightning_episodes.data import EpisodicDataModule
from lightning_episodes.data.datasets import ImageDataset, register_dataset

#: classes of each split of the tiny dataset
TINY_SPLITS = {"train": 12, "validation": 6, "test": 7}


def tiny_dataset(per_class: int = 10, image_size: int = 16, channels: int = 1, uneven: bool = False) -> ImageDataset:
    """Classes with distinct templates (so models can learn them) and rows encoded in two pixels.

    Args:
        per_class: images of each class.
        image_size: side of the square images, in pixels.
        channels: 1 or 3.
        uneven: give class ``c`` ``c % 3`` more images.

    Example:
        >>> data = tiny_dataset()
        >>> data.images.shape, [len(classes) for classes in data.splits.values()]
        (torch.Size([250, 1, 16, 16]), [12, 6, 7])
    """
    g = torch.Generator().manual_seed(1234)
    num_classes = sum(TINY_SPLITS.values())
    counts = [per_class + (c % 3 if uneven else 0) for c in range(num_classes)]
    labels = torch.repeat_interleave(torch.arange(num_classes), torch.tensor(counts))
    # each class is a bright square at its own place under strong noise: learnable, not trivially, and
    # what is learnt (where the square is) transfers to new classes
    templates = torch.zeros(num_classes, channels, image_size, image_size)
    corners = torch.randint(0, image_size - 4, (num_classes, 2), generator=g)
    for c, (y, x) in enumerate(corners.tolist()):
        templates[c, :, y : y + 5, x : x + 5] = 40
    noise = torch.rand(len(labels), channels, image_size, image_size, generator=g) * 215
    images = (templates[labels] + noise).to(torch.uint8)
    rows = torch.arange(len(labels))
    images[:, 0, 0, 0] = (rows % 256).to(torch.uint8)
    images[:, 0, 0, 1] = (rows // 256).to(torch.uint8)
    splits, start = {}, 0
    for name, size in TINY_SPLITS.items():
        splits[name] = list(range(start, start + size))
        start += size
    return ImageDataset(
        images=images,
        labels=labels,
        class_names=[f"class{c}" for c in range(num_classes)],
        splits=splits,
        mean=(0.5,) * channels,
        std=(0.25,) * channels,
    )


def decode_rows(images: torch.Tensor) -> torch.Tensor:
    """Row indices encoded by :func:`tiny_dataset` in uint8 images ``[..., C, H, W]``."""
    return images[..., 0, 0, 0].long() + 256 * images[..., 0, 0, 1].long()


def _load_tiny(
    root: Path | None = None, image_size: int | None = None, channels: int | None = None, **options: object
) -> ImageDataset:
    return tiny_dataset(image_size=image_size or 16, channels=channels or 1, uneven=bool(options.get("uneven")))


def register_tiny_dataset() -> None:
    """Register :func:`tiny_dataset` as ``data.dataset="tiny"`` (options ``image_size``, ``channels``, ``uneven``),
    for the command line and :class:`~lightning_episodes.data.EpisodicDataModule`; again is harmless."""
    register_dataset("tiny")(_load_tiny)


def tiny_datamodule(**overrides: Any) -> EpisodicDataModule:
    """A data module of 5-way 2-shot 3-query episodes of 16-pixel images of the tiny dataset (registered first),
    4 episodes a batch, 30 validation and 30 test episodes, seed 0.

    Args:
        **overrides: other :class:`~lightning_episodes.data.EpisodicDataModule` arguments.
    """
    register_tiny_dataset()
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
    """A quiet, deterministic CPU Trainer of 6 steps validating every 3 (no logger, checkpoints, progress bar).

    Args:
        devices: CPU processes; more than one runs DDP, forked (fast, and it works inside pytest).
        **overrides: other :class:`pytorch_lightning.Trainer` arguments.
    """
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

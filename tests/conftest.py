"""Shared fixtures: a tiny registered dataset whose pixels encode their own row index."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_episodes.data.datasets import ImageDataset, register_dataset

TINY_SPLITS = {"train": 12, "validation": 6, "test": 7}

# Tests run many small models side by side on 2 cores: a second OpenMP thread makes tiny forwards
# 10x slower under contention, and 2-process DDP tests would oversubscribe the cores.
torch.set_num_threads(1)


def tiny_dataset(per_class: int = 10, image_size: int = 16, channels: int = 1, uneven: bool = False) -> ImageDataset:
    """Classes with distinct templates (so models can learn them) and rows encoded in two pixels."""
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


@register_dataset("tiny")
def _load_tiny(
    root: Path | None = None, image_size: int | None = None, channels: int | None = None, **options: object
) -> ImageDataset:
    return tiny_dataset(image_size=image_size or 16, channels=channels or 1, uneven=bool(options.get("uneven")))


@pytest.fixture
def tiny() -> ImageDataset:
    return tiny_dataset()

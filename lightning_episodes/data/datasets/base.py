"""The one contract every dataset fulfils: a uint8 image tensor, integer labels and named class splits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class ImageDataset:
    """All images of a few-shot dataset in memory, grouped into class splits.

    Episodes are gathered from ``images`` by row index, so nothing is decoded per episode.

    Args:
        images: uint8 tensor ``[N, C, H, W]``.
        labels: int64 tensor ``[N]`` of global class ids ``0..K-1``.
        class_names: ``K`` human-readable class names (a character, a WordNet id, ...).
        splits: ``"train"``/``"validation"``/``"test"`` → the global class ids of that split (disjoint).
        mean: per-channel mean of ``images / 255`` used for normalisation.
        std: per-channel standard deviation of ``images / 255``.
        groups: optional per-class group name (a glyph's alphabet, a tiered-ImageNet category).
    """

    images: Tensor
    labels: Tensor
    class_names: list[str]
    splits: dict[str, list[int]]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    groups: list[str] | None = None

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError(
                f"images must be a uint8 [N, C, H, W] tensor, got {self.images.dtype} {tuple(self.images.shape)}"
            )
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError("labels must have one entry per image")
        channels = self.images.shape[1]
        if len(self.mean) != channels or len(self.std) != channels:
            raise ValueError(f"mean/std need {channels} entries (one per channel)")
        seen: set[int] = set()
        for name, classes in self.splits.items():
            if seen.intersection(classes):
                raise ValueError(f"split {name!r} shares classes with another split")
            seen.update(classes)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        c, h, w = self.images.shape[1:]
        return int(c), int(h), int(w)


#: A loader builds an :class:`ImageDataset` from ``root`` (``None``: the dataset's default location),
#: resized to ``image_size`` × ``image_size`` with ``channels`` channels.
DatasetLoader = Callable[..., ImageDataset]

_REGISTRY: dict[str, DatasetLoader] = {}


def register_dataset(name: str) -> Callable[[DatasetLoader], DatasetLoader]:
    """Register ``loader(root: Path | None, image_size: int | None, channels: int | None, **options)``."""

    def wrap(loader: DatasetLoader) -> DatasetLoader:
        _REGISTRY[name] = loader
        return loader

    return wrap


def available_datasets() -> list[str]:
    return sorted(_REGISTRY)


def load_dataset(
    name: str,
    root: str | Path | None = None,
    image_size: int | None = None,
    channels: int | None = None,
    **options: object,
) -> ImageDataset:
    """Load a registered dataset by name.

    Raises:
        ValueError: if ``name`` is not registered.
    """
    if name not in _REGISTRY:
        raise ValueError(f"data.dataset={name!r} is unknown; available: {', '.join(available_datasets())}")
    return _REGISTRY[name](
        root=None if root is None else Path(root), image_size=image_size, channels=channels, **options
    )

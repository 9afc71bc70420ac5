"""The one loader shape of the datasets rendered in the library (``glyphs``, ``glyphs-hard``, ``glyphs-100``) and
their cache.

A rendered dataset's module provides four functions (:class:`RenderedModule`): the cache file of a
parameter set, reading it, rendering the payload and turning a payload into an :class:`ImageDataset`. A
:class:`RenderedDataset` ties them into the registered loader: argument checks, the cache folder, read the
cache or render and write it. The module's functions are looked up on each call, so a test may replace one.

A payload is ``{"format": int, "characters": list[str], "images": uint8 [len(characters), *shape],
"checksum": int}``, saved with :func:`write_cache` (a temporary file, then a rename).
"""

from __future__ import annotations

import os
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from lightning_episodes.data.datasets import progress
from lightning_episodes.data.datasets.base import ImageDataset
from lightning_episodes.data.datasets.cache import save_atomically


class RenderedModule(Protocol):
    """What a rendered dataset's module provides (``glyphs``, ``glyphs_hard``)."""

    def default_cache_dir(self) -> Path: ...

    def cache_file(self, root: Path, image_size: int, images_per_class: int, seed: int) -> Path: ...

    def read_cache(self, path: Path, image_size: int, images_per_class: int) -> dict[str, Any] | None: ...

    def build_payload(self, image_size: int, images_per_class: int, seed: int, *, processes: int) -> dict[str, Any]: ...

    def to_dataset(self, payload: dict[str, Any], channels: int) -> ImageDataset: ...


@dataclass(frozen=True)
class RenderedDataset:
    """A dataset rendered from a seed on first use and cached; :meth:`load` is its registered loader.

    Args:
        name: the registered name.
        module: the functions that render, cache and label it.
        image_size: the default ``image_size``.
        channels: the default ``channels``.
        image_sizes: the smallest and largest ``image_size`` allowed.
        images_per_class: the default ``images_per_class``.
    """

    name: str
    module: RenderedModule
    image_size: int
    channels: int
    image_sizes: tuple[int, int]
    images_per_class: int = 20

    def load(
        self,
        root: Path | None = None,
        image_size: int | None = None,
        channels: int | None = None,
        images_per_class: int | None = None,
        seed: int = 0,
    ) -> ImageDataset:
        """Load the dataset, rendering it on first use and caching it.

        Args:
            root: cache folder; default the module's ``default_cache_dir()``.
            image_size: height and width in pixels; default :attr:`image_size`.
            channels: 1 or 3; default :attr:`channels` (see the module for what each means).
            images_per_class: renderings of each character; default :attr:`images_per_class`.
            seed: seed of every random choice; the same seed gives byte-identical images.

        Returns:
            The dataset, classes split by alphabet (see the module docstring).

        Raises:
            ValueError: for a ``root`` that is not a folder, an ``image_size`` outside :attr:`image_sizes`,
                ``channels`` not 1 or 3, ``images_per_class`` < 1 or a negative ``seed``.
        """
        image_size = self.image_size if image_size is None else image_size
        channels = self.channels if channels is None else channels
        images_per_class = self.images_per_class if images_per_class is None else images_per_class
        check_arguments(image_size, self.image_sizes, channels, images_per_class, seed, self.name)
        if root is not None and Path(root).exists() and not Path(root).is_dir():
            raise ValueError(f"data.root={str(root)!r} is not a folder: {self.name} caches its images in data.root")
        folder = Path(root) if root is not None else self.module.default_cache_dir()
        path = self.module.cache_file(folder, image_size, images_per_class, seed)
        payload = cached_or_rendered(
            self.name,
            path,
            self.module.read_cache(path, image_size, images_per_class),
            lambda: self.module.build_payload(image_size, images_per_class, seed, processes=render_processes()),
        )
        return self.module.to_dataset(payload, channels)


def default_cache_dir(name: str) -> Path:
    """``$LIGHTNING_EPISODES_CACHE/<name>``, else ``$XDG_CACHE_HOME/lightning-episodes/<name>``, where
    ``XDG_CACHE_HOME`` defaults to ``~/.cache``."""
    if os.environ.get("LIGHTNING_EPISODES_CACHE"):
        return Path(os.environ["LIGHTNING_EPISODES_CACHE"]).expanduser() / name
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "lightning-episodes" / name


def checksum(images: torch.Tensor, characters: list[str]) -> int:
    """CRC-32 of the pixels and the class list: ``torch.load`` does not notice flipped bytes."""
    return zlib.crc32("".join(characters).encode(), zlib.crc32(images.contiguous().numpy().data))


def write_cache(path: Path, payload: dict[str, Any]) -> None:
    """Save atomically (a temporary file next to ``path``, then a rename), so that a reader never sees a
    half-written file, even while another process (a DDP rank) writes the same one."""
    save_atomically(payload, path)


def read_payload(path: Path, version: int, shape: tuple[int, ...], name: str) -> dict[str, Any] | None:
    """A cached ``{"format", "characters", "images", "checksum"}`` payload whose images are uint8
    ``[len(characters), *shape]``, or ``None`` (with a warning naming the ``name`` dataset) if the file is
    missing, unreadable or corrupt."""
    if not path.is_file():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        images, chars = payload["images"], payload["characters"]
        problem = (
            "another format" if payload["format"] != version
            else "not a uint8 tensor" if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8
            else "another shape" if tuple(images.shape) != (len(chars), *shape)
            else "checksum mismatch" if payload["checksum"] != checksum(images, chars)
            else None
        )  # fmt: skip
    except Exception as error:  # a truncated zip or a foreign file: regenerate rather than fail
        problem = f"{type(error).__name__}: {error}"
    if problem is None:
        return payload
    warnings.warn(f"{path} is not a valid {name} cache ({problem}); rendering it again", stacklevel=3)
    return None


def level_statistics(pixels: torch.Tensor) -> tuple[float, float]:
    """Mean and standard deviation of uint8 ``pixels / 255``, exact from the histogram of the 256 levels
    (without a float copy of the images)."""
    counts = torch.bincount(pixels.flatten(), minlength=256).to(torch.float64)
    levels = torch.arange(256, dtype=torch.float64) / 255.0
    mean = float((counts * levels).sum() / counts.sum())
    return mean, float(((counts * (levels - mean) ** 2).sum() / counts.sum()).sqrt())


def render_processes() -> int:
    """Worker processes for rendering: the CPUs this process may use, at most 8."""
    return min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def check_arguments(
    image_size: int, sizes: tuple[int, int], channels: int, images_per_class: int, seed: int, dataset: str = ""
) -> None:
    """The argument checks of the rendered datasets; ``sizes`` is the allowed ``image_size`` range and
    ``dataset`` names the dataset in its message.

    Raises:
        ValueError: naming the argument and its allowed values.
    """
    where = f" for {dataset}" if dataset else ""
    if not sizes[0] <= image_size <= sizes[1]:
        raise ValueError(f"image_size must be in {sizes[0]}..{sizes[1]} pixels{where}, got {image_size}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    if images_per_class < 1:
        raise ValueError(f"images_per_class must be >= 1, got {images_per_class}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")


def cached_or_rendered(
    name: str, path: Path, cached: dict[str, Any] | None, render: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """``cached`` (a payload read from ``path``), or ``render()`` written to ``path`` for next time (a cache
    folder that cannot be written costs time, not correctness: a warning)."""
    if cached is not None:
        return cached
    with progress.reporting(name, f"rendering the dataset once into {path} (later runs read it from there)"):
        payload = render()
    try:
        write_cache(path, payload)
    except OSError as error:
        warnings.warn(f"could not cache the {name} dataset in {path}: {error}", stacklevel=3)
    return payload

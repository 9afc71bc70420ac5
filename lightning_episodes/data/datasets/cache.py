"""Converting a dataset once into a compact uint8 cache file, and reading it back.

Every real dataset is decoded, resized and stored once, as one file per (dataset, image size,
channels, format version)::

    <cache_dir or root>/<dataset>-<image_size>px-<channels>ch-v<FORMAT_VERSION>.pt

The file is a ``torch.save`` dict of plain tensors, strings and numbers (read back with
``torch.load(weights_only=True)``)::

    {"format": "lightning-episodes/image-cache", "version": 1, "dataset": str,
     "image_size": int, "channels": int,
     "images": uint8 [N, channels, image_size, image_size], "labels": int64 [N],
     "class_names": list[str], "splits": {"train" | "validation" | "test": list[int]},
     "groups": list[str] | None, "crc32": int (of the image and label bytes)}

It is written under a temporary name and moved into place with ``os.replace``, so a file under the
final name is always complete. A cache that cannot be read, does not describe what was asked for or
fails its checksum (``torch.load`` does not notice flipped bytes) is rebuilt from the source files,
with a warning. The source files are not read again once the
cache exists: delete the cache file after changing them. Normalisation statistics are not stored:
each dataset computes them from the loaded images or uses constants (the ImageNet statistics).
Building the cache holds the converted images twice in memory for a moment (the splits, then their
concatenation).

Images are resized to ``image_size`` × ``image_size`` without keeping the aspect ratio (as
Meta-Dataset does, Triantafillou et al., 2020), with Pillow's antialiased bilinear filter
(torchvision's ``Resize`` default), and converted to RGB (3 channels) or luminance (1 channel).
"""

from __future__ import annotations

import logging
import os
import uuid
import warnings
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from lightning_episodes.data.datasets.base import SPLITS, ImageDataset

FORMAT = "lightning-episodes/image-cache"
FORMAT_VERSION = 1
DEFAULT_IMAGE_SIZE = 84
DEFAULT_CHANNELS = 3
#: Environment variable naming the default data root (``~/data`` when unset, as in learn2learn's examples).
DATA_ROOT_ENV = "LIGHTNING_EPISODES_DATA"
#: ILSVRC-2012 channel statistics (Deng et al., 2009), the usual normalisation of ImageNet-derived
#: few-shot benchmarks; cross-domain test sets use them too, since the model was trained with them.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: ITU-R 601 luma weights: what Pillow's ``convert("L")`` uses.
_LUMA = (0.299, 0.587, 0.114)
_MODES = {1: "L", 3: "RGB"}

#: Per-channel normalisation mean and standard deviation of ``images / 255``.
Statistics = tuple[tuple[float, ...], tuple[float, ...]]

log = logging.getLogger(__name__)


class Samples(Protocol):
    """A map-style source, such as a learn2learn dataset: ``samples[i]`` is ``(image, local label)``."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> tuple[Any, Any]: ...


@dataclass(frozen=True)
class SourceSplit:
    """One split as read from the source files.

    Args:
        name: ``"train"``, ``"validation"`` or ``"test"``.
        class_names: the split's class names; local label ``j`` is ``class_names[j]``.
        samples: yields ``(image, local label)``; an image is a PIL image or a ``[C, H, W]`` tensor of
            pixel values 0–255.
        expected_classes: the number of classes the published split has (checked).
        order: the order in which ``samples`` indices are stored (default: as they come); makes the
            cache independent of directory listing order.
        groups: optional per-class group name.
    """

    name: str
    class_names: Sequence[str]
    samples: Samples
    expected_classes: int
    order: Sequence[int] | None = None
    groups: Sequence[str] | None = None


@dataclass(frozen=True)
class CacheSpec:
    """Where a dataset's source files are and which cache file holds its converted images."""

    name: str
    root: Path
    image_size: int
    channels: int
    path: Path

    @classmethod
    def resolve(
        cls,
        name: str,
        root: Path | None,
        image_size: int | None,
        channels: int | None,
        cache_dir: str | Path | None,
    ) -> CacheSpec:
        """Apply the defaults (``$LIGHTNING_EPISODES_DATA`` or ``~/data``, 84 px, 3 channels).

        Raises:
            ValueError: if ``image_size`` is not positive or ``channels`` is not 1 or 3.
        """
        image_size = DEFAULT_IMAGE_SIZE if image_size is None else int(image_size)
        channels = DEFAULT_CHANNELS if channels is None else int(channels)
        if image_size < 1:
            raise ValueError(f"data.image_size must be a positive number of pixels, got {image_size}")
        if channels not in _MODES:
            raise ValueError(f"data.channels must be 1 (grayscale) or 3 (RGB) for {name}, got {channels}")
        root = Path(os.environ.get(DATA_ROOT_ENV, "~/data") if root is None else root).expanduser()
        directory = root if cache_dir is None else Path(cache_dir).expanduser()
        path = directory / f"{name}-{image_size}px-{channels}ch-v{FORMAT_VERSION}.pt"
        return cls(name, root, image_size, channels, path)


def imagenet_statistics(channels: int) -> Statistics:
    """ImageNet mean and std per channel; for 1 channel, their luma-weighted combination.

    The grayscale std is the weighted sum of the channel stds, exact when the channels are perfectly
    correlated (nearly so in natural images).
    """
    if channels == 3:
        return IMAGENET_MEAN, IMAGENET_STD
    mean = sum(w * m for w, m in zip(_LUMA, IMAGENET_MEAN, strict=True))
    std = sum(w * s for w, s in zip(_LUMA, IMAGENET_STD, strict=True))
    return (mean,), (std,)


def require_files(
    spec: CacheSpec,
    required: Iterable[Path],
    layout: str,
    download: bool,
    downloadable: bool = True,
    download_note: str = "",
) -> None:
    """Check that the source files exist, unless they are about to be downloaded.

    Args:
        spec: the dataset.
        required: files or folders that must exist under ``spec.root``.
        layout: description of the expected layout; ``{root}`` is replaced by ``spec.root``.
        download: whether the caller downloads missing files.
        downloadable: whether the dataset can be downloaded (the error offers the download option only then).
        download_note: what the download needs, added to the offer (e.g. whether learn2learn is installed).

    Raises:
        FileNotFoundError: naming the missing paths, the expected layout and, if ``downloadable``, the download
            option.
    """
    missing = [str(path) for path in required if not path.exists()]
    if missing and not download:
        offer = f"; or pass `--data.download true` (download=True) to download it{download_note}"
        raise FileNotFoundError(
            f"{spec.name} was not found: missing {', '.join(missing)}.\n"
            f"Expected layout:\n{layout.format(root=spec.root)}\n"
            f"Point `--data.root` (now {spec.root}) at a folder with this layout{offer if downloadable else ''}."
        )


def load_cached(
    spec: CacheSpec,
    read_splits: Callable[[], Iterable[SourceSplit]],
    statistics: Callable[[ImageDataset], Statistics],
) -> ImageDataset:
    """Read ``spec.path``, or build it from ``read_splits()`` first when it is absent or invalid.

    Args:
        spec: the dataset and its cache file.
        read_splits: reads the source files, one split at a time (only called to build the cache).
        statistics: the per-channel normalisation mean and std of the loaded dataset (normalised with mean
            0 and std 1 when it is called).
    """
    data = None
    if spec.path.exists():
        try:
            data = _to_dataset(torch.load(spec.path, map_location="cpu", weights_only=True), spec)
        except Exception as error:  # a truncated zip, a foreign pickle, a stale layout: all mean "rebuild"
            warnings.warn(
                f"{spec.path} is not a valid {spec.name} cache ({type(error).__name__}: {error}); "
                "rebuilding it from the source files",
                stacklevel=3,
            )
    if data is None:
        payload = convert(read_splits(), spec)
        save_atomically(payload, spec.path)
        data = _to_dataset(payload, spec)
    mean, std = statistics(data)
    return replace(data, mean=tuple(mean), std=tuple(std))


def convert(splits: Iterable[SourceSplit], spec: CacheSpec) -> dict[str, Any]:
    """Decode, resize and stack every split into the cache payload (global class ids in split order).

    Raises:
        ValueError: if a split has another number of classes than published, a class has no image,
            a label is out of range, or a split is missing.
    """
    chunks: list[Tensor] = []
    labels: list[Tensor] = []
    class_names: list[str] = []
    groups: list[str] | None = []
    split_classes: dict[str, list[int]] = {}
    for split in splits:
        pixels, local = _convert_split(split, spec)
        offset = len(class_names)
        split_classes[split.name] = list(range(offset, offset + len(split.class_names)))
        class_names.extend(str(name) for name in split.class_names)
        groups = None if groups is None or split.groups is None else [*groups, *map(str, split.groups)]
        chunks.append(pixels)
        labels.append(local + offset)
        del split  # let the source (possibly gigabytes of encoded images) go before the next split
    if sorted(split_classes) != sorted(SPLITS):
        raise ValueError(f"{spec.name}: expected the splits {SPLITS}, read {tuple(split_classes)}")
    images, all_labels = torch.cat(chunks), torch.cat(labels)
    return {
        **_header(spec),
        "images": images,
        "labels": all_labels,
        "class_names": class_names,
        "splits": split_classes,
        "groups": groups,
        "crc32": checksum(images, all_labels),
    }


def _convert_split(split: SourceSplit, spec: CacheSpec) -> tuple[Tensor, Tensor]:
    """One split's uint8 images and local labels, checked against its class list."""
    where = f"{spec.name} split {split.name!r}"
    if len(split.class_names) != split.expected_classes:
        raise ValueError(
            f"{where} has {len(split.class_names)} classes, the published split has "
            f"{split.expected_classes}: are these the right files?"
        )
    order = range(len(split.samples)) if split.order is None else split.order
    log.info("%s: converting %d images to %d px", where, len(order), spec.image_size)
    # filled per image through numpy: small torch ops pay thread-pool overhead on every call
    pixels = np.empty((len(order), spec.channels, spec.image_size, spec.image_size), dtype=np.uint8)
    labels = np.empty(len(order), dtype=np.int64)
    for row, index in enumerate(order):
        image, label = split.samples[index]
        pixels[row] = image_array(image, spec.image_size, spec.channels)
        labels[row] = int(label)
    if len(labels) and not 0 <= labels.min() <= labels.max() < len(split.class_names):
        raise ValueError(f"{where} has labels outside 0..{len(split.class_names) - 1}")
    counts = np.bincount(labels, minlength=len(split.class_names))
    empty = [str(split.class_names[c]) for c in np.flatnonzero(counts == 0).tolist()]
    if empty:
        raise ValueError(f"{where}: classes without images: {', '.join(empty[:5])}")
    return torch.from_numpy(pixels), torch.from_numpy(labels)


def _header(spec: CacheSpec) -> dict[str, Any]:
    """What identifies a cache file's content."""
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "dataset": spec.name,
        "image_size": spec.image_size,
        "channels": spec.channels,
    }


def checksum(images: Tensor, labels: Tensor) -> int:
    """CRC-32 of the image and label bytes (about 3 GB/s: seconds even for tiered-ImageNet)."""
    crc = zlib.crc32(images.contiguous().numpy().data)
    return zlib.crc32(labels.contiguous().numpy().data, crc)


def image_array(image: Image.Image | Tensor, image_size: int, channels: int) -> np.ndarray:
    """A PIL image or a ``[C, H, W]`` tensor of values 0–255 as a uint8 ``[channels, size, size]`` array."""
    if isinstance(image, Tensor):
        array = np.rint(image.detach().cpu().numpy()).clip(0, 255).astype(np.uint8).transpose(1, 2, 0)
        image = Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)
    image = image.convert(_MODES[channels])
    if image.size != (image_size, image_size):
        image = image.resize((image_size, image_size), Image.Resampling.BILINEAR)
    pixels = np.asarray(image, dtype=np.uint8)
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


def save_atomically(payload: dict[str, Any], path: Path) -> None:
    """``torch.save`` to a temporary file next to ``path``, then ``os.replace`` it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "xb") as file:
            torch.save(payload, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    log.info("wrote %s", path)


def _to_dataset(payload: Any, spec: CacheSpec) -> ImageDataset:
    """Check that a payload is the cache ``spec`` asks for and wrap it, normalised with mean 0 and std 1
    (raises on any mismatch)."""
    if not isinstance(payload, dict):
        raise TypeError(f"expected a dict, found {type(payload).__name__}")
    wanted = _header(spec)
    header = {key: payload.get(key) for key in wanted}
    if header != wanted:
        raise ValueError(f"header {header} differs from {wanted}")
    images, labels, class_names = payload["images"], payload["labels"], payload["class_names"]
    shape = (spec.channels, spec.image_size, spec.image_size)
    if not isinstance(images, Tensor) or images.dtype != torch.uint8 or tuple(images.shape[1:]) != shape:
        raise ValueError(f"images are not a uint8 [N, {', '.join(map(str, shape))}] tensor")
    if not isinstance(labels, Tensor) or labels.dtype != torch.int64 or labels.shape != images.shape[:1]:
        raise ValueError("labels are not an int64 tensor with one entry per image")
    if payload["crc32"] != checksum(images, labels):
        raise ValueError("the images or labels do not match their checksum")
    if len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < len(class_names):
        raise ValueError("labels point outside class_names")
    splits = payload["splits"]
    covered = sorted(c for classes in splits.values() for c in classes)
    if sorted(splits) != sorted(SPLITS) or covered != list(range(len(class_names))):
        raise ValueError("splits do not partition the classes")
    groups = payload["groups"]
    if groups is not None and len(groups) != len(class_names):
        raise ValueError("groups do not have one entry per class")
    return ImageDataset(
        images=images,
        labels=labels,
        class_names=list(class_names),
        splits={name: list(splits[name]) for name in SPLITS},
        mean=(0.0,) * spec.channels,
        std=(1.0,) * spec.channels,
        groups=None if groups is None else list(groups),
    )

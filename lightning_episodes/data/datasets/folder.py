"""Your own images as a few-shot dataset: ``--data.dataset folder --data.root ROOT``.

Layout (the layout of Omniglot- or Mini-ImageNet-style exports)::

    ROOT/train/<class name>/<image>
    ROOT/val/<class name>/<image>          (or ROOT/validation/...)
    ROOT/test/<class name>/<image>

Images are PNG, JPEG, BMP, GIF, TIFF or WebP files (by their ending, case-insensitive); names starting with
``.`` are ignored, any other file is an error. Classes are ordered by name within their split and images by
file name, so the dataset does not depend on directory listing order. Every image is converted once into the
uint8 cache of :mod:`~lightning_episodes.data.datasets.cache` (resized to ``data.image_size`` and converted to
``data.channels``, as every dataset is)::

    <cache_dir or ROOT>/folder-<fingerprint>-<image_size>px-<channels>ch-v<version>.pt

The fingerprint (12 hex digits) is a hash of every image's path, size and modification time: adding, removing,
replacing or touching an image gives another cache file, built on the next load (the old one is left in place
and can be deleted). Normalisation uses the mean and standard deviation per channel of the training images,
computed from the cache. Episodes are checked against the splits like every dataset's: a split needs at least
``ways`` classes and each of its classes ``shots + queries`` images (checked when the data module is set up).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from PIL import Image, UnidentifiedImageError

from lightning_episodes.data.datasets.converted import (
    SPLITS,
    CacheSpec,
    ConvertedDataset,
    ImageDataset,
    SourceSplit,
    Statistics,
)

NAME = "folder"
#: File name endings read as images (case-insensitive).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
#: The folder names accepted for each split.
SPLIT_FOLDERS = {"train": ("train",), "validation": ("val", "validation"), "test": ("test",)}
LAYOUT = """\
  {root}/train/<class>/<image>.png|jpg|jpeg|...
  {root}/val/<class>/<image>  (or {root}/validation/...)
  {root}/test/<class>/<image>"""


def open_image(path: Path) -> Image.Image:
    """The decoded image in ``path``, detached from its file.

    Raises:
        ValueError: naming the file, if Pillow cannot read it.
    """
    try:
        with Image.open(path) as image:
            image.load()
            return image.copy()
    except (UnidentifiedImageError, OSError) as error:
        raise ValueError(f"{path} is not a readable image ({error})") from None


def is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder (following symbolic links).

    Raises:
        OSError: with the path and the operating system's reason if it cannot be looked at: a dangling symbolic
            link (``FileNotFoundError``), a symbolic link loop, no permission.
    """
    return stat.S_ISDIR(path.stat().st_mode)


def require_folder(folder: Path, what: str) -> None:
    """Check that ``folder`` is a folder.

    Raises:
        FileNotFoundError: naming ``what``, if it does not exist (or is a dangling symbolic link).
        ValueError: if it is not a folder.
        OSError: with the path and the operating system's reason, if it cannot be looked at (a link loop).
    """
    try:
        folder_is_one = is_folder(folder)
    except FileNotFoundError:
        link = f" (a symbolic link to {os.readlink(folder)}, which does not exist)" if folder.is_symlink() else ""
        raise FileNotFoundError(f"{what} {folder} does not exist{link}") from None
    if not folder_is_one:
        raise ValueError(f"{what} {folder} is not a folder")


def image_files(folder: Path, what: str) -> list[Path]:
    """The image files directly in ``folder``, sorted by name.

    Raises:
        FileNotFoundError: if ``folder`` does not exist.
        ValueError: if it is not a folder, holds a sub-folder or a file that is not an image, or no image.
        OSError: with the path and the reason, for an entry the operating system refuses (a dangling link).
    """
    require_folder(folder, what)
    files = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith("."):
            continue
        if is_folder(path):
            raise ValueError(f"{what} {folder} holds a sub-folder, {path.name}/: it must hold images only")
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            raise ValueError(f"{path} is not an image file (expected one of {', '.join(IMAGE_SUFFIXES)})")
        files.append(path)
    if not files:
        raise ValueError(f"{what} {folder} holds no image")
    return files


class ImageFiles:
    """Map-style samples: ``(decoded image, local label)`` of image files.

    Args:
        files: the image files.
        labels: the local label of each.
        mode: a Pillow mode each image is converted to first (``"RGB"``), as a dataset's reference reader does;
            default: as decoded.
    """

    def __init__(self, files: list[Path], labels: list[int], mode: str | None = None) -> None:
        self.files, self.labels, self.mode = files, labels, mode

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        image = open_image(self.files[index])
        return image.convert(self.mode) if self.mode else image, self.labels[index]


def class_folder_images(
    images: Path, classes: Sequence[str], skip: Callable[[str], bool] = lambda name: False
) -> tuple[list[Path], list[int]]:
    """The files of each class folder ``images/<class>``, in file-name order, and their labels (``j`` for the files
    of ``classes[j]``); names starting with ``.`` and those ``skip`` names are left out.

    Raises:
        FileNotFoundError: naming the folder, if a class folder is missing.
    """
    files: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        folder = images / name
        if not folder.is_dir():
            raise FileNotFoundError(f"the class folder {folder} is missing")
        found = [p for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".") and not skip(p.name)]
        files += found
        labels += [label] * len(found)
    return files, labels


def split_folders(root: Path) -> dict[str, Path]:
    """``train``/``validation``/``test`` -> its folder under ``root``.

    Raises:
        FileNotFoundError: if ``root`` or a split folder is missing.
        ValueError: if both ``val`` and ``validation`` exist.
    """
    if not root.is_dir():
        raise FileNotFoundError(
            f"data.root={str(root)!r} is not a folder; the folder dataset expects\n{LAYOUT.format(root=root)}"
        )
    folders = {}
    for split, names in SPLIT_FOLDERS.items():
        found = [root / name for name in names if (root / name).is_dir()]
        if len(found) > 1:
            raise ValueError(f"{root} has both {found[0].name}/ and {found[1].name}/: keep one validation folder")
        if not found:
            raise FileNotFoundError(
                f"{root} has no {' or '.join(f'{n}/' for n in names)} folder; the folder dataset expects\n"
                + LAYOUT.format(root=root)
            )
        folders[split] = found[0]
    return folders


def class_files(folder: Path) -> dict[str, list[Path]]:
    """Class name -> image files, one sub-folder per class, sorted by name.

    Raises:
        ValueError: if ``folder`` holds files beside its class folders, no class, or an empty class folder.
        OSError: with the path and the reason, for an entry the operating system refuses (a link loop).
    """
    entries = [p for p in sorted(folder.iterdir()) if not p.name.startswith(".")]
    loose = [p.name for p in entries if not is_folder(p)]
    if loose:
        raise ValueError(f"{folder} must hold one sub-folder per class, found files: {', '.join(loose[:3])}")
    if not entries:
        raise ValueError(f"{folder} holds no class sub-folder")
    return {p.name: image_files(p, f"class folder {p.name!r}") for p in entries}


def fingerprint(tree: dict[str, dict[str, list[Path]]]) -> str:
    """12 hex digits of a hash of every image's split, class, name, size and modification time."""
    digest = hashlib.sha256()
    for split, classes in tree.items():
        for name, files in classes.items():
            for path in files:
                stat = path.stat()
                digest.update(f"{split}/{name}/{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:12]


class ImageFolder(ConvertedDataset):
    """``root/<split>/<class>/<image>`` images; the cache file is named by a fingerprint of the files."""

    name, layout, needs_root, downloadable = NAME, LAYOUT, True, False

    def cache_spec(self, spec: CacheSpec) -> CacheSpec:
        """The cache file named by the fingerprint of the tree under ``spec.root`` (checked).

        Raises:
            FileNotFoundError: if ``root`` or a split folder is missing.
            ValueError: for files that are not images or an empty class folder.
        """
        key = fingerprint(_tree(spec.root))
        return dataclasses.replace(
            spec, path=spec.path.with_name(f"{NAME}-{key}-{spec.path.name.removeprefix(NAME + '-')}")
        )

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        tree = _tree(spec.root)
        for split in SPLITS:
            classes = tree[split]
            files = [path for name in classes for path in classes[name]]
            labels = [label for label, name in enumerate(classes) for _ in classes[name]]
            yield SourceSplit(split, list(classes), ImageFiles(files, labels), len(classes))

    def statistics(self, data: ImageDataset) -> Statistics:
        """Per-channel mean and standard deviation of the training images / 255 (float64, in chunks)."""
        rows = torch.isin(data.labels, torch.tensor(data.splits["train"])).nonzero().flatten()
        total = torch.zeros(data.images.shape[1], dtype=torch.float64)
        squares = torch.zeros_like(total)
        for chunk in rows.split(4096):
            pixels = data.images[chunk].double().div_(255).transpose(0, 1).flatten(1)
            total += pixels.sum(1)
            squares += pixels.square().sum(1)
        count = len(rows) * data.images.shape[2] * data.images.shape[3]
        mean = total / count
        std = (squares / count - mean.square()).clamp_min(0).sqrt().clamp_min(1e-6)
        return tuple(mean.tolist()), tuple(std.tolist())


def _tree(root: Path) -> dict[str, dict[str, list[Path]]]:
    """Split -> class name -> image files (see :func:`split_folders` and :func:`class_files`)."""
    return {split: class_files(folder) for split, folder in split_folders(root).items()}


load_folder = ImageFolder.register()

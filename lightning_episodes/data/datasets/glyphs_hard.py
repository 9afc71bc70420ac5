"""``glyphs-hard``: the ``glyphs`` classes drawn the way real photographs are hard, no download needed.

The classes, their alphabets and the class splits are exactly ``glyphs``' (the same characters, split by
:data:`~.glyphs.SPLIT_OF_ALPHABET`: Greek, Cyrillic, Georgian and Armenian are the test classes), but each
image is a 32×32 colour picture: the character on a textured colour background, with a distractor stroke
and sometimes an occluder, under a random affine map and photometric jitter (see :mod:`.glyphs_hard_render`;
every range is a knob of :class:`~.glyphs_hard_render.Difficulty`, fixed in code). The knobs were calibrated
so that ProtoNet conv4 reaches Mini-ImageNet's accuracy regime rather than ``glyphs``' ~93-97%: with the
study's CPU config (``configs/study/glyphs_cpu.yaml``) 49.0% 5-way 1-shot and 77.7% 5-shot on the fixed test
episodes; ``docs/glyphs_hard.md`` gives the calibration runs.

Like ``glyphs`` it is deterministic from a seed (byte-identical images), rendered on first use (about a
minute on two cores) and cached as uint8 RGB under :func:`default_cache_dir`.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lightning_episodes.data.datasets import glyphs, glyphs_hard_render, rendered
from lightning_episodes.data.datasets.base import ImageDataset, register_dataset
from lightning_episodes.data.datasets.glyphs_hard_render import Difficulty
from lightning_episodes.data.datasets.rendered import RenderedDataset

NAME = "glyphs-hard"
#: Bump whenever the rendering changes: old cache files are then ignored.
FORMAT_VERSION = 1
#: The knobs the loader renders with.
DIFFICULTY = Difficulty()
#: ITU-R 601 luma weights in 1/65536, for the 1-channel variant: Pillow's ``convert("L")`` fixed-point rounding.
_LUMA_FIXED = (19595, 38470, 7471)


def default_cache_dir() -> Path:
    """``$LIGHTNING_EPISODES_CACHE/glyphs-hard``, else ``$XDG_CACHE_HOME/lightning-episodes/glyphs-hard``."""
    return rendered.default_cache_dir(NAME)


def cache_file(root: Path, image_size: int, images_per_class: int, seed: int, knobs: Difficulty = DIFFICULTY) -> Path:
    """The cache file of one parameter set (RGB; ``channels=1`` is computed from it when loading)."""
    return colour_cache_file(NAME, FORMAT_VERSION, root, image_size, images_per_class, seed, knobs)


def colour_cache_file(
    name: str, version: int, root: Path, image_size: int, images_per_class: int, seed: int, knobs: Difficulty
) -> Path:
    """The cache file of a dataset drawn by :mod:`.glyphs_hard_render` (``glyphs-hard``, ``glyphs-100``): its name,
    format ``version``, the fonts' fingerprint and a hash of the knobs name it."""
    knob_hash = hashlib.sha256(knobs.key().encode()).hexdigest()[:8]
    tag = f"v{version}-{glyphs.fingerprint()}-{knob_hash}"
    return root / f"{name}-{image_size}px-{images_per_class}per-class-seed{seed}-{tag}.pt"


def build_payload(
    image_size: int, images_per_class: int, seed: int, characters: Sequence[str] | None = None, processes: int = 1,
    knobs: Difficulty = DIFFICULTY,
) -> dict[str, Any]:  # fmt: skip
    """Render the dataset: ``{"format", "characters", "images" (uint8 [K, n, 3, H, W]), "checksum"}``.

    Args:
        image_size: height and width in pixels.
        images_per_class: renderings of each character.
        seed: seed of every random choice.
        characters: restrict to these (tests, quick experiments); default all of ``glyphs``' classes.
        processes: worker processes.
        knobs: the difficulty knobs (the loader always uses :data:`DIFFICULTY`).
    """
    chars, fonts_of = glyphs.select_characters(characters, processes)
    return colour_payload(FORMAT_VERSION, chars, fonts_of, image_size, images_per_class, seed, knobs, processes)


def colour_payload(
    version: int, chars: Sequence[str], fonts_of: Sequence[Sequence[int]], image_size: int, images_per_class: int,
    seed: int, knobs: Difficulty, processes: int,
) -> dict[str, Any]:  # fmt: skip
    """The payload of ``chars`` (drawn in the fonts ``fonts_of``) rendered by :mod:`.glyphs_hard_render`."""
    images = torch.from_numpy(
        glyphs_hard_render.render_characters(chars, fonts_of, images_per_class, image_size, seed, knobs, processes)
    )
    return {
        "format": version,
        "characters": list(chars),
        "images": images,
        "checksum": rendered.checksum(images, list(chars)),
    }


def read_cache(path: Path, image_size: int, images_per_class: int) -> dict[str, Any] | None:
    """The cached payload, or ``None`` (with a warning) if the file is missing, unreadable or corrupt."""
    return rendered.read_payload(path, FORMAT_VERSION, (images_per_class, 3, image_size, image_size), NAME)


def luma(rgb: torch.Tensor) -> torch.Tensor:
    """uint8 ``[N, 1, H, W]`` luminance of uint8 ``[N, 3, H, W]`` images, rounded as Pillow's ``convert("L")``."""
    out = torch.empty((rgb.shape[0], 1, *rgb.shape[2:]), dtype=torch.uint8)
    weights = torch.tensor(_LUMA_FIXED, dtype=torch.int32).view(1, 3, 1, 1)
    for start in range(0, rgb.shape[0], 4096):  # chunks: an int32 copy of every image would be 4x their size
        chunk = rgb[start : start + 4096].to(torch.int32)
        out[start : start + 4096] = ((chunk * weights).sum(dim=1, keepdim=True) + 32768) >> 16
    return out


def to_dataset(payload: dict[str, Any], channels: int) -> ImageDataset:
    """Label, group and split the rendered characters; per-channel statistics from the train split."""
    groups, splits = glyphs.split_by_alphabet(payload["characters"])
    return colour_dataset(payload, channels, splits, groups)


def colour_dataset(
    payload: dict[str, Any], channels: int, splits: dict[str, list[int]], groups: list[str]
) -> ImageDataset:
    """The labelled images of an RGB payload, split by class id; per-channel statistics from the train split."""
    chars: list[str] = payload["characters"]
    rgb: torch.Tensor = payload["images"]
    classes, per_class, size = rgb.shape[0], rgb.shape[1], rgb.shape[-1]
    images = rgb.reshape(classes * per_class, 3, size, size)
    if channels == 1:
        images = luma(images)
    labels = torch.arange(classes, dtype=torch.int64).repeat_interleave(per_class)
    train = images[torch.isin(labels, torch.tensor(splits["train"] or list(range(classes))))]
    mean, std = zip(*(rendered.level_statistics(train[:, c]) for c in range(channels)), strict=True)
    return ImageDataset(images, labels, list(chars), splits, tuple(mean), tuple(std), groups)


#: The cluttered colour glyphs at 32 px (16 to 128), RGB (1 channel: its luminance).
GLYPHS_HARD = RenderedDataset(NAME, sys.modules[__name__], image_size=32, channels=3, image_sizes=(16, 128))
load_glyphs_hard = register_dataset(NAME)(GLYPHS_HARD.load)

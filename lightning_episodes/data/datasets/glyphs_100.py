"""``glyphs-100``: Mini-ImageNet's shape drawn with ``glyphs-hard``'s renderer, no download needed.

Mini-ImageNet (Vinyals et al., 2016; the split of Ravi & Larochelle, 2017) is 100 classes of 600 images, 64
for training, 16 for validation and 20 for testing. Few base classes with many images each is the regime in
which a few-shot learner over-fits its base classes, unlike ``glyphs`` and ``glyphs-hard`` with their thousands
of base classes of 20 images. ``glyphs-100`` has that shape: 100 letters drawn at random (with a fixed seed) from
``glyphs``' classes, each rendered 600 times as a 32×32 colour picture by :mod:`.glyphs_hard_render` (clutter,
occluders, jitter), and split at random (another fixed seed) into 64/16/20 classes. Like Mini-ImageNet, and
unlike ``glyphs``' split by alphabet, the test classes come from the same scripts as the training classes.

Deterministic from its seed (byte-identical images), rendered on first use (about a minute and a half on two
cores) and cached as uint8 RGB under :func:`default_cache_dir`. ``docs/glyphs_100.md`` gives its calibration.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_episodes.data.datasets import glyphs, glyphs_hard, rendered
from lightning_episodes.data.datasets.base import ImageDataset, register_dataset
from lightning_episodes.data.datasets.glyphs_hard_render import Difficulty
from lightning_episodes.data.datasets.rendered import RenderedDataset

NAME = "glyphs-100"
#: Bump whenever the choice of classes or the rendering changes: old cache files are then ignored.
FORMAT_VERSION = 1
#: Classes, and images of each (Mini-ImageNet's).
CLASSES, IMAGES_PER_CLASS = 100, 600
#: Shares of the validation and test classes (Mini-ImageNet's 16 and 20 of 100).
VALIDATION_SHARE, TEST_SHARE = 0.16, 0.20
#: Seeds of the random choice of the letters and of their split (fixed: the classes never move).
CLASS_SEED, SPLIT_SEED = 2016, 2017
#: The knobs the loader renders with (``glyphs-hard``'s).
DIFFICULTY = Difficulty()


def default_cache_dir() -> Path:
    """``$LIGHTNING_EPISODES_CACHE/glyphs-100``, else ``$XDG_CACHE_HOME/lightning-episodes/glyphs-100``."""
    return rendered.default_cache_dir(NAME)


def cache_file(root: Path, image_size: int, images_per_class: int, seed: int, knobs: Difficulty = DIFFICULTY) -> Path:
    """The cache file of one parameter set (RGB; ``channels=1`` is computed from it when loading)."""
    return glyphs_hard.colour_cache_file(NAME, FORMAT_VERSION, root, image_size, images_per_class, seed, knobs)


def is_letter(ch: str) -> bool:
    """Whether Unicode calls ``ch`` a letter (punctuation, digits and symbols are too simple or too alike)."""
    return unicodedata.category(ch).startswith("L")


def choose_classes(characters: Sequence[str], count: int = CLASSES) -> list[int]:
    """Indices of ``count`` letters drawn at random (seed :data:`CLASS_SEED`) from ``characters`` (all of them if
    there are fewer), in code point order."""
    letters = [i for i, ch in enumerate(characters) if is_letter(ch)]
    if len(letters) <= count:
        return letters
    chosen = np.random.default_rng(CLASS_SEED).choice(len(letters), size=count, replace=False)
    return sorted((letters[i] for i in chosen), key=lambda i: ord(characters[i]))


def split_classes(count: int) -> dict[str, list[int]]:
    """Class ids ``0..count-1`` split at random (seed :data:`SPLIT_SEED`) into 64/16/20 per hundred, each split in
    increasing order."""
    validation, test = round(VALIDATION_SHARE * count), round(TEST_SHARE * count)
    order = np.random.default_rng(SPLIT_SEED).permutation(count).tolist()
    parts = {"train": order[: count - validation - test], "validation": order[count - validation - test : count - test]}
    parts["test"] = order[count - test :]
    return {split: sorted(ids) for split, ids in parts.items()}


def build_payload(
    image_size: int, images_per_class: int, seed: int, characters: Sequence[str] | None = None, processes: int = 1,
    knobs: Difficulty = DIFFICULTY,
) -> dict[str, Any]:  # fmt: skip
    """Render the dataset as :func:`.glyphs_hard.build_payload` does, for the letters :func:`choose_classes` picks
    among ``characters`` (default: all of ``glyphs``' classes); ``seed`` seeds the rendering, not the choice."""
    chars, fonts_of = glyphs.select_characters(characters, processes)
    chosen = choose_classes(chars)
    chars, fonts_of = [chars[i] for i in chosen], [fonts_of[i] for i in chosen]
    return glyphs_hard.colour_payload(
        FORMAT_VERSION, chars, fonts_of, image_size, images_per_class, seed, knobs, processes
    )


def read_cache(path: Path, image_size: int, images_per_class: int) -> dict[str, Any] | None:
    """The cached payload, or ``None`` (with a warning) if the file is missing, unreadable or corrupt."""
    return rendered.read_payload(path, FORMAT_VERSION, (images_per_class, 3, image_size, image_size), NAME)


def to_dataset(payload: dict[str, Any], channels: int) -> ImageDataset:
    """Label and split the rendered letters; per-channel statistics from the train split."""
    chars: list[str] = payload["characters"]
    groups = [glyphs.alphabet_of(ch) for ch in chars]
    return glyphs_hard.colour_dataset(payload, channels, split_classes(len(chars)), groups)


#: 100 letters × 600 colour pictures at 32 px (16 to 128), RGB (1 channel: its luminance).
GLYPHS_100 = RenderedDataset(
    NAME, sys.modules[__name__], image_size=32, channels=3, image_sizes=(16, 128), images_per_class=IMAGES_PER_CLASS
)
load_glyphs_100 = register_dataset(NAME)(GLYPHS_100.load)

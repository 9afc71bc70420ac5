"""``glyphs``: an Omniglot-like few-shot benchmark rendered from matplotlib's fonts, no download needed.

Each class is one character (a letter or a symbol) drawn by at least :data:`MIN_FONTS` of the fonts that
matplotlib ships (DejaVu, STIX, Computer Modern); each image draws it in a random one of those fonts
under a random affine jitter, a stroke-width change and a little noise (see :mod:`.glyphs_render`).
Classes are grouped into alphabets (a script, or a family of symbols) and the class splits are split by
alphabet, like Omniglot's background and evaluation sets:

* train (2,210 classes): Latin, modifier letters and the symbol families (punctuation, arrows,
  mathematics, geometric shapes, ...);
* validation (587): Braille, Lao, box drawing, block elements and dingbats;
* test (670): Greek, Cyrillic, Georgian and Armenian (the prototype's test alphabets).

(Counts with matplotlib 3.11's fonts, Pillow 13 and FreeType 2.14.)

The table :data:`SPLIT_OF_ALPHABET` fixes this. Characters drawn like an earlier character in most fonts
(Latin ``A``, Greek ``Α``, Cyrillic ``А``) are one class, kept under the lowest code point, so no test
class is a training class in disguise.
"""

from __future__ import annotations

import hashlib
import os
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import PIL
import torch
from PIL import features

from lightning_episodes.data.datasets import glyphs_render, rendered
from lightning_episodes.data.datasets.base import ImageDataset, register_dataset
from lightning_episodes.data.datasets.rendered import RenderedDataset, checksum, level_statistics, read_payload

# the cache helpers glyphs-hard shares, still importable from here
from lightning_episodes.data.datasets.rendered import cached_or_rendered as cached_or_rendered
from lightning_episodes.data.datasets.rendered import check_arguments as check_arguments
from lightning_episodes.data.datasets.rendered import render_processes as render_processes
from lightning_episodes.data.datasets.rendered import write_cache as write_cache

NAME = "glyphs"
#: A character is a class when at least this many fonts really draw it.
MIN_FONTS = 6
#: Bump whenever the rendering or the class selection changes: old cache files are then ignored.
FORMAT_VERSION = 2
#: Median relative L1 difference of two characters' thumbnails (over the fonts drawing both) below
#: which they are one class. Homoglyphs (A Α А, µ μ, ɛ ε, y у) measure under 0.0065; letters that differ
#: by a small mark (breve and caron, psili and dasia) 0.011 and more. The few pairs in between (c and
#: small capital ᴄ) stay two classes.
DUPLICATE_DISTANCE = 0.007
#: Loose first filter on the reference font's thumbnails, before the check over all shared fonts.
_CANDIDATE_DISTANCE = 0.05
_REFERENCE_FONT = "DejaVuSans.ttf"

#: The first word of a character's Unicode name, for the scripts that name themselves.
_SCRIPTS = {
    "LATIN": "Latin", "GREEK": "Greek", "CYRILLIC": "Cyrillic", "GEORGIAN": "Georgian", "ARMENIAN": "Armenian",
    "BRAILLE": "Braille", "LAO": "Lao", "MODIFIER": "Modifier letters",
}  # fmt: skip
#: Unicode blocks (first, last code point) → symbol family, for everything else. Small neighbouring
#: blocks are merged so that every family has a few dozen classes.
_BLOCKS = (
    (0x0000, 0x00FF, "ASCII and Latin-1 signs"),
    (0x02B0, 0x02FF, "Modifier letters"),
    (0x2000, 0x206F, "Punctuation"),
    (0x2070, 0x209F, "Superscripts and subscripts"),
    (0x20A0, 0x20CF, "Currency"),
    (0x2100, 0x214F, "Letterlike symbols"),
    (0x2150, 0x218F, "Number forms"),
    (0x2190, 0x21FF, "Arrows"),
    (0x2200, 0x22FF, "Mathematical operators"),
    (0x2300, 0x245F, "Technical symbols"),
    (0x2460, 0x24FF, "Number forms"),
    (0x2500, 0x257F, "Box drawing"),
    (0x2580, 0x259F, "Block elements"),
    (0x25A0, 0x25FF, "Geometric shapes"),
    (0x2600, 0x26FF, "Miscellaneous symbols"),
    (0x2700, 0x27BF, "Dingbats"),
    (0x27C0, 0x27EF, "Mathematical operators"),
    (0x27F0, 0x27FF, "Arrows"),
    (0x2900, 0x297F, "Arrows"),
    (0x2980, 0x2AFF, "Mathematical operators"),
    (0x2B00, 0x2B11, "Arrows"),
    (0x2B12, 0x2BFF, "Geometric shapes"),
    (0x2E00, 0x2E7F, "Punctuation"),
    (0x1D400, 0x1D7FF, "Mathematical alphanumerics"),
)
OTHER_SYMBOLS = "Other symbols"

#: Alphabet → split. Alphabets missing here (only possible if the fonts change) go to "train", so the
#: validation and test classes never move.
SPLIT_OF_ALPHABET = {
    "Latin": "train", "Modifier letters": "train", "Mathematical alphanumerics": "train",
    "ASCII and Latin-1 signs": "train", "Punctuation": "train", "Superscripts and subscripts": "train",
    "Currency": "train", "Letterlike symbols": "train", "Number forms": "train", "Arrows": "train",
    "Mathematical operators": "train", "Technical symbols": "train", "Geometric shapes": "train",
    "Miscellaneous symbols": "train", OTHER_SYMBOLS: "train",
    "Braille": "validation", "Lao": "validation", "Box drawing": "validation", "Block elements": "validation",
    "Dingbats": "validation",
    "Greek": "test", "Cyrillic": "test", "Georgian": "test", "Armenian": "test",
}  # fmt: skip


def alphabet_of(ch: str) -> str:
    """The alphabet of a character: its script, or its family of symbols."""
    script = _SCRIPTS.get(unicodedata.name(ch, "").split(" ")[0])
    if script is not None:
        return script
    code = ord(ch)
    return next((family for first, last, family in _BLOCKS if first <= code <= last), OTHER_SYMBOLS)


def _near_duplicates(fonts_of: Sequence[Sequence[int]], thumbnails: Sequence[np.ndarray], reference: int) -> set[int]:
    """Indices of the characters drawn like an earlier one in most of the fonts that draw both.

    Two characters are one class when the median, over the fonts drawing both, of the relative L1
    difference ``Σ|a - b| / (Σa + Σb)`` of their thumbnails is below :data:`DUPLICATE_DISTANCE`. Candidate
    pairs come from the reference font (DejaVu Sans draws all but a handful of the characters).
    """
    thumbs = [t.reshape(len(t), -1).astype(np.float32) for t in thumbnails]
    thumbs = [t / np.maximum(t.max(axis=1, keepdims=True), 1.0) for t in thumbs]
    column = [{font: k for k, font in enumerate(fonts)} for fonts in fonts_of]
    drawn = [i for i, fonts in enumerate(fonts_of) if reference in column[i]]
    x = np.stack([thumbs[i][column[i][reference]] for i in drawn]) if drawn else np.zeros((0, 1), np.float32)
    squares, mass = (x * x).sum(axis=1), x.sum(axis=1)
    duplicates: set[int] = set()
    for start in range(0, len(drawn), 512):
        rows = slice(start, start + 512)
        # Σ(a - b)² ≤ Σ|a - b| for pixels in [0, 1]: a cheap matrix-product bound that keeps every pair
        # whose relative L1 difference is below the candidate threshold.
        squared = squares[rows, None] + squares[None, :] - 2.0 * x[rows] @ x.T
        close = squared < _CANDIDATE_DISTANCE * (mass[rows, None] + mass[None, :])
        for a, b in zip(*np.nonzero(close), strict=True):
            i, j = drawn[start + a], drawn[b]
            if i >= j or j in duplicates:
                continue
            shared = [f for f in column[i] if f in column[j]]
            ti, tj = thumbs[i][[column[i][f] for f in shared]], thumbs[j][[column[j][f] for f in shared]]
            relative = np.abs(ti - tj).sum(axis=1) / (ti.sum(axis=1) + tj.sum(axis=1))
            if np.median(relative) < DUPLICATE_DISTANCE:
                duplicates.add(j)
    return duplicates


def select_characters(characters: Sequence[str] | None = None, processes: int = 1) -> tuple[list[str], list[list[int]]]:
    """The classes: characters really drawn by ≥ :data:`MIN_FONTS` fonts, near-duplicates removed.

    Args:
        characters: restrict to these (for quick experiments and tests); default all candidates.
        processes: worker processes for the scan.

    Returns:
        The characters in code point order, and for each the indices of the fonts that draw it.
    """
    fonts = glyphs_render.load_fonts()
    if characters is None:
        characters = glyphs_render.candidate_characters(fonts, MIN_FONTS)
    characters = sorted(set(characters), key=ord)
    scans = glyphs_render.scan_characters(characters, processes)
    drawn = [(ch, *scan) for ch, scan in zip(characters, scans, strict=True) if len(scan[0]) >= MIN_FONTS]
    reference = next((i for i, f in enumerate(fonts) if f.name == _REFERENCE_FONT), 0)
    duplicates = _near_duplicates([d[1] for d in drawn], [d[2] for d in drawn], reference)
    kept = [d for i, d in enumerate(drawn) if i not in duplicates]
    return [d[0] for d in kept], [d[1] for d in kept]


def default_cache_dir(name: str = NAME) -> Path:
    """``$LIGHTNING_EPISODES_CACHE/glyphs``, else ``$XDG_CACHE_HOME/lightning-episodes/glyphs``, where
    ``XDG_CACHE_HOME`` defaults to ``~/.cache``."""
    return rendered.default_cache_dir(name)


def fingerprint() -> str:
    """What the pixels depend on besides the parameters: the font files and the rasteriser versions."""
    fonts = [(f.name, os.path.getsize(f.path)) for f in glyphs_render.load_fonts()]
    text = repr((fonts, PIL.__version__, features.version("freetype2"), MIN_FONTS, DUPLICATE_DISTANCE))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def cache_file(root: Path, image_size: int, images_per_class: int, seed: int) -> Path:
    """The cache file of one parameter set. Images are stored grey; ``channels`` only repeats them."""
    version = f"v{FORMAT_VERSION}-{fingerprint()}"
    return root / f"{NAME}-{image_size}px-{images_per_class}per-class-seed{seed}-{version}.pt"


def build_payload(
    image_size: int, images_per_class: int, seed: int, characters: Sequence[str] | None = None, processes: int = 1
) -> dict[str, Any]:  # fmt: skip
    """Render the dataset: ``{"format", "characters", "images" (uint8 [K, n, H, W]), "checksum"}``."""
    chars, fonts_of = select_characters(characters, processes)
    images = torch.from_numpy(
        glyphs_render.render_characters(chars, fonts_of, images_per_class, image_size, seed, processes)
    )
    return {"format": FORMAT_VERSION, "characters": chars, "images": images, "checksum": checksum(images, chars)}


def read_cache(path: Path, image_size: int, images_per_class: int) -> dict[str, Any] | None:
    """The cached payload, or ``None`` (with a warning) if the file is missing, unreadable or corrupt."""
    return read_payload(path, FORMAT_VERSION, (images_per_class, image_size, image_size), NAME)


def split_by_alphabet(chars: Sequence[str]) -> tuple[list[str], dict[str, list[int]]]:
    """Each character's alphabet, and the class ids of each split (by :data:`SPLIT_OF_ALPHABET`)."""
    groups = [alphabet_of(ch) for ch in chars]
    splits: dict[str, list[int]] = {"train": [], "validation": [], "test": []}
    for k, group in enumerate(groups):
        splits[SPLIT_OF_ALPHABET.get(group, "train")].append(k)
    return groups, splits


def to_dataset(payload: dict[str, Any], channels: int) -> ImageDataset:
    """Label, group and split the rendered characters; normalisation statistics from the train split."""
    chars: list[str] = payload["characters"]
    grey: torch.Tensor = payload["images"]
    classes, per_class, size = grey.shape[0], grey.shape[1], grey.shape[-1]
    groups, splits = split_by_alphabet(chars)
    mean, std = level_statistics(grey[splits["train"]] if splits["train"] else grey)
    images = grey.reshape(classes * per_class, 1, size, size).expand(-1, channels, -1, -1).contiguous()
    labels = torch.arange(classes, dtype=torch.int64).repeat_interleave(per_class)
    return ImageDataset(images, labels, list(chars), splits, (mean,) * channels, (std,) * channels, groups)


#: The white-on-black glyphs at 28 px (8 to 256), one grey channel (3: the grey channel repeated).
GLYPHS = RenderedDataset(NAME, sys.modules[__name__], image_size=28, channels=1, image_sizes=(8, 256))
load_glyphs = register_dataset(NAME)(GLYPHS.load)

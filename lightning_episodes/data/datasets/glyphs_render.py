"""Rendering for the embedded ``glyphs`` dataset: which fonts really draw a character, and its images.

Everything here is numpy + PIL + fontTools (no torch). Each character's images are a pure function of
``(seed, code point, image_size, images_per_class)`` and of the fonts: the random numbers come from
generators seeded by ``(seed, code point)``, never from global state, so rendering any subset of the
characters, in any order or process, gives the same images for them.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from fontTools import agl
from fontTools.ttLib import TTFont
from PIL import Image, ImageDraw, ImageFont

from lightning_episodes.data.datasets.progress import bar

#: Claims every code point but draws the same placeholder box for all of them.
EXCLUDED_FONTS = frozenset({"LastResortHE-Regular.ttf"})
#: Letters, numbers, punctuation and symbols; marks, separators, controls and private use are not
#: characters one can draw on their own.
KEPT_CATEGORIES = ("L", "N", "P", "S")
#: Supersampling: glyphs are drawn on a canvas this many times larger than the image, then box-averaged
#: (3 looks no better and costs 40% more); 1 for large images, whose canvas would make rendering slow.
SUPERSAMPLE = 2
MAX_CANVAS = 192
#: Font size (pixels per em) as a fraction of the canvas: capitals then fill about 60% of its height.
EM_FRACTION = 0.8
#: Half of the canvas a glyph may fill before it is shrunk to fit (wide arrows, big operators).
FIT_FRACTION = 0.46
#: The presence scan and the near-duplicate thumbnails use one fixed size, so that the class list never
#: depends on the requested ``image_size``.
THUMBNAIL_SIZE = 16
SCAN_SUPERSAMPLE = 3
SCAN_CANVAS = SCAN_SUPERSAMPLE * THUMBNAIL_SIZE

_R = TypeVar("_R")


@dataclass(frozen=True, eq=False)
class FontFace:
    """One font file and the characters its character map offers.

    Args:
        name: file name, e.g. ``"DejaVuSans.ttf"``.
        path: absolute path of the file.
        codes: character → code point to render for it. The identity except in the Computer Modern
            fonts, whose ``cmap`` carries TeX's encodings (``"!"`` draws an arrow in ``cmsy10``): their
            glyphs are reached through their PostScript names instead.
        unmapped: a code point absent from the font's ``cmap``, which therefore draws ``.notdef``.
    """

    name: str
    path: str
    codes: dict[str, int]
    unmapped: int


def font_directory() -> Path:
    """Matplotlib's bundled TrueType fonts (DejaVu, STIX, Computer Modern)."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def _drawable(ch: str) -> bool:
    return unicodedata.category(ch)[0] in KEPT_CATEGORIES


def _read_font(path: Path) -> FontFace:
    with TTFont(path, lazy=True) as font:
        cmap: dict[int, str] = font.getBestCmap()
    names = {cp: agl.toUnicode(glyph) for cp, glyph in cmap.items()}
    named = [cp for cp, text in names.items() if len(text) == 1]
    # A font whose glyph names mostly disagree with its cmap is re-encoded (TeX's OT1/OMS/OML
    # layouts in matplotlib's BaKoMa fonts); trusting its cmap would put arrows into the class "!".
    reencoded = sum(names[cp] != chr(cp) for cp in named) > 0.1 * max(len(named), 1)
    codes: dict[str, int] = {}
    for cp, glyph in sorted(cmap.items()):
        ch = names[cp] if reencoded else chr(cp)
        if glyph != ".notdef" and len(ch) == 1 and _drawable(ch):
            codes.setdefault(ch, cp)
    unmapped = next(cp for cp in range(0x10FFFD, 0, -1) if cp not in cmap)
    return FontFace(path.name, str(path), codes, unmapped)


@functools.lru_cache(maxsize=1)
def load_fonts() -> tuple[FontFace, ...]:
    """Read the character maps of matplotlib's usable fonts, sorted by file name."""
    root = font_directory()
    paths = sorted(p for p in root.glob("*.ttf") if p.name not in EXCLUDED_FONTS)
    if not paths:
        raise FileNotFoundError(f"no TrueType fonts found in {root}")
    return tuple(_read_font(p) for p in paths)


def candidate_characters(fonts: Sequence[FontFace], min_fonts: int) -> list[str]:
    """Characters that at least ``min_fonts`` character maps claim, in code point order."""
    counts: dict[str, int] = {}
    for face in fonts:
        for ch in face.codes:
            counts[ch] = counts.get(ch, 0) + 1
    return sorted((ch for ch, n in counts.items() if n >= min_fonts), key=ord)


@dataclass(frozen=True)
class _Glyph:
    """A glyph's ink (an ``L`` image cropped to the ink), where it lies relative to the pen on the
    baseline, and the middle of its advance width (the horizontal centre of the character cell)."""

    ink: Image.Image
    left: int
    top: int
    middle: float

    def same_drawing(self, other: _Glyph) -> bool:
        same_box = (self.left, self.top, self.ink.size) == (other.left, other.top, other.ink.size)
        return same_box and self.ink.tobytes() == other.ink.tobytes()


class _Renderer:
    """The fonts opened at one size (``em`` pixels per em) for a canvas of ``canvas`` pixels."""

    def __init__(self, fonts: tuple[FontFace, ...], canvas: int) -> None:
        self.fonts = fonts
        self.canvas = canvas
        self.em = max(1, round(EM_FRACTION * canvas))
        # One character needs no shaping: the basic layout is much faster than Raqm's.
        self.faces = [ImageFont.truetype(f.path, self.em, layout_engine=ImageFont.Layout.BASIC) for f in fonts]
        self.notdef = [self._draw(i, chr(f.unmapped)) for i, f in enumerate(fonts)]

    def _draw(self, font: int, text: str) -> _Glyph | None:
        face = self.faces[font]
        x0, y0, x1, y1 = (int(v) for v in face.getbbox(text, anchor="ls"))
        if x1 <= x0 or y1 <= y0:
            return None
        ink = Image.new("L", (x1 - x0, y1 - y0))
        ImageDraw.Draw(ink).text((-x0, -y0), text, fill=255, font=face, anchor="ls")
        # The font's box is not always tight (it spans the advance width, or a tall empty box).
        box = ink.getbbox()
        if box is None:
            return _Glyph(ink, x0, y0, (x0 + x1) / 2)
        advance = face.getlength(text)
        middle = advance / 2 if advance > 0 else x0 + (box[0] + box[2]) / 2
        return _Glyph(ink.crop(box), x0 + box[0], y0 + box[1], middle)

    def glyph(self, font: int, ch: str) -> _Glyph | None:
        """The drawing of ``ch`` in ``font``, or ``None`` where the font does not really draw it."""
        code = self.fonts[font].codes.get(ch)
        if code is None:
            return None
        glyph = self._draw(font, chr(code))
        # Blank glyphs and copies of .notdef (a box, or nothing) are claimed but not drawn.
        if glyph is None or glyph.ink.getbbox() is None:
            return None
        notdef = self.notdef[font]
        if notdef is not None and glyph.same_drawing(notdef):
            return None
        return glyph

    def place(
        self, glyph: _Glyph, out: int, jitter: tuple[float, float, float, float, float] | None = None
    ) -> Image.Image:
        """Draw ``glyph`` on an ``out`` × ``out`` canvas, optionally under a random-affine ``jitter``.

        The glyph keeps its place in its character cell: its height relative to the baseline (so "," and
        "'" stay different classes) and its offset from the middle of its advance width (so "▌" and "▐"
        do too). Glyphs too large for the canvas are shrunk to fit. ``jitter`` is
        ``(angle in radians, scale, shear, shift x, shift y)``, shifts as fractions of the canvas.
        """
        angle, scale, shear, sx, sy = jitter if jitter is not None else (0.0, 1.0, 0.0, 0.0, 0.0)
        w, h = glyph.ink.size
        # Centre of the canvas in glyph coordinates: the middle of the cell, 0.35 em above the baseline
        # (the middle of a capital letter).
        cx, cy = glyph.middle, -0.35 * self.em
        reach = max(abs(glyph.left - cx), abs(glyph.left + w - cx), abs(glyph.top - cy), abs(glyph.top + h - cy))
        fit = min(1.0, FIT_FRACTION * self.canvas / max(reach, 1e-6))
        size = (out / self.canvas) * fit * (min(scale, 1.0) if fit < 1.0 else scale)
        cos, sin = math.cos(angle), math.sin(angle)
        # Forward map (glyph → canvas) is size · R(angle) · [[1, shear], [0, 1]]; PIL wants the inverse.
        a, b, c, d = size * cos, size * (cos * shear - sin), size * sin, size * (sin * shear + cos)
        det = a * d - b * c
        ia, ib, ic, id_ = d / det, -b / det, -c / det, a / det
        ox, oy = out * (0.5 + sx), out * (0.5 + sy)
        tx = cx - glyph.left - (ia * ox + ib * oy)
        ty = cy - glyph.top - (ic * ox + id_ * oy)
        return glyph.ink.transform(
            (out, out), Image.Transform.AFFINE, (ia, ib, tx, ic, id_, ty), resample=Image.Resampling.BILINEAR
        )


@functools.lru_cache(maxsize=4)
def _renderer(canvas: int) -> _Renderer:
    return _Renderer(load_fonts(), canvas)


def _stroke(glyph: _Glyph, radius: int) -> _Glyph | None:
    """Dilate (``radius`` > 0) or erode (< 0) the ink by a square of side ``2 |radius| + 1`` pixels.

    Returns ``None`` for an erosion that would remove more than half of the ink (a hairline).
    """
    r = abs(radius)
    ink = np.asarray(glyph.ink)
    h, w = ink.shape
    # Pad by r so that dilated ink fits; out-of-image neighbours count as background (0).
    padded = np.zeros((h + 2 * r, w + 2 * r), np.uint8)
    padded[r : r + h, r : r + w] = ink
    op = np.maximum if radius > 0 else np.minimum
    # Separable: a square window's extremum is the extremum over columns of the extremum over rows.
    for axis in (0, 1):
        out = padded.copy()
        for d in range(1, r + 1):
            lead, lag = [slice(None)] * 2, [slice(None)] * 2
            lead[axis], lag[axis] = slice(d, None), slice(None, -d)
            out[tuple(lead)] = op(out[tuple(lead)], padded[tuple(lag)])
            out[tuple(lag)] = op(out[tuple(lag)], padded[tuple(lead)])
        padded = out
    if radius < 0 and padded.sum(dtype=np.int64) < ink.sum(dtype=np.int64) // 2:
        return None
    return _Glyph(Image.fromarray(padded), glyph.left - r, glyph.top - r, glyph.middle)


def supersample_for(image_size: int) -> int:
    """The supersampling of ``image_size`` images: :data:`SUPERSAMPLE`, less where the canvas would pass
    :data:`MAX_CANVAS`."""
    return max(1, min(SUPERSAMPLE, MAX_CANVAS // image_size))


def stroked_glyph(renderer: _Renderer, cache: dict[tuple[int, int], _Glyph], font: int, ch: str, radius: int) -> _Glyph:
    """``ch`` in ``font`` with its strokes widened by ``radius`` canvas pixels (narrowed when negative), kept
    in ``cache`` under ``(font, radius)``.

    Raises:
        RuntimeError: if the font does not draw ``ch`` (the class selection promised it does).
    """
    if (font, 0) not in cache:
        glyph = renderer.glyph(font, ch)
        if glyph is None:
            raise RuntimeError(f"{renderer.fonts[font].name} does not draw {ch!r} on a {renderer.canvas} px canvas")
        cache[font, 0] = glyph
    if (font, radius) not in cache:
        # Eroding a hairline could erase it: such a glyph keeps its own stroke width.
        cache[font, radius] = _stroke(cache[font, 0], radius) or cache[font, 0]
    return cache[font, radius]


def scan_character(ch: str) -> tuple[list[int], np.ndarray]:
    """Which fonts really draw ``ch``, and a plain (unjittered) thumbnail of it in each of them.

    Returns:
        The indices into :func:`load_fonts` of those fonts, and a uint8 array
        ``[len(indices), THUMBNAIL_SIZE, THUMBNAIL_SIZE]``.
    """
    renderer = _renderer(SCAN_CANVAS)
    indices, thumbnails = [], []
    for font in range(len(renderer.fonts)):
        glyph = renderer.glyph(font, ch)
        if glyph is not None:
            indices.append(font)
            thumbnails.append(np.asarray(renderer.place(glyph, SCAN_CANVAS).reduce(SCAN_SUPERSAMPLE)))
    if not thumbnails:
        return indices, np.zeros((0, THUMBNAIL_SIZE, THUMBNAIL_SIZE), np.uint8)
    return indices, np.stack(thumbnails)


def render_character(
    ch: str, font_indices: Sequence[int], images_per_class: int, image_size: int, seed: int
) -> np.ndarray:
    """``images_per_class`` jittered renderings of ``ch``, each in a random font among ``font_indices``.

    Returns:
        uint8 array ``[images_per_class, image_size, image_size]``, bright ink on a dark background.
    """
    supersample = supersample_for(image_size)
    renderer = _renderer(supersample * image_size)
    n = images_per_class
    # Geometry is drawn up front from its own generator, noise from another, so image k's font and
    # jitter do not depend on image_size (the noise needs image_size² numbers per image).
    geometry = np.random.default_rng([seed, ord(ch), 0])
    noise = np.random.default_rng([seed, ord(ch), 1])
    choice = geometry.integers(len(font_indices), size=n)
    angle = np.deg2rad(geometry.uniform(-15.0, 15.0, size=n))
    scale = np.exp(geometry.uniform(math.log(0.85), math.log(1.15), size=n))
    shear = geometry.uniform(-0.2, 0.2, size=n)
    shift = geometry.uniform(-0.07, 0.07, size=(n, 2))
    # Stroke width change in thirds of an image pixel: thinner by 1/3, kept, bolder by 1/3 or 2/3, on top
    # of the fonts' own regular and bold weights.
    stroke = geometry.choice([-1, 0, 1, 2], p=[0.25, 0.35, 0.25, 0.15], size=n)
    sigma = geometry.uniform(0.0, 12.0, size=n)
    glyphs: dict[tuple[int, int], _Glyph] = {}
    images = np.empty((n, image_size, image_size), np.float32)
    for k in range(n):
        font, radius = font_indices[choice[k]], round(int(stroke[k]) * supersample / 3)
        jitter = (float(angle[k]), float(scale[k]), float(shear[k]), float(shift[k, 0]), float(shift[k, 1]))
        canvas = renderer.place(stroked_glyph(renderer, glyphs, font, ch, radius), renderer.canvas, jitter)
        images[k] = np.asarray(canvas.reduce(supersample))
    peak = images.max(axis=(1, 2), keepdims=True)
    if (peak <= 0).any():
        raise RuntimeError(f"rendering {ch!r} at {image_size} px left no ink")
    # Full contrast for every image (a thin, shrunk glyph would otherwise be faint), then a little noise.
    images *= 255.0 / peak
    images += noise.normal(0.0, 1.0, size=images.shape) * sigma[:, None, None]
    return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def scan_characters(chars: Sequence[str], processes: int = 1) -> list[tuple[list[int], np.ndarray]]:
    """:func:`scan_character` for each of ``chars``, over ``processes`` worker processes."""
    arguments = [(ch,) for ch in chars]
    return parallel_starmap(scan_character, arguments, processes, "finding the fonts that draw each character")


def render_characters(
    chars: Sequence[str], font_indices: Sequence[Sequence[int]], images_per_class: int, image_size: int, seed: int,
    processes: int = 1,
) -> np.ndarray:  # fmt: skip
    """Images of several characters: uint8 ``[len(chars), images_per_class, image_size, image_size]``."""
    render = functools.partial(render_character, images_per_class=images_per_class, image_size=image_size, seed=seed)
    progress = f"rendering {images_per_class} images of each character at {image_size} px"
    images = parallel_starmap(render, list(zip(chars, font_indices, strict=True)), processes, progress)
    return np.stack(images) if images else np.zeros((0, images_per_class, image_size, image_size), np.uint8)


def parallel_starmap(
    fn: Callable[..., _R], arguments: Sequence[tuple[Any, ...]], processes: int, progress: str = ""
) -> list[_R]:
    """``[fn(*a) for a in arguments]``, in order, over ``processes`` forked workers (serial when 1), with a progress
    bar described by ``progress`` while a dataset reports its first-time work (:mod:`.progress`).

    The result does not depend on ``processes``: each call is a pure function of its arguments.
    """
    serial = processes <= 1 or len(arguments) < 2 or "fork" not in multiprocessing.get_all_start_methods()
    with bar(len(arguments), progress) as shown:
        if serial or multiprocessing.current_process().daemon:  # a daemon (a DataLoader worker) has no children
            results = []
            for a in arguments:
                results.append(fn(*a))
                shown.update()
            return results
        # fork, not spawn: the workers need only the numpy/PIL/font state already loaded here, while spawn
        # would re-import torch and Lightning in each of them.
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            chunks = max(1, len(arguments) // (8 * processes))
            results = []
            for result in pool.imap(functools.partial(_star, fn), arguments, chunksize=chunks):
                results.append(result)
                shown.update()
            return results


def _star(fn: Callable[..., _R], arguments: tuple[Any, ...]) -> _R:
    return fn(*arguments)

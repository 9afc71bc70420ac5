"""Rendering for ``glyphs-hard``: a glyph in colour on clutter, partly hidden, under strong jitter.

Everything here is numpy + PIL (no torch), built on :mod:`.glyphs_render`'s fonts and glyph placement.
As there, each character's images are a pure function of ``(seed, code point, image_size,
images_per_class, difficulty)`` and of the fonts: the random numbers come from generators seeded by
``(seed, code point, stream)``, so any subset of the characters renders identically in any order or process.

An image is composed, back to front, of (every amount drawn per image within :class:`Difficulty`'s ranges):

1. a textured background: a smooth random colour field (bilinear from a 4×4 grid) plus a colour grating
   (stripes of random frequency, orientation and phase);
2. clutter: distractor strokes (lines and arcs about as thick as the glyph's), optionally in the glyph's own
   colour, and fragments of other characters (Latin letters and digits, half outside the frame; off in the
   shipped setting, which proved too hard to learn within the study's budget);
3. the glyph, in a random font under a random affine map and stroke-width change, filled with a
   two-colour gradient whose luminance differs from the background's by at least ``min_contrast``;
4. an occluder (a rectangle or an ellipse, textured) over part of the glyph;
5. photometric jitter: contrast, brightness, a colour cast, then pixel noise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass

import numpy as np
from PIL import Image, ImageDraw

from lightning_episodes.data.datasets import glyphs_render
from lightning_episodes.data.datasets.glyphs_render import _Glyph, _renderer, stroked_glyph

#: Characters whose fragments clutter the background (every font draws most of them).
CLUTTER_CHARACTERS = "ABCDEFGHJKLMNPQRSTUVWXYZabdefghkmnqrstuwxyz23456789&%#@"
#: ITU-R 601 luma weights (what Pillow's ``convert("L")`` uses).
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


@dataclass(frozen=True)
class Difficulty:
    """The knobs of ``glyphs-hard``: ranges that each image's nuisances are drawn from (uniformly).

    The loader uses the defaults; they were calibrated so that ProtoNet conv4 reaches Mini-ImageNet-like
    accuracy (see ``docs/glyphs_hard.md``). Changing one changes the cache file's name.

    Args:
        rotation: largest rotation of the glyph, degrees.
        scale: smallest and largest scale of the glyph (1: capitals fill about 60% of the height).
        shear: largest horizontal shear.
        shift: largest translation, as a fraction of the image side.
        min_contrast: smallest luminance difference (in [0, 1]) between the glyph's mean colour and the
            background's mean colour.
        max_contrast: largest such luminance difference.
        variation: how far the background's colour field strays from its mean colour (1: each of the 4×4
            nodes of the field draws its colour uniformly; 0: one flat colour).
        texture: largest amplitude of the background's colour grating.
        strokes: largest number of distractor strokes.
        stroke_in_glyph_colour: probability that an image's strokes share the glyph's colour.
        clutter: largest number of clutter-character fragments.
        occluder_probability: probability of an occluder.
        occluder_size: smallest and largest side of the occluder, as a fraction of the image side.
        contrast: smallest and largest photometric contrast factor (about the image's mean).
        brightness: largest brightness shift.
        colour_cast: largest per-channel gain change (a gain in ``1 ± colour_cast``).
        noise: largest standard deviation of the Gaussian pixel noise.
    """

    rotation: float = 20.0
    scale: tuple[float, float] = (0.75, 1.1)
    shear: float = 0.2
    shift: float = 0.08
    min_contrast: float = 0.3
    max_contrast: float = 0.7
    variation: float = 1.0
    texture: float = 0.12
    strokes: int = 1
    stroke_in_glyph_colour: float = 0.0
    clutter: int = 0
    occluder_probability: float = 0.3
    occluder_size: tuple[float, float] = (0.15, 0.3)
    contrast: tuple[float, float] = (0.85, 1.1)
    brightness: float = 0.06
    colour_cast: float = 0.08
    noise: float = 0.03

    def key(self) -> str:
        """A short text naming every knob's value (for the cache fingerprint)."""
        return repr(astuple(self))


def _upsampler(low: int, high: int) -> np.ndarray:
    """``[high, low]`` bilinear interpolation matrix (align-corners) from ``low`` to ``high`` samples."""
    position = np.linspace(0.0, low - 1.0, high)
    left = np.clip(np.floor(position).astype(int), 0, low - 2)
    frac = position - left
    matrix = np.zeros((high, low), np.float32)
    matrix[np.arange(high), left] = 1.0 - frac
    matrix[np.arange(high), left + 1] = frac
    return matrix


def _backgrounds(rng: np.random.Generator, n: int, size: int, variation: float, amplitude: float) -> np.ndarray:
    """``[n, 3, size, size]`` textured colour backgrounds in [0, 1] (before clipping)."""
    up = _upsampler(4, size)
    nodes, mean = rng.uniform(0.0, 1.0, (n, 3, 4, 4)), rng.uniform(0.0, 1.0, (n, 3, 1, 1))
    nodes = (mean + variation * (nodes - mean)).astype(np.float32)
    field = np.einsum("hi,ncij,wj->nchw", up, nodes, up)
    angle, phase = rng.uniform(0.0, math.pi, n), rng.uniform(0.0, 2 * math.pi, n)
    frequency = rng.uniform(1.5, 6.0, n) * 2 * math.pi / size
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    wave = np.sin(
        frequency[:, None, None] * (x * np.cos(angle)[:, None, None] + y * np.sin(angle)[:, None, None])
        + phase[:, None, None]
    )
    square = rng.uniform(size=n) < 0.5  # stripes rather than waves
    wave = np.where(square[:, None, None], np.sign(wave), wave).astype(np.float32)
    colour = rng.normal(0.0, 1.0, (n, 3)).astype(np.float32)
    colour /= np.linalg.norm(colour, axis=1, keepdims=True) + 1e-6
    strength = rng.uniform(0.0, amplitude, n).astype(np.float32)
    return field + (strength[:, None] * colour)[:, :, None, None] * wave[:, None]


@functools.lru_cache(maxsize=512)
def _clutter_glyph(canvas: int, font: int, ch: str) -> _Glyph | None:
    return _renderer(canvas).glyph(font, ch)


def _layers(
    rng: np.random.Generator,
    ch: str,
    font_indices: Sequence[int],
    n: int,
    canvas: int,
    supersample: int,
    knobs: Difficulty,
) -> tuple[list[Image.Image], list[Image.Image], list[Image.Image], list[Image.Image]]:
    """Per image, the ``L`` masks (canvas size) of the glyph, the clutter, the strokes and the occluder."""
    renderer = _renderer(canvas)
    fonts = len(renderer.fonts)
    cache: dict[tuple[int, int], _Glyph] = {}
    glyph_masks, clutter_masks, stroke_masks, occluder_masks = [], [], [], []
    for _ in range(n):
        # stroke width change in thirds of an image pixel, as in glyphs
        font, radius = font_indices[int(rng.integers(len(font_indices)))], int(rng.integers(-1, 3))
        radius = round(radius * supersample / 3)
        jitter = (
            math.radians(rng.uniform(-knobs.rotation, knobs.rotation)),
            math.exp(rng.uniform(math.log(knobs.scale[0]), math.log(knobs.scale[1]))),
            rng.uniform(-knobs.shear, knobs.shear),
            rng.uniform(-knobs.shift, knobs.shift),
            rng.uniform(-knobs.shift, knobs.shift),
        )
        glyph_masks.append(renderer.place(stroked_glyph(renderer, cache, font, ch, radius), canvas, jitter))

        clutter = Image.new("L", (canvas, canvas))
        for _ in range(int(rng.integers(0, knobs.clutter + 1))):
            other = CLUTTER_CHARACTERS[int(rng.integers(len(CLUTTER_CHARACTERS)))]
            piece = _clutter_glyph(canvas, int(rng.integers(fonts)), other)
            # a fragment: centred near an edge, so about half of it lies outside the frame
            side, along = rng.uniform(0.38, 0.5) * rng.choice([-1.0, 1.0]), rng.uniform(-0.4, 0.4)
            sx, sy = (side, along) if rng.uniform() < 0.5 else (along, side)
            angle = math.radians(rng.uniform(-180.0, 180.0))
            if piece is not None:
                placed = renderer.place(piece, canvas, (angle, rng.uniform(0.8, 1.4), 0.0, sx, sy))
                clutter.paste(255, mask=placed)
        clutter_masks.append(clutter)

        strokes = Image.new("L", (canvas, canvas))
        draw = ImageDraw.Draw(strokes)
        width = max(1, round(canvas * rng.uniform(0.035, 0.07)))
        for _ in range(int(rng.integers(0, knobs.strokes + 1))):
            box = sorted(rng.uniform(-0.1, 1.1, 2) * canvas), sorted(rng.uniform(-0.1, 1.1, 2) * canvas)
            (x0, x1), (y0, y1) = box
            if rng.uniform() < 0.5:
                draw.line((x0, y0, x1, y1) if rng.uniform() < 0.5 else (x0, y1, x1, y0), fill=255, width=width)
            else:
                start = rng.uniform(0.0, 360.0)
                draw.arc((x0, y0, x1 + 2, y1 + 2), start, start + rng.uniform(60.0, 270.0), fill=255, width=width)
        stroke_masks.append(strokes)

        occluder = Image.new("L", (canvas, canvas))
        if rng.uniform() < knobs.occluder_probability:
            w, h = rng.uniform(*knobs.occluder_size, 2) * canvas
            cx, cy = rng.uniform(0.3, 0.7, 2) * canvas
            corners = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            draw = ImageDraw.Draw(occluder)
            (draw.rectangle if rng.uniform() < 0.5 else draw.ellipse)(corners, fill=255)
        occluder_masks.append(occluder)
    return glyph_masks, clutter_masks, stroke_masks, occluder_masks


def _reduce(masks: list[Image.Image], supersample: int) -> np.ndarray:
    """``[n, 1, size, size]`` float masks in [0, 1] from canvas-size ``L`` images."""
    return np.stack([np.asarray(m.reduce(supersample), np.float32) for m in masks])[:, None] / 255.0


def _colours_against(rng: np.random.Generator, background: np.ndarray, knobs: Difficulty) -> np.ndarray:
    """``[n, 3]`` colours whose luminance differs from ``background``'s (``[n, 3]``) by a drawn contrast."""
    n = len(background)
    colour = rng.uniform(0.0, 1.0, (n, 3)).astype(np.float32)
    target = background @ LUMA + rng.choice([-1.0, 1.0], n) * rng.uniform(knobs.min_contrast, knobs.max_contrast, n)
    # reflect a target outside [0, 1] to the other side of the background's luminance
    target = np.where((target < 0.02) | (target > 0.98), 2 * (background @ LUMA) - target, target)
    target = np.clip(target, 0.02, 0.98).astype(np.float32)
    # move the colour along grey until its luminance is the target (luma weights sum to 1)
    return np.clip(colour + (target - colour @ LUMA)[:, None], 0.0, 1.0)


def render_character(
    ch: str, font_indices: Sequence[int], images_per_class: int, image_size: int, seed: int, knobs: Difficulty
) -> np.ndarray:
    """``images_per_class`` cluttered colour renderings of ``ch``, each in a random font among ``font_indices``.

    Returns:
        uint8 array ``[images_per_class, 3, image_size, image_size]`` (RGB).
    """
    supersample = glyphs_render.supersample_for(image_size)
    canvas, n = supersample * image_size, images_per_class
    # Shapes from one generator, colours from another, noise from a third: an image's geometry does not
    # depend on how many colour or noise numbers the images before it used.
    shapes = np.random.default_rng([seed, ord(ch), 10])
    colours = np.random.default_rng([seed, ord(ch), 11])
    noise = np.random.default_rng([seed, ord(ch), 12])
    glyph, clutter, strokes, occluder = (
        _reduce(masks, supersample) for masks in _layers(shapes, ch, font_indices, n, canvas, supersample, knobs)
    )
    if (glyph.max(axis=(1, 2, 3)) <= 0).any():
        raise RuntimeError(f"rendering {ch!r} at {image_size} px left no ink")
    image = _backgrounds(colours, n, image_size, knobs.variation, knobs.texture)
    mean = image.mean(axis=(2, 3))
    clutter_colour = _colours_against(colours, mean, knobs)
    first, second = _colours_against(colours, mean, knobs), _colours_against(colours, mean, knobs)
    same = colours.uniform(size=n) < knobs.stroke_in_glyph_colour
    stroke_colour = np.where(same[:, None], first, _colours_against(colours, mean, knobs))
    # the glyph's fill: a gradient from one colour to the other along a random direction
    angle = colours.uniform(0.0, 2 * math.pi, n)
    y, x = (np.mgrid[0:image_size, 0:image_size].astype(np.float32) + 0.5) / image_size - 0.5
    ramp = np.clip(0.5 + x * np.cos(angle)[:, None, None] + y * np.sin(angle)[:, None, None], 0.0, 1.0)[:, None]
    fill = first[:, :, None, None] * (1 - ramp) + second[:, :, None, None] * ramp
    occluder_fill = _backgrounds(colours, n, image_size, 1.0, 2 * knobs.texture)
    for mask, colour in ((clutter, clutter_colour[:, :, None, None]), (strokes, stroke_colour[:, :, None, None]),
                         (glyph, fill), (occluder, occluder_fill)):  # fmt: skip
        image = image * (1 - mask) + colour * mask
    image = np.clip(image, 0.0, 1.0)
    centre = image.mean(axis=(1, 2, 3), keepdims=True)
    contrast = colours.uniform(*knobs.contrast, (n, 1, 1, 1)).astype(np.float32)
    gain = 1.0 + colours.uniform(-knobs.colour_cast, knobs.colour_cast, (n, 3, 1, 1)).astype(np.float32)
    shift = colours.uniform(-knobs.brightness, knobs.brightness, (n, 1, 1, 1)).astype(np.float32)
    image = ((image - centre) * contrast + centre + shift) * gain
    sigma = colours.uniform(0.0, knobs.noise, (n, 1, 1, 1)).astype(np.float32)
    image = image + noise.normal(0.0, 1.0, image.shape).astype(np.float32) * sigma
    return np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)


def render_characters(
    chars: Sequence[str], font_indices: Sequence[Sequence[int]], images_per_class: int, image_size: int, seed: int,
    knobs: Difficulty, processes: int = 1,
) -> np.ndarray:  # fmt: skip
    """Images of several characters: uint8 ``[len(chars), images_per_class, 3, image_size, image_size]``."""
    render = functools.partial(
        render_character, images_per_class=images_per_class, image_size=image_size, seed=seed, knobs=knobs
    )
    progress = f"rendering {images_per_class} images of each character at {image_size} px"
    images = glyphs_render.parallel_starmap(render, list(zip(chars, font_indices, strict=True)), processes, progress)
    empty = np.zeros((0, images_per_class, 3, image_size, image_size), np.uint8)
    return np.stack(images) if images else empty

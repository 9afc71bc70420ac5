"""The embedded ``glyphs`` dataset: class selection, splits by alphabet and the full dataset.

Determinism and the disk cache, shared with ``glyphs-hard``, are tested in ``test_rendered.py``. The full
dataset is loaded once per module from the default cache (rendered there on first use, about half a
minute); everything else renders a few dozen characters.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch

from lightning_episodes.data.datasets import ImageDataset, glyphs, glyphs_render, load_dataset
from lightning_episodes.data.datasets.glyphs import (
    SPLIT_OF_ALPHABET,
    alphabet_of,
    build_payload,
    load_glyphs,
    select_characters,
    to_dataset,
)

# Latin, Greek and Cyrillic homoglyphs, punctuation that differs only by position, several scripts and
# symbol families, and a Braille cell with no dots (drawn blank by every font).
SAMPLE = "AΑАaаBΒВgQ0,'.·ΩΣλЖжФԱաლ⠿⠀→∑─▌▐☺✓ພ"


@pytest.fixture(scope="module")
def full() -> tuple[ImageDataset, float]:
    start = time.perf_counter()
    dataset = load_glyphs()
    return dataset, time.perf_counter() - start


@pytest.fixture(scope="module")
def sample() -> dict:
    return build_payload(image_size=28, images_per_class=4, seed=0, characters=SAMPLE)


# --- the full dataset ----------------------------------------------------------------------------------


def test_full_dataset_has_enough_classes_for_20_way_episodes(full):
    dataset, _ = full
    sizes = {split: len(classes) for split, classes in dataset.splits.items()}
    assert dataset.num_classes >= 1000
    assert sum(sizes.values()) == dataset.num_classes
    assert sizes["train"] >= 1000
    assert sizes["validation"] >= 200
    assert sizes["test"] >= 200


def test_splits_are_disjoint_and_by_alphabet(full):
    dataset, _ = full
    assert dataset.groups is not None
    split_of_class = {k: split for split, classes in dataset.splits.items() for k in classes}
    assert sorted(split_of_class) == list(range(dataset.num_classes))
    split_of_group: dict[str, set[str]] = {}
    for k, (name, group) in enumerate(zip(dataset.class_names, dataset.groups, strict=True)):
        assert group == alphabet_of(name)
        assert split_of_class[k] == SPLIT_OF_ALPHABET.get(group, "train")
        split_of_group.setdefault(group, set()).add(split_of_class[k])
    assert all(len(splits) == 1 for splits in split_of_group.values())
    test_alphabets = {g for g, splits in split_of_group.items() if splits == {"test"}}
    assert test_alphabets == {"Greek", "Cyrillic", "Georgian", "Armenian"}


def test_every_class_has_images_per_class_images(full):
    dataset, _ = full
    assert torch.equal(torch.bincount(dataset.labels), torch.full((dataset.num_classes,), 20))
    assert len(set(dataset.class_names)) == dataset.num_classes


def test_every_image_has_ink(full):
    dataset, _ = full
    flat = dataset.images.flatten(1)
    # Ink is normalised to full contrast; the background is dark noise.
    assert int(flat.amax(dim=1).min()) >= 200
    assert int((flat > 128).sum(dim=1).min()) >= 1


def test_mean_and_std_come_from_the_training_split(full):
    dataset, _ = full
    total = square = count = 0.0
    for start in range(0, len(dataset.splits["train"]), 256):
        classes = torch.tensor(dataset.splits["train"][start : start + 256])
        pixels = dataset.images[torch.isin(dataset.labels, classes)].numpy().astype(np.float64) / 255.0
        total, square, count = total + pixels.sum(), square + (pixels**2).sum(), count + pixels.size
    mean = total / count
    assert dataset.mean[0] == pytest.approx(mean, abs=1e-9)
    assert dataset.std[0] == pytest.approx(np.sqrt(square / count - mean**2), abs=1e-7)


def test_lastresort_font_is_excluded(full):
    dataset, _ = full
    names = {f.name for f in glyphs_render.load_fonts()}
    assert "LastResortHE-Regular.ttf" not in names
    assert {"DejaVuSans.ttf", "STIXGeneral.ttf", "cmr10.ttf"} <= names
    # Cuneiform: claimed by LastResort only.
    assert chr(0x12000) not in dataset.class_names


def test_three_channels_repeat_the_grey_image(full):
    dataset, _ = full
    rgb = load_dataset("glyphs", channels=3)
    assert rgb.image_shape == (3, 28, 28)
    assert all(torch.equal(rgb.images[:, c], dataset.images[:, 0]) for c in range(3))
    assert rgb.mean == dataset.mean * 3
    assert rgb.std == dataset.std * 3


# --- class selection -----------------------------------------------------------------------------------


def test_homoglyphs_are_one_class_under_the_lowest_code_point(sample):
    chars = sample["characters"]
    assert {"A", "a", "B"} <= set(chars)
    assert not {"Α", "А", "а", "Β", "В"} & set(chars)
    # Same shapes at different heights or sides of the cell are different characters.
    assert {",", "'", ".", "·", "▌", "▐"} <= set(chars)


def test_blank_and_notdef_renderings_do_not_count_as_drawn():
    assert glyphs_render.scan_character("\u2800")[0] == []  # the empty Braille cell
    face = next(f for f in glyphs_render.load_fonts() if f.name == "DejaVuSans.ttf")
    fake = dataclasses.replace(face, codes={"X": face.unmapped, "Y": ord("Y")})
    renderer = glyphs_render._Renderer((fake,), 84)
    assert renderer.glyph(0, "X") is None
    assert renderer.glyph(0, "Y") is not None


def test_reencoded_computer_modern_fonts_are_read_by_glyph_name():
    fonts = {f.name: f for f in glyphs_render.load_fonts()}
    assert "!" not in fonts["cmsy10.ttf"].codes  # its code 0x21 draws an arrow
    assert fonts["cmsy10.ttf"].codes["→"] == 0x21
    assert fonts["cmr10.ttf"].codes["Γ"] == 0xA1
    assert fonts["DejaVuSans.ttf"].codes["Γ"] == ord("Γ")


def test_every_class_is_drawn_by_enough_fonts(sample):
    chars, fonts_of = select_characters(sample["characters"])
    assert chars == sample["characters"]
    assert all(len(f) >= glyphs.MIN_FONTS for f in fonts_of)


def test_alphabets():
    expected = {
        "A": "Latin", "Ж": "Cyrillic", "λ": "Greek", "ლ": "Georgian", "Ա": "Armenian", "⠿": "Braille",
        "→": "Arrows", "∑": "Mathematical operators", "─": "Box drawing", "!": "ASCII and Latin-1 signs",
    }  # fmt: skip
    assert {ch: alphabet_of(ch) for ch in expected} == expected
    assert set(SPLIT_OF_ALPHABET.values()) == {"train", "validation", "test"}


# --- sizes -------------------------------------------------------------------------------------------------


def test_image_size_32():
    payload = build_payload(image_size=32, images_per_class=3, seed=0, characters=SAMPLE)
    dataset = to_dataset(payload, channels=1)
    assert dataset.image_shape == (1, 32, 32)
    assert dataset.images.shape[0] == 3 * dataset.num_classes
    assert int(dataset.images.flatten(1).amax(dim=1).min()) >= 200

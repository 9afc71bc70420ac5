"""The embedded ``glyphs`` dataset: class selection, splits by alphabet, determinism and the disk cache.

The full dataset is loaded once per module from the default cache (rendered there on first use, about
half a minute); everything else renders a few dozen characters.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_episodes.data.datasets import ImageDataset, glyphs, glyphs_render, load_dataset
from lightning_episodes.data.datasets.glyphs import (
    SPLIT_OF_ALPHABET,
    alphabet_of,
    build_payload,
    cache_file,
    default_cache_dir,
    load_glyphs,
    read_cache,
    select_characters,
    to_dataset,
    write_cache,
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


def _fake_build(image_size: int, images_per_class: int, seed: int, **_: object) -> dict:
    return build_payload(image_size, images_per_class, seed, characters=SAMPLE[:8])


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


def test_dtype_and_shape(full):
    dataset, _ = full
    assert dataset.images.dtype == torch.uint8
    assert dataset.labels.dtype == torch.int64
    assert dataset.image_shape == (1, 28, 28)
    assert dataset.images.shape[0] == 20 * dataset.num_classes


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


def test_cached_load_is_identical_and_fast(full):
    dataset, _ = full
    start = time.perf_counter()
    again = load_glyphs()
    assert time.perf_counter() - start < 15.0
    assert torch.equal(again.images, dataset.images)
    assert torch.equal(again.labels, dataset.labels)
    assert again.class_names == dataset.class_names
    assert again.splits == dataset.splits
    assert (again.mean, again.std) == (dataset.mean, dataset.std)


def test_three_channels_repeat_the_grey_image(full):
    dataset, _ = full
    rgb = load_dataset("glyphs", channels=3)
    assert rgb.image_shape == (3, 28, 28)
    assert all(torch.equal(rgb.images[:, c], dataset.images[:, 0]) for c in range(3))
    assert rgb.mean == dataset.mean * 3
    assert rgb.std == dataset.std * 3


def test_a_subset_renders_exactly_as_in_the_full_dataset(full):
    dataset, _ = full
    payload = build_payload(image_size=28, images_per_class=20, seed=0, characters=SAMPLE)
    index = {ch: k for k, ch in enumerate(dataset.class_names)}
    shared = [(k, ch) for k, ch in enumerate(payload["characters"]) if ch in index]
    assert len(shared) >= len(payload["characters"]) - 2
    for k, ch in shared:
        assert torch.equal(payload["images"][k], dataset.images[dataset.labels == index[ch], 0])


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


# --- determinism and sizes -----------------------------------------------------------------------------


def test_same_seed_gives_identical_bytes_and_another_seed_differs(sample):
    again = build_payload(image_size=28, images_per_class=4, seed=0, characters=SAMPLE, processes=2)
    other = build_payload(image_size=28, images_per_class=4, seed=1, characters=SAMPLE)
    assert torch.equal(again["images"], sample["images"])
    assert again["checksum"] == sample["checksum"]
    assert other["characters"] == sample["characters"]
    assert not torch.equal(other["images"], sample["images"])


def test_image_size_32():
    payload = build_payload(image_size=32, images_per_class=3, seed=0, characters=SAMPLE)
    dataset = to_dataset(payload, channels=1)
    assert dataset.image_shape == (1, 32, 32)
    assert dataset.images.shape[0] == 3 * dataset.num_classes
    assert int(dataset.images.flatten(1).amax(dim=1).min()) >= 200


@pytest.mark.parametrize(
    ("option", "value"), [("image_size", 4), ("channels", 2), ("images_per_class", 0), ("seed", -1)]
)
def test_invalid_options_are_refused(tmp_path, option, value):
    with pytest.raises(ValueError, match=option):
        load_glyphs(root=tmp_path, **{option: value})


# --- the cache -----------------------------------------------------------------------------------------


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("LIGHTNING_EPISODES_CACHE", str(tmp_path / "le"))
    assert default_cache_dir() == tmp_path / "le" / "glyphs"
    monkeypatch.delenv("LIGHTNING_EPISODES_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "lightning-episodes" / "glyphs"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "lightning-episodes" / "glyphs"


def test_cache_file_names_every_parameter(tmp_path):
    names = {cache_file(tmp_path, *params).name for params in [(28, 20, 0), (32, 20, 0), (28, 5, 0), (28, 20, 1)]}
    assert len(names) == 4
    assert all(f"-v{glyphs.FORMAT_VERSION}-" in name for name in names)


def test_cache_round_trip_writes_atomically(monkeypatch, tmp_path):
    monkeypatch.setattr(glyphs, "build_payload", _fake_build)
    first = load_glyphs(root=tmp_path, images_per_class=3)
    assert [p.name for p in tmp_path.iterdir()] == [cache_file(tmp_path, 28, 3, 0).name]
    monkeypatch.setattr(glyphs, "build_payload", lambda *a, **k: pytest.fail("the cache was not used"))
    second = load_glyphs(root=tmp_path, images_per_class=3)
    assert torch.equal(first.images, second.images)
    assert first.class_names == second.class_names


def test_a_failed_write_leaves_nothing_behind(monkeypatch, tmp_path, sample):
    def broken_save(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        write_cache(tmp_path / "glyphs.pt", sample)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_cache_files_are_rejected(tmp_path, sample):
    path = tmp_path / "glyphs.pt"
    write_cache(path, sample)
    assert read_cache(path, 28, 4) is not None
    with pytest.warns(UserWarning, match="another shape"):
        assert read_cache(path, 32, 4) is None  # not the parameters it claims
    tampered = dict(sample, images=sample["images"].clone())
    tampered["images"][0, 0, 0, 0] ^= 1
    write_cache(path, tampered)
    with pytest.warns(UserWarning, match="checksum"):
        assert read_cache(path, 28, 4) is None
    path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])  # truncated
    with pytest.warns(UserWarning, match="not a valid glyphs cache"):
        assert read_cache(path, 28, 4) is None


def test_corrupt_cache_is_regenerated(monkeypatch, tmp_path):
    monkeypatch.setattr(glyphs, "build_payload", _fake_build)
    path = cache_file(tmp_path, 28, 2, 0)
    path.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="rendering it again"):
        dataset = load_glyphs(root=tmp_path, images_per_class=2)
    assert dataset.num_classes == len(_fake_build(28, 2, 0)["characters"])
    assert read_cache(path, 28, 2) is not None

"""What ``glyphs`` and ``glyphs-hard`` share: determinism from a seed, the argument checks and the disk cache.

One row of :data:`RENDERED` per rendered dataset; each test renders a few characters. The loader contract
(splits, counts, shapes, a root that is a file) is in ``test_loader_contract.py``. The slow tests load the
full datasets from the default cache (rendering them there on first use: minutes on two cores).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from lightning_fabric.utilities.rank_zero import rank_zero_only

from lightning_episodes.data.datasets import ImageDataset, glyphs, glyphs_hard, load_dataset, rendered

#: Characters of every split (Latin and symbols; Braille, box drawing and Lao; Greek, Cyrillic, Armenian).
SAMPLE = "ABg0,→⠿─ພΩЖԱ"


@dataclass(frozen=True)
class Rendered:
    """A rendered dataset: its module, registered name, default image size and allowed sizes."""

    module: ModuleType
    name: str
    image_size: int
    sizes: tuple[int, int]

    def build(self, images_per_class: int, seed: int = 0, characters: str = SAMPLE, **options: Any) -> dict:
        return self.module.build_payload(self.image_size, images_per_class, seed, characters=characters, **options)


RENDERED = [
    pytest.param(Rendered(glyphs, "glyphs", 28, (8, 256)), id="glyphs"),
    pytest.param(Rendered(glyphs_hard, "glyphs-hard", 32, (16, 128)), id="glyphs-hard"),
]


@pytest.fixture(scope="module", params=RENDERED)
def case(request: pytest.FixtureRequest) -> Rendered:
    return request.param


@pytest.fixture(scope="module")
def sample(case: Rendered) -> dict:
    return case.build(images_per_class=4)


def _fake_build(case: Rendered) -> Any:
    """A stand-in for ``build_payload`` that renders six characters instead of the whole dataset."""
    build = case.module.build_payload
    return lambda image_size, images_per_class, seed, **_: build(
        image_size, images_per_class, seed, characters=SAMPLE[:6]
    )


def test_same_seed_gives_identical_bytes_and_another_seed_differs(case: Rendered, sample: dict) -> None:
    again = case.build(images_per_class=4, processes=2)
    other = case.build(images_per_class=4, seed=1)
    assert torch.equal(again["images"], sample["images"])
    assert again["checksum"] == sample["checksum"]
    assert other["characters"] == sample["characters"]
    assert not torch.equal(other["images"], sample["images"])


def test_a_character_renders_the_same_alone_or_among_others(case: Rendered, sample: dict) -> None:
    alone = case.build(images_per_class=4, characters="Ж")
    assert torch.equal(alone["images"][0], sample["images"][sample["characters"].index("Ж")])


@pytest.mark.parametrize(
    ("option", "value"),
    [("image_size", "below"), ("image_size", "above"), ("images_per_class", 0), ("seed", -1)],
)
def test_invalid_options_are_refused(case: Rendered, option: str, value: Any, tmp_path: Path) -> None:
    value = {"below": case.sizes[0] - 1, "above": case.sizes[1] + 1}.get(value, value)
    with pytest.raises(ValueError, match=option):
        load_dataset(case.name, tmp_path, **{option: value})
    assert list(tmp_path.iterdir()) == [], "nothing is rendered or written"


def test_default_cache_dir(case: Rendered, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LIGHTNING_EPISODES_CACHE", str(tmp_path / "le"))
    assert case.module.default_cache_dir() == tmp_path / "le" / case.name
    monkeypatch.delenv("LIGHTNING_EPISODES_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert case.module.default_cache_dir() == tmp_path / "xdg" / "lightning-episodes" / case.name
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert case.module.default_cache_dir() == Path.home() / ".cache" / "lightning-episodes" / case.name


def test_cache_file_names_every_parameter(case: Rendered, tmp_path: Path) -> None:
    size = case.image_size
    params = [(size, 20, 0), (size + 4, 20, 0), (size, 5, 0), (size, 20, 1)]
    names = {case.module.cache_file(tmp_path, *p).name for p in params}
    assert len(names) == 4
    assert all(name.startswith(f"{case.name}-") and f"-v{case.module.FORMAT_VERSION}-" in name for name in names)


def test_cache_is_written_once_and_reused(case: Rendered, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(case.module, "build_payload", _fake_build(case))
    first = load_dataset(case.name, tmp_path, images_per_class=3)
    assert [p.name for p in tmp_path.iterdir()] == [case.module.cache_file(tmp_path, case.image_size, 3, 0).name]
    monkeypatch.setattr(case.module, "build_payload", lambda *a, **k: pytest.fail("the cache was not used"))
    second = load_dataset(case.name, tmp_path, images_per_class=3)
    assert torch.equal(first.images, second.images)
    assert first.class_names == second.class_names
    other = 4 - first.image_shape[0]  # the other channel count comes from the same file
    assert load_dataset(case.name, tmp_path, images_per_class=3, channels=other).image_shape[0] == other


@pytest.mark.parametrize("processes", [1, 2])
def test_a_first_render_says_what_it_does_on_stderr_with_a_bar_per_phase(
    case: Rendered, processes: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    build = case.module.build_payload
    monkeypatch.setattr(
        case.module,
        "build_payload",
        lambda size, per_class, seed, **_: build(size, per_class, seed, characters=SAMPLE, processes=processes),
    )
    load_dataset(case.name, tmp_path, images_per_class=3)
    out, err = capsys.readouterr()
    assert out == ""
    path = case.module.cache_file(tmp_path, case.image_size, 3, 0)
    lines = [line.strip() for line in err.replace("\r", "\n").splitlines() if line.strip()]
    assert lines[0] == f"{case.name}: rendering the dataset once into {path} (later runs read it from there)"
    scanned = f"{case.name}: finding the fonts that draw each character: 100%"
    assert any(line.startswith(scanned) and f"{len(SAMPLE)}/{len(SAMPLE)}" in line for line in lines), err
    drawn = f"{case.name}: rendering 3 images of each character at {case.image_size} px: 100%"
    assert any(line.startswith(drawn) for line in lines), err
    assert re.fullmatch(rf"{case.name}: done in \d+ s", lines[-1])
    load_dataset(case.name, tmp_path, images_per_class=3)
    assert capsys.readouterr() == ("", ""), "a cached dataset loads silently"
    build(case.image_size, 2, 0, characters=SAMPLE[:2], processes=processes)
    assert capsys.readouterr() == ("", ""), "rendering outside a loader's first-time work says nothing"


def test_only_rank_zero_reports_a_render(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    monkeypatch.setattr(glyphs, "build_payload", _fake_build(Rendered(glyphs, "glyphs", 28, (8, 256))))
    assert len(load_dataset("glyphs", tmp_path, images_per_class=2).labels) == 12
    assert capsys.readouterr() == ("", "")


def test_corrupt_cache_files_are_rejected(case: Rendered, sample: dict, tmp_path: Path) -> None:
    path, size = tmp_path / "cache.pt", case.image_size
    rendered.write_cache(path, sample)
    assert case.module.read_cache(path, size, 4) is not None
    with pytest.warns(UserWarning, match="another shape"):
        assert case.module.read_cache(path, size + 4, 4) is None  # not the parameters it claims
    foreign = (glyphs_hard if case.module is glyphs else glyphs).build_payload(size, 4, 0, characters=SAMPLE[:3])
    rendered.write_cache(path, foreign)
    with pytest.warns(UserWarning, match="another format|another shape"):
        assert case.module.read_cache(path, size, 4) is None
    tampered = dict(sample, images=sample["images"].clone())
    tampered["images"].view(-1)[0] ^= 1
    rendered.write_cache(path, tampered)
    with pytest.warns(UserWarning, match="checksum"):
        assert case.module.read_cache(path, size, 4) is None
    rendered.write_cache(path, sample)
    path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])  # truncated
    with pytest.warns(UserWarning, match=f"not a valid {case.name} cache"):
        assert case.module.read_cache(path, size, 4) is None


def test_corrupt_cache_is_rendered_again(case: Rendered, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(case.module, "build_payload", _fake_build(case))
    path = case.module.cache_file(tmp_path, case.image_size, 2, 0)
    path.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="rendering it again"):
        dataset = load_dataset(case.name, tmp_path, images_per_class=2)
    assert dataset.class_names == sorted(SAMPLE[:6], key=ord)
    assert case.module.read_cache(path, case.image_size, 2) is not None


def test_an_unwritable_cache_costs_time_not_correctness(
    case: Rendered, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def full_disk(payload: object, path: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(case.module, "build_payload", _fake_build(case))
    monkeypatch.setattr(rendered, "save_atomically", full_disk)
    with pytest.warns(UserWarning, match=f"could not cache the {case.name} dataset"):
        dataset = load_dataset(case.name, tmp_path, images_per_class=2)
    assert dataset.class_names == sorted(SAMPLE[:6], key=ord)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_nothing_behind(sample: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken_save(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        rendered.write_cache(tmp_path / "cache.pt", sample)
    assert list(tmp_path.iterdir()) == []


# --- the full datasets ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full(case: Rendered) -> ImageDataset:
    return load_dataset(case.name)


@pytest.mark.slow
def test_the_full_dataset_loads_from_its_cache_identically_and_fast(case: Rendered, full: ImageDataset) -> None:
    start = time.perf_counter()
    again = load_dataset(case.name)
    assert time.perf_counter() - start < 15.0
    assert torch.equal(again.images, full.images)
    assert torch.equal(again.labels, full.labels)
    assert (again.class_names, again.splits, again.groups) == (full.class_names, full.splits, full.groups)
    assert (again.mean, again.std) == (full.mean, full.std)


@pytest.mark.slow
def test_a_subset_renders_exactly_as_in_the_full_dataset(case: Rendered, full: ImageDataset) -> None:
    payload = case.build(images_per_class=20)
    assert payload["characters"] == sorted(SAMPLE, key=ord)
    for k, ch in enumerate(payload["characters"]):
        rows = full.images[full.labels == full.class_names.index(ch)]
        assert torch.equal(payload["images"][k], rows.reshape(payload["images"][k].shape)), ch

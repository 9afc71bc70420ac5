"""The contract every dataset loader keeps, checked for each registered loader on tiny files in its real format.

One row of :data:`LOADERS` per loader: a writer that puts a tiny dataset in the loader's on-disk format under a
folder (see :mod:`tests.data.fabricate`), the loader's options, and the number of classes of each split that
the loader must return (the published splits for the paper's datasets). A new loader gets every test below by
adding its row. What is particular to a loader (its colours, its cache, its errors) is tested in its own file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_episodes.data import EpisodicDataModule
from lightning_episodes.data.datasets import SPLITS, ImageDataset, available_datasets, load_dataset
from tests.data import example_dataset  # registers the guide's example loader, "npz-example", for these tests only
from tests.data.fabricate import (
    Fabricated,
    write_cub200,
    write_dtd,
    write_fgvc_aircraft,
    write_folder,
    write_glyphs,
    write_glyphs_100,
    write_mini_imagenet,
    write_npz_example,
    write_tiered_imagenet,
    write_vgg_flowers,
)


@dataclass(frozen=True)
class LoaderCase:
    """One dataset loader and what it must return for the tiny dataset that ``write`` puts under a folder.

    Args:
        name: the registered dataset name.
        write: writes the tiny dataset under the folder it is given (the loader's ``root``).
        split_classes: classes of the train, validation and test splits the loader must return.
        image_size: the ``image_size`` to load with (and the side of the loaded images).
        options: further keyword arguments of the loader.
    """

    name: str
    write: Callable[[Path], Fabricated]
    split_classes: tuple[int, int, int]
    image_size: int = 12
    options: dict[str, Any] = field(default_factory=dict)

    def load(self, root: Path, channels: int = 3, **options: Any) -> ImageDataset:
        return load_dataset(
            self.name, root, **{"image_size": self.image_size, "channels": channels, **self.options, **options}
        )


LOADERS = [
    LoaderCase("mini-imagenet", write_mini_imagenet, (64, 16, 20)),  # Ravi & Larochelle, 2017
    LoaderCase("tiered-imagenet", write_tiered_imagenet, (351, 97, 160)),  # Ren et al., 2018
    LoaderCase("cub200", write_cub200, (140, 30, 30)),  # Triantafillou et al., 2020 (Meta-Dataset)
    LoaderCase("dtd", write_dtd, (33, 7, 7)),  # Meta-Dataset
    LoaderCase("fgvc-aircraft", write_fgvc_aircraft, (70, 15, 15)),  # Meta-Dataset
    LoaderCase("vgg-flowers", write_vgg_flowers, (71, 15, 16)),  # Meta-Dataset
    LoaderCase("folder", write_folder, (5, 3, 3)),
    # the characters of fabricate.GLYPHS_CHARACTERS, split by alphabet
    LoaderCase("glyphs", write_glyphs, (5, 3, 4), image_size=28, options={"images_per_class": 3}),
    LoaderCase(
        "glyphs-hard", partial(write_glyphs, hard=True), (5, 3, 4), image_size=32, options={"images_per_class": 3}
    ),
    # the letters of fabricate.GLYPHS_CHARACTERS, split at random in Mini-ImageNet's shares
    LoaderCase("glyphs-100", write_glyphs_100, (5, 1, 1), image_size=32, options={"images_per_class": 3}),
    # the example of the guide "Your own dataset": its one row
    LoaderCase("npz-example", write_npz_example, (5, 3, 3)),
]
CASES = [pytest.param(case, id=case.name) for case in LOADERS]


def test_every_registered_loader_has_a_row() -> None:
    assert {case.name for case in LOADERS} == set(available_datasets()) - {"tiny"}  # tiny: tests/conftest.py


@pytest.mark.parametrize("case", CASES)
def test_splits_partition_the_classes(case: LoaderCase, tmp_path: Path) -> None:
    case.write(tmp_path)
    data = case.load(tmp_path)
    assert list(data.splits) == list(SPLITS)
    ids = [c for split in SPLITS for c in data.splits[split]]
    assert sorted(ids) == list(range(data.num_classes)), "every class in exactly one split"
    assert len(data.class_names) == len(set(data.class_names)) == data.num_classes
    assert data.groups is None or len(data.groups) == data.num_classes


@pytest.mark.parametrize("case", CASES)
def test_class_and_image_counts(case: LoaderCase, tmp_path: Path) -> None:
    fab = case.write(tmp_path)
    data = case.load(tmp_path)
    assert tuple(len(data.splits[split]) for split in SPLITS) == case.split_classes
    assert [[data.class_names[c] for c in data.splits[split]] for split in SPLITS] == [
        fab.split_classes[split] for split in SPLITS
    ], "the classes of each split, in the loader's documented order"
    counts = torch.bincount(data.labels, minlength=data.num_classes).tolist()
    assert dict(zip(data.class_names, counts, strict=True)) == fab.counts


@pytest.mark.parametrize("case", [c for c, row in zip(CASES, LOADERS, strict=True) if "glyphs" not in row.name])
def test_every_image_shows_the_colour_of_its_labelled_class(case: LoaderCase, tmp_path: Path) -> None:
    """The writers give each class a solid colour 16 levels from any other's (JPEG moves it by a few levels); the
    glyphs are rendered characters instead."""
    fab = case.write(tmp_path)
    data = case.load(tmp_path)
    expected = torch.tensor([fab.colours[data.class_names[label]] for label in data.labels.tolist()])
    assert (data.images.int() - expected[:, :, None, None]).abs().amax() <= 4


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("case", CASES)
def test_images_shape_dtype_and_statistics(case: LoaderCase, channels: int, tmp_path: Path) -> None:
    case.write(tmp_path)
    data = case.load(tmp_path, channels=channels)
    size = case.image_size
    assert data.images.dtype == torch.uint8
    assert data.image_shape == (channels, size, size)
    assert data.labels.dtype == torch.int64
    assert data.labels.shape == (len(data.images),)
    assert int(data.labels.min()) >= 0
    assert int(data.labels.max()) < data.num_classes
    assert int(data.images.max()) > int(data.images.min()), "not a blank dataset"
    assert len(data.mean) == len(data.std) == channels
    assert all(0.0 < m < 1.0 for m in data.mean)
    assert all(0.0 < s < 1.0 for s in data.std)


@pytest.mark.parametrize("case", CASES)
def test_deterministic_from_scratch_and_from_the_cache(case: LoaderCase, tmp_path: Path) -> None:
    case.write(tmp_path / "a")
    case.write(tmp_path / "b")
    first, again, other = case.load(tmp_path / "a"), case.load(tmp_path / "a"), case.load(tmp_path / "b")
    for data in (again, other):
        assert torch.equal(data.images, first.images)
        assert torch.equal(data.labels, first.labels)
        assert (data.class_names, data.splits, data.groups) == (first.class_names, first.splits, first.groups)
        assert (data.mean, data.std) == (first.mean, first.std)


@pytest.mark.parametrize("case", [c for c, row in zip(CASES, LOADERS, strict=True) if min(row.split_classes) >= 2])
def test_a_scarce_training_split_keeps_two_images_of_every_training_class(case: LoaderCase, tmp_path: Path) -> None:
    """``train_images_per_class`` applies to whatever a loader returns: with shots + queries = 2 = N, each training
    episode shows all the images kept of its classes, so 3,000 episodes show every training class's. (Left out: a
    tiny file with a one-class split, glyphs-100's, on which the data module cannot build 2-way evaluation episodes.)"""
    case.write(tmp_path)
    dm = EpisodicDataModule(case.name, ways=2, shots=1, queries=1, train_images_per_class=2, episodes_per_batch=2)
    dm.data = data = case.load(tmp_path)
    dm.setup("fit")
    identity = dm.training_identities(0, range(3000))
    rows = torch.cat([identity.support_indices, identity.query_indices], 2)  # [episodes, ways, 2]
    drawn: dict[int, set[int]] = {}
    for cls, class_rows in zip(identity.classes.flatten().tolist(), rows.flatten(0, 1).tolist(), strict=True):
        drawn.setdefault(cls, set()).update(class_rows)
    assert sorted(drawn) == sorted(data.splits["train"])
    assert all(len(kept) == 2 and set(data.labels[sorted(kept)].tolist()) == {cls} for cls, kept in drawn.items())


@pytest.mark.parametrize("case", CASES)
def test_a_root_that_is_a_file_is_an_error_naming_data_root(case: LoaderCase, tmp_path: Path) -> None:
    root = tmp_path / "data.txt"
    root.write_text("not a folder")
    with pytest.raises((FileNotFoundError, ValueError), match="data.root") as error:
        case.load(root)
    assert str(root) in str(error.value)
    assert root.read_text() == "not a folder"


@pytest.mark.parametrize(("option", "value"), [("image_size", 0), ("channels", 2)])
@pytest.mark.parametrize("case", CASES)
def test_invalid_size_or_channels_is_an_error_naming_it(
    case: LoaderCase, option: str, value: int, tmp_path: Path
) -> None:
    case.write(tmp_path)
    with pytest.raises(ValueError, match=option):
        case.load(tmp_path, **{option: value})


def test_missing_files_of_a_loader_without_download_name_the_layout_and_offer_no_download(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="Expected layout") as error:
        load_dataset("npz-example", tmp_path)
    assert str(tmp_path / "my_dataset" / "train.npz") in str(error.value)
    assert "Point `--data.root`" in str(error.value)
    assert "download" not in str(error.value), "npz-example has nothing to download (data.download=true is refused)"


def test_the_guide_shows_the_example_dataset_and_its_row() -> None:
    """The guide's "A dataset of its own format" shows ``example_dataset.py`` as it is, and a row of :data:`LOADERS`
    for it."""
    root = Path(__file__).resolve().parents[2]
    guide = (root / "docs/guides/own-dataset.md").read_text()
    section = re.search(r"^## A dataset of its own format\n(.*?)(?=^## |\Z)", guide, flags=re.DOTALL | re.MULTILINE)
    assert section, 'docs/guides/own-dataset.md has no section "## A dataset of its own format"'
    blocks = re.findall(r"```python\n(.*?)```", section.group(1), flags=re.DOTALL)
    assert Path(example_dataset.__file__).read_text() in blocks
    shown = re.findall(r"^\+(.*)$", "".join(re.findall(r"```diff\n(.*?)```", section.group(1), flags=re.DOTALL)), re.M)
    assert shown, "the section shows the test row in a ```diff block"
    assert set(shown) <= set(Path(__file__).read_text().splitlines()), "the row shown is the row in LOADERS"
    assert any(case.name == example_dataset.NpzDataset.name for case in LOADERS)

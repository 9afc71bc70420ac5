"""The contract every dataset loader keeps, checked by :func:`lightning_episodes.testing.check_dataset` for each
registered loader on tiny files in its real format.

One row of :data:`LOADERS` per loader: a writer that puts a tiny dataset in the loader's on-disk format under a
folder (see :mod:`tests.data.fabricate`), the loader's options, and the number of classes of each split that
the loader must return (the published splits for the paper's datasets). A new loader gets every check by adding its
row, one test per row and property (a property's cases, such as channels 1 and 3, are one test). What is particular
to a loader (its colours, its cache, its errors) is tested in its own file.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pytest

from lightning_episodes.data.datasets import available_datasets, load_dataset
from lightning_episodes.testing import DATASET_CHECKS, DatasetSpec, check_dataset, contract_params
from tests.data import example_dataset  # registers the guide's example loader, "npz-example", for these tests only
from tests.data.fabricate import (
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

LOADERS = [
    DatasetSpec("mini-imagenet", write_mini_imagenet, (64, 16, 20)),  # Ravi & Larochelle, 2017
    DatasetSpec("tiered-imagenet", write_tiered_imagenet, (351, 97, 160)),  # Ren et al., 2018
    DatasetSpec("cub200", write_cub200, (140, 30, 30)),  # Triantafillou et al., 2020 (Meta-Dataset)
    DatasetSpec("dtd", write_dtd, (33, 7, 7)),  # Meta-Dataset
    DatasetSpec("fgvc-aircraft", write_fgvc_aircraft, (70, 15, 15)),  # Meta-Dataset
    DatasetSpec("vgg-flowers", write_vgg_flowers, (71, 15, 16)),  # Meta-Dataset
    DatasetSpec("folder", write_folder, (5, 3, 3)),
    # the characters of fabricate.GLYPHS_CHARACTERS, split by alphabet
    DatasetSpec("glyphs", write_glyphs, (5, 3, 4), image_size=28, options={"images_per_class": 3}, solid_colours=False),
    DatasetSpec(
        "glyphs-hard",
        partial(write_glyphs, hard=True),
        (5, 3, 4),
        image_size=32,
        options={"images_per_class": 3},
        solid_colours=False,
    ),
    # the letters of fabricate.GLYPHS_CHARACTERS, split at random in Mini-ImageNet's shares
    DatasetSpec(
        "glyphs-100", write_glyphs_100, (5, 1, 1), image_size=32, options={"images_per_class": 3}, solid_colours=False
    ),
    # the example of the guide "Your own dataset": its one row
    DatasetSpec("npz-example", write_npz_example, (5, 3, 3)),
]


def test_every_registered_loader_has_a_row() -> None:
    # tiny: lightning_episodes.testing's in-memory dataset, registered by tests/conftest.py
    assert {case.name for case in LOADERS} == set(available_datasets()) - {"tiny"}


@pytest.mark.parametrize(("case", "check"), contract_params(LOADERS, DATASET_CHECKS))
def test_the_loader_keeps_the_contract(case: DatasetSpec, check: str) -> None:
    check_dataset(case, checks=[check])


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

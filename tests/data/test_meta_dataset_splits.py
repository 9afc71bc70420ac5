"""The Meta-Dataset class splits kept in the library are learn2learn 0.2.0's, name for name and in order (their order
gives the labels), and the splits Meta-Dataset publishes."""

from __future__ import annotations

import pytest

from lightning_episodes.data.datasets import cub200, dtd, fgvc_aircraft, meta_dataset_splits, vgg_flowers

#: the library's list -> (learn2learn module, its attribute, its key of each split)
LISTS = {
    "CUB200": ("cu_birds200", "SPLITS", {"train": "train", "validation": "validation", "test": "test"}),
    "CUB200_IMAGENET_DUPLICATES": (
        "cu_birds200",
        "IMAGENET_DUPLICATES",
        {"train": "train", "validation": "validation", "test": "test"},
    ),
    "DTD": ("describable_textures", "SPLITS", {"train": "train", "validation": "validation", "test": "test"}),
    "FGVC_AIRCRAFT": ("fgvc_aircraft", "SPLITS", {"train": "train", "validation": "valid", "test": "test"}),
    "VGG_FLOWERS": ("vgg_flowers", "SPLITS", {"train": "train", "validation": "validation", "test": "test"}),
}


@pytest.mark.parametrize("name", sorted(LISTS))
def test_the_lists_are_learn2learns(name: str) -> None:
    datasets = pytest.importorskip("learn2learn.vision.datasets")
    module, attribute, keys = LISTS[name]
    theirs = getattr(getattr(datasets, module), attribute)
    ours = getattr(meta_dataset_splits, name)
    assert list(ours) == list(keys)
    for split, key in keys.items():
        assert list(ours[split]) == list(theirs[key]), split


@pytest.mark.parametrize(
    ("classes", "module"),
    [
        (meta_dataset_splits.CUB200, cub200),
        (meta_dataset_splits.DTD, dtd),
        (meta_dataset_splits.FGVC_AIRCRAFT, fgvc_aircraft),
        (meta_dataset_splits.VGG_FLOWERS, vgg_flowers),
    ],
)
def test_each_split_has_the_published_classes_once(classes: dict[str, tuple[object, ...]], module: object) -> None:
    assert {split: len(names) for split, names in classes.items()} == module.SPLIT_CLASSES  # type: ignore[attr-defined]
    every = [name for names in classes.values() for name in names]
    assert len(set(every)) == len(every)


def test_the_43_cub_duplicates_name_files_of_their_splits_classes() -> None:
    duplicates = meta_dataset_splits.CUB200_IMAGENET_DUPLICATES
    assert sum(map(len, duplicates.values())) == 43
    for split, files in duplicates.items():
        species = {name.split(".", 1)[1].lower() for name in meta_dataset_splits.CUB200[split]}
        assert all(file.rsplit("_", 2)[0].lower() in species for file in files), split

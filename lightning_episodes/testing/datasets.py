"""The contract every dataset loader keeps, checked for one of them by :func:`check_dataset` on tiny files in its
real on-disk format.

A :class:`DatasetSpec` names a registered loader and a writer that puts a tiny dataset in the loader's format under a
folder, giving each class its own solid colour (:meth:`Fabricated.add`) and returning what the loader must make of
it (a :class:`Fabricated`). What is particular to a loader (its colours, its cache, its errors) is tested in its own
file.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lightning_episodes.data import EpisodicDataModule
from lightning_episodes.data.datasets import SPLITS, ImageDataset, load_dataset
from lightning_episodes.testing._checks import Check, raises, run_checks

RGB = tuple[int, int, int]


def class_colour(k: int) -> RGB:
    """A colour per class index, channels 16 apart (robust to JPEG), distinct for 4,096 classes."""
    return (k % 16 * 16 + 8, k // 16 % 16 * 16 + 8, k // 256 % 16 * 16 + 8)


@dataclass
class Fabricated:
    """What a loader must return for a dataset that a writer fabricated.

    Args:
        split_classes: class names per split, in the order the loader must number them.
        colours: class name → the solid colour of its images.
        counts: class name → how many of its images the loader must keep.
        groups: class name → group, for datasets with groups.
        excluded: images written that the loader must leave out.

    Example:
        >>> fab = Fabricated({"train": ["cat"], "validation": ["dog"], "test": ["eel"]})
        >>> fab.add("cat", 3), fab.counts
        ((8, 8, 8), {'cat': 3})
    """

    split_classes: dict[str, list[str]]
    colours: dict[str, RGB] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    groups: dict[str, str] | None = None
    excluded: int = 0

    def add(self, name: str, count: int) -> RGB:
        """Record a class of ``count`` images; the solid colour (:func:`class_colour`) to write them in."""
        self.colours[name] = class_colour(len(self.colours))
        self.counts[name] = count
        return self.colours[name]


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset loader and what it must return for the tiny dataset that ``write`` puts under a folder.

    Args:
        name: the registered dataset name.
        write: writes the tiny dataset under the folder it is given (the loader's ``root``).
        split_classes: classes of the train, validation and test splits the loader must return.
        image_size: the ``image_size`` to load with (and the side of the loaded images).
        options: further keyword arguments of the loader.
        solid_colours: whether every written image is its class's solid colour (rendered characters are not), so
            that each loaded image must still show it.
    """

    name: str
    write: Callable[[Path], Fabricated]
    split_classes: tuple[int, int, int]
    image_size: int = 12
    options: dict[str, Any] = field(default_factory=dict)
    solid_colours: bool = True

    def load(self, root: Path, channels: int = 3, **options: Any) -> ImageDataset:
        """The dataset under ``root`` through the registered loader, at the spec's ``image_size``."""
        return load_dataset(
            self.name, root, **{"image_size": self.image_size, "channels": channels, **self.options, **options}
        )

    def __str__(self) -> str:
        return self.name


@contextmanager
def _folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


def _splits_partition_the_classes(spec: DatasetSpec) -> None:
    with _folder() as root:
        spec.write(root)
        data = spec.load(root)
    assert list(data.splits) == list(SPLITS), f"splits {list(data.splits)}"
    ids = [c for split in SPLITS for c in data.splits[split]]
    assert sorted(ids) == list(range(data.num_classes)), "every class in exactly one split"
    assert len(data.class_names) == len(set(data.class_names)) == data.num_classes, "one distinct name per class"
    assert data.groups is None or len(data.groups) == data.num_classes, "one group per class"


def _class_and_image_counts(spec: DatasetSpec) -> None:
    with _folder() as root:
        fab = spec.write(root)
        data = spec.load(root)
    split_classes = tuple(len(data.splits[split]) for split in SPLITS)
    assert split_classes == spec.split_classes, f"classes per split {split_classes}"
    assert [[data.class_names[c] for c in data.splits[split]] for split in SPLITS] == [
        fab.split_classes[split] for split in SPLITS
    ], "the classes of each split, in the loader's documented order"
    counts = torch.bincount(data.labels, minlength=data.num_classes).tolist()
    assert dict(zip(data.class_names, counts, strict=True)) == fab.counts, "images per class"


def _images_show_their_class_colour(spec: DatasetSpec) -> None:
    """The writers give each class a solid colour 16 levels from any other's (JPEG moves it by a few levels)."""
    with _folder() as root:
        fab = spec.write(root)
        data = spec.load(root)
    expected = torch.tensor([fab.colours[data.class_names[label]] for label in data.labels.tolist()])
    error = int((data.images.int() - expected[:, :, None, None]).abs().amax())
    assert error <= 4, f"an image is {error} levels from its labelled class's colour"


def _images_shape_dtype_and_statistics(spec: DatasetSpec) -> None:
    for channels in (1, 3):
        with _folder() as root:
            spec.write(root)
            data = spec.load(root, channels=channels)
        size, where = spec.image_size, f"channels={channels}"
        assert data.images.dtype == torch.uint8, f"{where}: images are {data.images.dtype}"
        assert data.image_shape == (channels, size, size), f"{where}: image shape {data.image_shape}"
        assert data.labels.dtype == torch.int64, f"{where}: labels are {data.labels.dtype}"
        assert data.labels.shape == (len(data.images),), f"{where}: labels of shape {tuple(data.labels.shape)}"
        assert int(data.labels.min()) >= 0, f"{where}: a negative label"
        assert int(data.labels.max()) < data.num_classes, f"{where}: a label past the classes"
        assert int(data.images.max()) > int(data.images.min()), f"{where}: a blank dataset"
        assert len(data.mean) == len(data.std) == channels, f"{where}: mean {data.mean}, std {data.std}"
        assert all(0.0 < m < 1.0 for m in data.mean), f"{where}: mean {data.mean}"
        assert all(0.0 < s < 1.0 for s in data.std), f"{where}: std {data.std}"


def _deterministic_from_scratch_and_from_the_cache(spec: DatasetSpec) -> None:
    with _folder() as root:
        spec.write(root / "a")
        spec.write(root / "b")
        first, again, other = spec.load(root / "a"), spec.load(root / "a"), spec.load(root / "b")
    for data, what in ((again, "loaded again"), (other, "loaded from another copy")):
        assert torch.equal(data.images, first.images), f"{what}: other images"
        assert torch.equal(data.labels, first.labels), f"{what}: other labels"
        assert (data.class_names, data.splits, data.groups) == (first.class_names, first.splits, first.groups), (
            f"{what}: other classes, splits or groups"
        )
        assert (data.mean, data.std) == (first.mean, first.std), f"{what}: other statistics"


def _scarce_training_keeps_two_images_per_class(spec: DatasetSpec) -> None:
    """``train_images_per_class`` applies to whatever a loader returns: with shots + queries = 2 = N, each training
    episode shows all the images kept of its classes, so 3,000 episodes show every training class's."""
    with _folder() as root:
        spec.write(root)
        dm = EpisodicDataModule(spec.name, ways=2, shots=1, queries=1, train_images_per_class=2, episodes_per_batch=2)
        dm.data = data = spec.load(root)
        dm.setup("fit")
        identity = dm.training_identities(0, range(3000))
    rows = torch.cat([identity.support_indices, identity.query_indices], 2)  # [episodes, ways, 2]
    drawn: dict[int, set[int]] = {}
    for cls, class_rows in zip(identity.classes.flatten().tolist(), rows.flatten(0, 1).tolist(), strict=True):
        drawn.setdefault(cls, set()).update(class_rows)
    assert sorted(drawn) == sorted(data.splits["train"]), "3,000 episodes do not show every training class"
    assert all(len(kept) == 2 and set(data.labels[sorted(kept)].tolist()) == {cls} for cls, kept in drawn.items()), (
        "a training class shows other than two of its own images"
    )


def _a_root_that_is_a_file_is_an_error(spec: DatasetSpec) -> None:
    with _folder() as folder:
        root = folder / "data.txt"
        root.write_text("not a folder")
        with raises((FileNotFoundError, ValueError), match="data.root") as error:
            spec.load(root)
        assert str(root) in str(error[0]), f"the error does not name {root}"
        assert root.read_text() == "not a folder", "the file was changed"


def _bad_size_or_channels_is_an_error(spec: DatasetSpec) -> None:
    with _folder() as root:
        spec.write(root)
        for option, value in (("image_size", 0), ("channels", 2)):
            with raises(ValueError, match=option):
                spec.load(root, **{option: value})


#: the properties of the dataset contract, by name, in the order :func:`check_dataset` checks them
DATASET_CHECKS: dict[str, Check[DatasetSpec]] = {
    "splits_partition_the_classes": Check(_splits_partition_the_classes),
    "class_and_image_counts": Check(_class_and_image_counts),
    "images_show_their_class_colour": Check(_images_show_their_class_colour, lambda spec: spec.solid_colours),
    "images_shape_dtype_and_statistics": Check(_images_shape_dtype_and_statistics),
    "deterministic_from_scratch_and_from_the_cache": Check(_deterministic_from_scratch_and_from_the_cache),
    # a one-class split cannot make the 2-way evaluation episodes the data module builds
    "scarce_training_keeps_two_images_per_class": Check(
        _scarce_training_keeps_two_images_per_class, lambda spec: min(spec.split_classes) >= 2
    ),
    "a_root_that_is_a_file_is_an_error": Check(_a_root_that_is_a_file_is_an_error),
    "bad_size_or_channels_is_an_error": Check(_bad_size_or_channels_is_an_error),
}


def check_dataset(spec: DatasetSpec, checks: Iterable[str] | None = None) -> None:
    """Check that a registered dataset loader keeps the contract of every loader, on the files ``spec.write`` writes
    in temporary folders:

    - ``splits_partition_the_classes``: the train, validation and test splits hold every class once, each with a
      distinct name (and a group, if the dataset has groups);
    - ``class_and_image_counts``: each split has its number of classes, in the documented order, and each class its
      number of images;
    - ``images_show_their_class_colour``: every image keeps its labelled class's solid colour (``solid_colours``);
    - ``images_shape_dtype_and_statistics``: images are uint8 ``[channels, image_size, image_size]`` in 1 or 3
      channels, labels int64 in range, with a mean and standard deviation in (0, 1) per channel;
    - ``deterministic_from_scratch_and_from_the_cache``: loading again, or from another copy of the files, gives the
      same tensors, classes, splits and statistics;
    - ``scarce_training_keeps_two_images_per_class``: ``train_images_per_class=2`` keeps two images of every training
      class (when every split has two classes or more);
    - ``a_root_that_is_a_file_is_an_error``: naming ``data.root`` and the file, and leaving it alone;
    - ``bad_size_or_channels_is_an_error``: ``image_size=0`` and ``channels=2`` are errors naming the option.

    Args:
        spec: the loader's name, a writer of its files and the classes of each split.
        checks: names of :data:`DATASET_CHECKS` to run (default: all that apply).

    Raises:
        AssertionError: naming the loader and the first property it breaks.
    """
    run_checks(DATASET_CHECKS, spec, checks)

"""Tiered-ImageNet (Ren et al., 2018): 608 ILSVRC-2012 classes under 34 high-level categories.

Classes are split by category so that training and test classes are semantically apart: 351 classes
(20 categories) for training, 97 (6) for validation, 160 (8) for testing, at 84 × 84 pixels. The
source files are those of Ren et al., which learn2learn's ``TieredImagenet`` reads and downloads
(``download=True``, through learn2learn: about 12 GB; the cache takes about 16.5 GB at 84 px)::

    <root>/tiered-imagenet/{train,val,test}_images_png.pkl   list of PNG-encoded images (uint8 arrays)
    <root>/tiered-imagenet/{train,val,test}_labels.pkl       dict with "label_specific" (class per
        image), "label_general" (category per image), "label_specific_str" (class names) and
        "label_general_str" (category names)

Images are decoded here as learn2learn's ``TieredImagenet`` decodes them (PIL, in file order, labelled by
``label_specific``), the pickles read with an unpickler that reconstructs only containers and numpy arrays; the
class and category names come from the same labels pickles (learn2learn keeps only ``label_specific``). Each class's
category becomes its ``group`` when the category labels are consistent (every class in exactly one
of the split's 20 / 6 / 8 named categories). The files Ren et al. released (which learn2learn
downloads) fail this: their generator numbered ``label_general`` wrongly, leaving most images with an
index past the category list (renmengye/few-shot-ssl-public issue #8), and the true categories
cannot be recovered from them; such files load without groups, with a warning. Normalisation uses
the ImageNet statistics (mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225); no augmentation.

References:
    Ren et al., 2018. "Meta-Learning for Semi-Supervised Few-Shot Classification." ICLR.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit
from lightning_episodes.data.datasets.downloads import learn2learn_module
from lightning_episodes.data.datasets.pickles import read_pickle

NAME = "tiered-imagenet"
#: Classes and high-level categories per split in Ren et al. (2018).
SPLIT_CLASSES = {"train": 351, "validation": 97, "test": 160}
SPLIT_CATEGORIES = {"train": 20, "validation": 6, "test": 8}
_FILE_SPLIT = {"train": "train", "validation": "val", "test": "test"}
LAYOUT = """\
  {root}/tiered-imagenet/{{train,val,test}}_images_png.pkl  (lists of PNG-encoded images)
  {root}/tiered-imagenet/{{train,val,test}}_labels.pkl      (dicts with label_specific, label_general,
      label_specific_str, label_general_str), as learn2learn's TieredImagenet reads them"""


class EncodedImages:
    """Map-style samples: ``(decoded image, label)`` of a list of PNG-encoded images and their labels."""

    def __init__(self, images: Sequence[Any], labels: np.ndarray) -> None:
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return Image.open(io.BytesIO(self.images[index])), int(self.labels[index])


class TieredImageNet(ConvertedDataset):
    """Tiered-ImageNet with its categories as ``groups`` when they are consistent (see the module docstring)."""

    name, split_classes, layout, downloads_with_learn2learn = NAME, SPLIT_CLASSES, LAYOUT, True

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        folder = spec.root / "tiered-imagenet"
        required = [folder / f"{_FILE_SPLIT[s]}_{kind}.pkl" for s in SPLITS for kind in ("images_png", "labels")]
        self.require(spec, required, download)
        for split in SPLITS:
            path = folder / f"{_FILE_SPLIT[split]}_images_png.pkl"
            encoded = read_pickle(path, "a tiered-ImageNet images file")
            if not isinstance(encoded, list):
                raise ValueError(f"{path} is not a tiered-ImageNet images file: it holds a {type(encoded).__name__}")
            labels = read_labels(folder / f"{_FILE_SPLIT[split]}_labels.pkl")
            class_names = [_text(name) for name in labels["label_specific_str"]]
            groups = _categories(labels, len(class_names), split)
            images = EncodedImages(encoded, np.asarray(labels["label_specific"]).ravel())
            yield SourceSplit(split, class_names, images, SPLIT_CLASSES[split], groups=groups)
            del encoded, images  # free this split's encoded images before the next split is read

    def fetch(self, spec: CacheSpec) -> None:
        """Download the files of every split with learn2learn's ``TieredImagenet`` (which then reads the smallest
        split, the test split, once itself)."""
        datasets = learn2learn_module("learn2learn.vision.datasets", NAME)
        spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
        datasets.TieredImagenet(str(spec.root), mode="test", download=True)


def read_labels(path: Path) -> dict[str, Any]:
    """A tiered-ImageNet labels pickle, read with an unpickler that allows only builtin containers, strings and
    numpy arrays: a crafted file cannot run code.

    Raises:
        ValueError: naming the file, if it holds anything else or is not a dict.
    """
    labels = read_pickle(path, "a tiered-ImageNet labels file")
    if not isinstance(labels, dict):
        raise ValueError(f"{path} is not a tiered-ImageNet labels file: it holds a {type(labels).__name__}, not a dict")
    return labels


def _categories(labels: dict[str, Any], num_classes: int, split: str) -> list[str] | None:
    """Each class's category name, or ``None`` (with a warning) when the category labels are corrupt."""
    specific = np.asarray(labels["label_specific"]).ravel()
    general = np.asarray(labels["label_general"]).ravel()
    names = [_text(name) for name in labels["label_general_str"]]
    pairs = np.unique(np.stack([specific, general], 1), axis=0)
    category = dict(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist(), strict=True))
    consistent = (
        len(category) == len(pairs) == num_classes  # one category per class, every class present
        and set(category.values()) == set(range(len(names)))
        and len(names) == SPLIT_CATEGORIES[split]
    )
    if not consistent:
        warnings.warn(
            f"{NAME} split {split!r}: the category labels (label_general) do not give each class one of "
            f"the {SPLIT_CATEGORIES[split]} categories; Ren et al.'s released files are known to carry "
            "corrupt category labels (renmengye/few-shot-ssl-public issue #8). Loading without groups.",
            stacklevel=2,
        )
        return None
    return [names[category[c]] for c in range(num_classes)]


def _text(name: object) -> str:
    """A class or category name, whether pickled by Python 2 (str) or stored as bytes."""
    return name.decode() if isinstance(name, bytes) else str(name)


load_tiered_imagenet = TieredImageNet.register()

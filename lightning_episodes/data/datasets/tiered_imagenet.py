"""Tiered-ImageNet (Ren et al., 2018): 608 ILSVRC-2012 classes under 34 high-level categories.

Classes are split by category so that training and test classes are semantically apart: 351 classes
(20 categories) for training, 97 (6) for validation, 160 (8) for testing, at 84 × 84 pixels. The
source files are those of Ren et al., which learn2learn's ``TieredImagenet`` reads and downloads
(``download=True``: about 12 GB; the cache takes about 16.5 GB at 84 px)::

    <root>/tiered-imagenet/{train,val,test}_images_png.pkl   list of PNG-encoded images (uint8 arrays)
    <root>/tiered-imagenet/{train,val,test}_labels.pkl       dict with "label_specific" (class per
        image), "label_general" (category per image), "label_specific_str" (class names) and
        "label_general_str" (category names)

Images are decoded through ``learn2learn.vision.datasets.TieredImagenet``; the class and category
names come from the same labels pickles (learn2learn keeps only ``label_specific``). Each class's
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

import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit

NAME = "tiered-imagenet"
#: Classes and high-level categories per split in Ren et al. (2018).
SPLIT_CLASSES = {"train": 351, "validation": 97, "test": 160}
SPLIT_CATEGORIES = {"train": 20, "validation": 6, "test": 8}
_FILE_SPLIT = {"train": "train", "validation": "val", "test": "test"}
LAYOUT = """\
  {root}/tiered-imagenet/{{train,val,test}}_images_png.pkl  (lists of PNG-encoded images)
  {root}/tiered-imagenet/{{train,val,test}}_labels.pkl      (dicts with label_specific, label_general,
      label_specific_str, label_general_str), as learn2learn's TieredImagenet reads them"""


class TieredImageNet(ConvertedDataset):
    """Tiered-ImageNet with its categories as ``groups`` when they are consistent (see the module docstring)."""

    name, split_classes, layout = NAME, SPLIT_CLASSES, LAYOUT

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        folder = spec.root / "tiered-imagenet"
        required = [folder / f"{_FILE_SPLIT[s]}_{kind}.pkl" for s in SPLITS for kind in ("images_png", "labels")]
        self.require(spec, required, download)
        from learn2learn.vision.datasets import TieredImagenet  # slow import: only when converting

        spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
        for split in SPLITS:
            images = TieredImagenet(str(spec.root), mode=split, download=download)  # decodes PNGs lazily
            labels = read_labels(folder / f"{_FILE_SPLIT[split]}_labels.pkl")
            class_names = [_text(name) for name in labels["label_specific_str"]]
            groups = _categories(labels, len(class_names), split)
            yield SourceSplit(split, class_names, images, SPLIT_CLASSES[split], groups=groups)
            del images  # free this split's encoded images before the next split is read


#: What a labels pickle may reconstruct besides the containers, strings and numbers pickle encodes itself: builtin
#: containers and strings, and the numpy arrays of the labels (nothing that runs code or touches files).
_LABEL_GLOBALS = (
    {("builtins", name) for name in ("dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray")}
    | {
        (module, name)
        for core in ("numpy.core", "numpy._core")
        for module, name in (
            (f"{core}.multiarray", "_reconstruct"),
            (f"{core}.multiarray", "scalar"),
            (f"{core}.numeric", "_frombuffer"),
        )
    }
    | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}
)  # encode: bytes in protocol-2 pickles


class _LabelUnpickler(pickle.Unpickler):
    """An unpickler that reconstructs only :data:`_LABEL_GLOBALS`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _LABEL_GLOBALS:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a labels file")
        return super().find_class(module, name)


def read_labels(path: Path) -> dict[str, Any]:
    """A tiered-ImageNet labels pickle, read with an unpickler that allows only builtin containers, strings and
    numpy arrays: a crafted file cannot run code.

    Raises:
        ValueError: naming the file, if it holds anything else or is not a dict.
    """
    with open(path, "rb") as file:
        try:
            labels = _LabelUnpickler(file, encoding="latin1").load()  # Python 2 pickles of numpy arrays need latin1
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as error:
            raise ValueError(f"{path} is not a tiered-ImageNet labels file: {error}") from None
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

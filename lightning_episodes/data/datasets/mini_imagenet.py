"""Mini-ImageNet (Vinyals et al., 2016) with the class split of Ravi & Larochelle (2017).

100 ILSVRC-2012 classes of 600 images each at 84 × 84 pixels, split 64 / 16 / 20 (train / validation /
test). The source files are the pickles that learn2learn's ``MiniImagenet`` reads and downloads
(``download=True``, through learn2learn: about 3 GB)::

    <root>/mini-imagenet-cache-{train,validation,test}.pkl
    each a dict {"image_data": uint8 [N, 84, 84, 3], "class_dict": {wnid: [row, ...]}}

They are read here, as learn2learn reads them (rows in file order, labels in the order of ``class_dict``), with an
unpickler that reconstructs only containers and numpy arrays, and converted once into the uint8 cache of
:mod:`~lightning_episodes.data.datasets.cache` (about 1.3 GB at 84 px). Normalisation uses the ImageNet statistics
(mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225), as is common for this benchmark; there is no augmentation.

References:
    Vinyals et al., 2016. "Matching Networks for One Shot Learning." NeurIPS.
    Ravi & Larochelle, 2017. "Optimization as a Model for Few-Shot Learning." ICLR.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit
from lightning_episodes.data.datasets.downloads import learn2learn_module
from lightning_episodes.data.datasets.pickles import read_pickle

NAME = "mini-imagenet"
#: Classes per split in Ravi & Larochelle (2017).
SPLIT_CLASSES = {"train": 64, "validation": 16, "test": 20}
LAYOUT = """\
  {root}/mini-imagenet-cache-train.pkl
  {root}/mini-imagenet-cache-validation.pkl
  {root}/mini-imagenet-cache-test.pkl
  (pickled dicts {{"image_data": uint8 [N, 84, 84, 3], "class_dict": {{wnid: [row, ...]}}}},
  as learn2learn's MiniImagenet reads them)"""


class MiniImageNetPickle:
    """The images of one ``mini-imagenet-cache-<split>.pkl`` in file order, each labelled by its class's position
    in ``class_dict``.

    Raises:
        ValueError: if the file is not such a dict, or a row belongs to no class or to two.
    """

    def __init__(self, path: Path) -> None:
        content = read_pickle(path, "a Mini-ImageNet pickle")
        if not isinstance(content, dict) or not {"image_data", "class_dict"} <= content.keys():
            raise ValueError(f"{path} is not a Mini-ImageNet pickle: it needs 'image_data' and 'class_dict'")
        self.images: np.ndarray = np.asarray(content["image_data"], dtype=np.uint8)
        self.class_names = [str(name) for name in content["class_dict"]]
        self.labels = np.full(len(self.images), -1, dtype=np.int64)
        for label, rows in enumerate(content["class_dict"].values()):
            rows = np.asarray(rows, dtype=np.int64)
            if len(rows) and (rows.min() < 0 or rows.max() >= len(self.images) or (self.labels[rows] >= 0).any()):
                raise ValueError(f"{path}: class_dict lists rows outside image_data, or a row twice")
            self.labels[rows] = label
        if (self.labels < 0).any():
            raise ValueError(f"{path}: {int((self.labels < 0).sum())} rows of image_data belong to no class")

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return Image.fromarray(self.images[index]), int(self.labels[index])


class MiniImageNet(ConvertedDataset):
    """Mini-ImageNet from learn2learn's pickles (read here; downloaded through learn2learn)."""

    name, split_classes, layout, downloads_with_learn2learn = NAME, SPLIT_CLASSES, LAYOUT, True

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        self.require(spec, [_pickle(spec, split) for split in SPLITS], download)
        for split in SPLITS:
            images = MiniImageNetPickle(_pickle(spec, split))
            yield SourceSplit(split, images.class_names, images, SPLIT_CLASSES[split])
            del images  # this split's pixels go before the next split is read

    def fetch(self, spec: CacheSpec) -> None:
        """Download the missing pickles with learn2learn's ``MiniImagenet`` (which then reads each once itself)."""
        datasets = learn2learn_module("learn2learn.vision.datasets", NAME)
        spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
        for split in SPLITS:
            if not _pickle(spec, split).exists():
                datasets.MiniImagenet(str(spec.root), mode=split, download=True)


def _pickle(spec: CacheSpec, split: str) -> Path:
    return spec.root / f"mini-imagenet-cache-{split}.pkl"


load_mini_imagenet = MiniImageNet.register()

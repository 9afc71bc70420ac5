"""VGG Flowers 102 (Nilsback & Zisserman, 2008) with Meta-Dataset's class split (Triantafillou et al., 2020).

102 flower categories of 40 to 258 images each, split 71 / 15 / 16 (train / validation / test), used
for cross-domain testing, without bounding-box crops as in the paper. The source is the official
image archive and label file in learn2learn's layout (``download=True``, through learn2learn: about 330 MB)::

    <root>/vgg_flower102/jpg/image_00001.jpg ... image_08189.jpg   (102flowers.tgz)
    <root>/vgg_flower102/imagelabels.mat                           (labels 1..102, one per image)

Images are read here as learn2learn's ``VGGFlower102`` reads them, in image-number order, each label numbered by
its place in Meta-Dataset's split list (:mod:`~lightning_episodes.data.datasets.meta_dataset_splits`). The
dataset ships no class names, so a class is named by its label number (``"001"`` to ``"102"``).
Normalisation uses the ImageNet statistics (mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225),
those of the models trained on mini- or tiered-ImageNet; there is no augmentation.

References:
    Nilsback & Zisserman, 2008. "Automated Flower Classification over a Large Number of Classes." ICVGIP.
    Triantafillou et al., 2020. "Meta-Dataset: A Dataset of Datasets for Learning to Learn from Few
    Examples." ICLR.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.io

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit
from lightning_episodes.data.datasets.downloads import learn2learn_module
from lightning_episodes.data.datasets.folder import ImageFiles
from lightning_episodes.data.datasets.meta_dataset_splits import VGG_FLOWERS as CLASSES

NAME = "vgg-flowers"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 71, "validation": 15, "test": 16}
LAYOUT = """\
  {root}/vgg_flower102/jpg/image_00001.jpg ...   (the images of 102flowers.tgz)
  {root}/vgg_flower102/imagelabels.mat           (as learn2learn's VGGFlower102 reads them)"""


class VGGFlowers(ConvertedDataset):
    """VGG Flowers 102 in image-number order (read here; downloaded through learn2learn)."""

    name, split_classes, layout, downloads_with_learn2learn = NAME, SPLIT_CLASSES, LAYOUT, True

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        folder = spec.root / "vgg_flower102"
        self.require(spec, [folder / "jpg", folder / "imagelabels.mat"], download)
        # image n (from 1) shows flower labels[n - 1], one of 1..102
        labels = np.asarray(scipy.io.loadmat(folder / "imagelabels.mat")["labels"]).ravel().astype(np.int64)
        for split in SPLITS:
            position = {label: j for j, label in enumerate(CLASSES[split])}
            chosen = [(n, position[int(label)]) for n, label in enumerate(labels.tolist(), 1) if label in position]
            files = [folder / "jpg" / f"image_{n:05d}.jpg" for n, _ in chosen]
            flowers = ImageFiles(files, [j for _, j in chosen])
            yield SourceSplit(split, [f"{label:03d}" for label in CLASSES[split]], flowers, SPLIT_CLASSES[split])

    def fetch(self, spec: CacheSpec) -> None:
        """Download the images and the labels with learn2learn's ``VGGFlower102``."""
        datasets = learn2learn_module("learn2learn.vision.datasets", NAME)
        spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
        datasets.VGGFlower102(str(spec.root), mode="test", download=True)


load_vgg_flowers = VGGFlowers.register()

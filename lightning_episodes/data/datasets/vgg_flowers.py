"""VGG Flowers 102 (Nilsback & Zisserman, 2008) with Meta-Dataset's class split (Triantafillou et al., 2020).

102 flower categories of 40 to 258 images each, split 71 / 15 / 16 (train / validation / test), used
for cross-domain testing, without bounding-box crops as in the paper. The source is the official
image archive and label file in learn2learn's layout (``download=True``: about 330 MB)::

    <root>/vgg_flower102/jpg/image_00001.jpg ... image_08189.jpg   (102flowers.tgz)
    <root>/vgg_flower102/imagelabels.mat                           (labels 1..102, one per image)

Images are read through ``learn2learn.vision.datasets.VGGFlower102`` in image-number order. The
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

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit

NAME = "vgg-flowers"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 71, "validation": 15, "test": 16}
LAYOUT = """\
  {root}/vgg_flower102/jpg/image_00001.jpg ...   (the images of 102flowers.tgz)
  {root}/vgg_flower102/imagelabels.mat           (as learn2learn's VGGFlower102 reads them)"""


class VGGFlowers(ConvertedDataset):
    """VGG Flowers 102 in image-number order, read through learn2learn's ``VGGFlower102``."""

    name, split_classes, layout = NAME, SPLIT_CLASSES, LAYOUT

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        folder = spec.root / "vgg_flower102"
        self.require(spec, [folder / "jpg", folder / "imagelabels.mat"], download)
        spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
        from learn2learn.vision.datasets import VGGFlower102  # slow import: only when converting
        from learn2learn.vision.datasets.vgg_flowers import SPLITS as CLASSES

        for split in SPLITS:
            flowers = VGGFlower102(str(spec.root), mode=split, download=download)
            names = [f"{label:03d}" for label in CLASSES[split]]
            yield SourceSplit(split, names, flowers, SPLIT_CLASSES[split])


load_vgg_flowers = VGGFlowers.register()

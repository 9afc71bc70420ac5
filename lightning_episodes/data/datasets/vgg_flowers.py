"""VGG Flowers 102 (Nilsback & Zisserman, 2008) with Meta-Dataset's class split (Triantafillou et al., 2020).

102 flower categories of 40 to 258 images each, split 71 / 15 / 16 (train / validation / test), used
for cross-domain testing, without bounding-box crops as in the paper. The source is the official
image archive and label file in learn2learn's layout::

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
from pathlib import Path

from lightning_episodes.data.datasets.base import SPLITS, ImageDataset, register_dataset
from lightning_episodes.data.datasets.cache import (
    CacheSpec,
    SourceSplit,
    imagenet_statistics,
    load_cached,
    require_files,
)

NAME = "vgg-flowers"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 71, "validation": 15, "test": 16}
LAYOUT = """\
  {root}/vgg_flower102/jpg/image_00001.jpg ...   (the images of 102flowers.tgz)
  {root}/vgg_flower102/imagelabels.mat           (as learn2learn's VGGFlower102 reads them)"""


@register_dataset(NAME)
def load_vgg_flowers(
    root: Path | None = None,
    image_size: int | None = None,
    channels: int | None = None,
    download: bool = False,
    cache_dir: str | Path | None = None,
) -> ImageDataset:
    """Load VGG Flowers 102, converting it on first use.

    Args:
        root: folder holding ``vgg_flower102/`` (default ``$LIGHTNING_EPISODES_DATA`` or ``~/data``).
        image_size: side of the stored square images in pixels (default 84).
        channels: 3 (RGB, default) or 1 (grayscale).
        download: let learn2learn download the images and labels (about 330 MB).
        cache_dir: folder of the converted cache (default ``root``).

    Returns:
        The dataset, classes ordered train, validation, test (each in learn2learn's split order).

    Raises:
        FileNotFoundError: if the images or labels are missing and ``download`` is false.
        ValueError: if a class has no image.
    """
    spec = CacheSpec.resolve(NAME, root, image_size, channels, cache_dir)
    return load_cached(spec, lambda: _read_splits(spec, download), *imagenet_statistics(spec.channels))


def _read_splits(spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
    folder = spec.root / "vgg_flower102"
    require_files(spec, [folder / "jpg", folder / "imagelabels.mat"], LAYOUT, download)
    spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
    from learn2learn.vision.datasets import VGGFlower102  # slow import: only when converting
    from learn2learn.vision.datasets.vgg_flowers import SPLITS as CLASSES

    for split in SPLITS:
        flowers = VGGFlower102(str(spec.root), mode=split, download=download)
        names = [f"{label:03d}" for label in CLASSES[split]]
        yield SourceSplit(split, names, flowers, SPLIT_CLASSES[split])

"""Describable Textures (Cimpoi et al., 2014) with the Meta-Dataset class split (Triantafillou et al., 2020).

47 texture classes of 120 images each, split 33 / 7 / 7 (train / validation / test), used for
cross-domain testing. The source is the official archive ``dtd-r1.0.1.tar.gz`` in learn2learn's
layout (``download=True``: about 600 MB from learn2learn's address)::

    <root>/describable_textures/dtd/images/<class>/<image>.jpg   e.g. banded/banded_0002.jpg

The split lists and the download come from learn2learn (``describable_textures.SPLITS``,
``ARCHIVE_URL``), but the images are read here: learn2learn's ``DescribableTextures`` decodes every
image of a split into memory when constructed (gigabytes at full resolution) and keeps them in
``os.listdir`` order without their file names, so the stored order, and with it every episode, would
depend on the file system. Here each class is read lazily in file-name order, skipping hidden files
(the archive holds ``.directory`` files, which learn2learn skips too). Normalisation uses the
ImageNet statistics (mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225), those of the models trained
on mini- or tiered-ImageNet; there is no augmentation.

References:
    Cimpoi et al., 2014. "Describing Textures in the Wild." CVPR.
    Triantafillou et al., 2020. "Meta-Dataset: A Dataset of Datasets for Learning to Learn from Few
    Examples." ICLR.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from PIL import Image

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit

NAME = "dtd"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 33, "validation": 7, "test": 7}
LAYOUT = """\
  {root}/describable_textures/dtd/images/<class>/<image>.jpg
  (the 47 class folders of dtd-r1.0.1.tar.gz, e.g. banded/, as learn2learn's DescribableTextures
  reads them)"""


class TextureFolder:
    """The images of some DTD classes, listed in file-name order and decoded on access.

    Args:
        images: the ``dtd/images`` folder.
        classes: class folder names; local label ``j`` is ``classes[j]``.
    """

    def __init__(self, images: Path, classes: Sequence[str]) -> None:
        self.data = [
            (path, label)
            for label, name in enumerate(classes)
            for path in sorted((images / name).iterdir())
            if path.is_file() and not path.name.startswith(".")
        ]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        path, label = self.data[index]
        with Image.open(path) as image:
            return image.convert("RGB"), label


class DescribableTextures(ConvertedDataset):
    """DTD read lazily in file-name order; the split lists and the download come from learn2learn."""

    name, split_classes, layout = NAME, SPLIT_CLASSES, LAYOUT

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        from learn2learn.vision.datasets.describable_textures import DATA_DIR
        from learn2learn.vision.datasets.describable_textures import SPLITS as CLASSES

        images = spec.root / DATA_DIR / "dtd" / "images"
        self.require(spec, [images], download)
        if not images.exists():
            _download(spec.root / DATA_DIR)
        for split in SPLITS:
            yield SourceSplit(split, CLASSES[split], TextureFolder(images, CLASSES[split]), SPLIT_CLASSES[split])


def _download(folder: Path) -> None:
    """Download and unpack the archive the way ``DescribableTextures.download`` does."""
    from learn2learn.data.utils import download_file
    from learn2learn.vision.datasets.describable_textures import ARCHIVE_URL

    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / ARCHIVE_URL.rsplit("/", 1)[-1]
    download_file(ARCHIVE_URL, str(archive))
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")  # refuses paths that leave the folder
    archive.unlink()


load_dtd = DescribableTextures.register()

"""Describable Textures (Cimpoi et al., 2014) with the Meta-Dataset class split (Triantafillou et al., 2020).

47 texture classes of 120 images each, split 33 / 7 / 7 (train / validation / test), used for
cross-domain testing. The source is the official archive ``dtd-r1.0.1.tar.gz`` in learn2learn's
layout (``download=True``, through learn2learn: about 600 MB from learn2learn's address)::

    <root>/describable_textures/dtd/images/<class>/<image>.jpg   e.g. banded/banded_0002.jpg

The split lists are learn2learn's (``describable_textures.SPLITS``, kept in
:mod:`~lightning_episodes.data.datasets.meta_dataset_splits`) and the download is learn2learn's (``ARCHIVE_URL``),
but the images are read here: learn2learn's ``DescribableTextures`` decodes every
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
from collections.abc import Callable, Iterator
from pathlib import Path

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit
from lightning_episodes.data.datasets.downloads import learn2learn_module
from lightning_episodes.data.datasets.folder import ImageFiles, class_folder_images
from lightning_episodes.data.datasets.meta_dataset_splits import DTD as CLASSES

NAME = "dtd"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 33, "validation": 7, "test": 7}
#: learn2learn's folder under the data root.
DATA_DIR = "describable_textures"
LAYOUT = """\
  {root}/describable_textures/dtd/images/<class>/<image>.jpg
  (the 47 class folders of dtd-r1.0.1.tar.gz, e.g. banded/, as learn2learn's DescribableTextures
  reads them)"""


class DescribableTextures(ConvertedDataset):
    """DTD read lazily in file-name order (downloaded through learn2learn)."""

    name, split_classes, layout, downloads_with_learn2learn = NAME, SPLIT_CLASSES, LAYOUT, True

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        images = spec.root / DATA_DIR / "dtd" / "images"
        self.require(spec, [images], download)
        for split in SPLITS:
            files, labels = class_folder_images(images, CLASSES[split])
            yield SourceSplit(split, CLASSES[split], ImageFiles(files, labels, mode="RGB"), SPLIT_CLASSES[split])

    def fetch(self, spec: CacheSpec) -> None:
        """Download and unpack the archive from learn2learn's address (its ``DescribableTextures`` would decode every
        image of a split when built)."""
        utils = learn2learn_module("learn2learn.data.utils", NAME)
        address = learn2learn_module("learn2learn.vision.datasets.describable_textures", NAME).ARCHIVE_URL
        _download(spec.root / DATA_DIR, address, utils.download_file)


def _download(folder: Path, address: str, download_file: Callable[[str, str], object]) -> None:
    """Download the archive at ``address`` with ``download_file`` and unpack it into ``folder``, as
    ``DescribableTextures.download`` does."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / address.rsplit("/", 1)[-1]
    download_file(address, str(archive))
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")  # refuses paths that leave the folder
    archive.unlink()


load_dtd = DescribableTextures.register()

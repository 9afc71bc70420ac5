"""CUB-200-2011 birds (Wah et al., 2011) with the Meta-Dataset class split (Triantafillou et al., 2020).

200 bird species split 140 / 30 / 30 (train / validation / test), used for cross-domain testing. As
in the paper, the 43 images that also appear in ILSVRC-2012 are left out and images are not cropped
to their bounding boxes. The source is the official archive as learn2learn's ``CUBirds200`` reads and
downloads it (``download=True``, through learn2learn: about 1.1 GB)::

    <root>/cubirds200/CUB_200_2011/images/<class>/<image>.jpg   e.g. 001.Black_footed_Albatross/

Images are read here with the split lists and the ImageNet duplicate list that learn2learn's ``CUBirds200`` holds
(:mod:`~lightning_episodes.data.datasets.meta_dataset_splits`), stored per class in file-name order so that the
cache does not depend on directory listing order. Normalisation uses the ImageNet statistics (mean 0.485, 0.456,
0.406; std 0.229, 0.224, 0.225), those of the models trained on mini- or tiered-ImageNet; there is no augmentation.

References:
    Wah et al., 2011. "The Caltech-UCSD Birds-200-2011 Dataset." Caltech CNS-TR-2011-001.
    Triantafillou et al., 2020. "Meta-Dataset: A Dataset of Datasets for Learning to Learn from Few
    Examples." ICLR.
"""

from __future__ import annotations

from collections.abc import Iterator

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit
from lightning_episodes.data.datasets.downloads import learn2learn_module
from lightning_episodes.data.datasets.folder import ImageFiles, class_folder_images
from lightning_episodes.data.datasets.meta_dataset_splits import CUB200 as CLASSES
from lightning_episodes.data.datasets.meta_dataset_splits import CUB200_IMAGENET_DUPLICATES

NAME = "cub200"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 140, "validation": 30, "test": 30}
LAYOUT = """\
  {root}/cubirds200/CUB_200_2011/images/<class>/<image>.jpg
  (the 200 class folders of CUB_200_2011.tgz, e.g. 001.Black_footed_Albatross/, as learn2learn's
  CUBirds200 reads them)"""


class CUB200(ConvertedDataset):
    """CUB-200-2011 without its ImageNet duplicates (read here; downloaded through learn2learn)."""

    name, split_classes, layout, downloads_with_learn2learn = NAME, SPLIT_CLASSES, LAYOUT, True

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        images = spec.root / "cubirds200" / "CUB_200_2011" / "images"
        self.require(spec, [images], download)
        for split in SPLITS:
            duplicates = frozenset(CUB200_IMAGENET_DUPLICATES[split])
            files, labels = class_folder_images(images, CLASSES[split], skip=duplicates.__contains__)
            birds = ImageFiles(files, labels, mode="RGB")  # learn2learn's CUBirds200 converts to RGB first
            yield SourceSplit(split, CLASSES[split], birds, SPLIT_CLASSES[split])

    def fetch(self, spec: CacheSpec) -> None:
        """Download and unpack the archive with learn2learn's ``CUBirds200``."""
        datasets = learn2learn_module("learn2learn.vision.datasets", NAME)
        datasets.CUBirds200(str(spec.root), mode="test", download=True)


load_cub200 = CUB200.register()

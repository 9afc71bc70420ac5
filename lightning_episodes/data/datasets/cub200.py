"""CUB-200-2011 birds (Wah et al., 2011) with the Meta-Dataset class split (Triantafillou et al., 2020).

200 bird species split 140 / 30 / 30 (train / validation / test), used for cross-domain testing. As
in the paper, the 43 images that also appear in ILSVRC-2012 are left out and images are not cropped
to their bounding boxes. The source is the official archive as learn2learn's ``CUBirds200`` reads and
downloads it (``download=True``: about 1.1 GB)::

    <root>/cubirds200/CUB_200_2011/images/<class>/<image>.jpg   e.g. 001.Black_footed_Albatross/

Images are read through ``learn2learn.vision.datasets.CUBirds200`` (its split lists and ImageNet
duplicate list), stored per class in file-name order so that the cache does not depend on directory
listing order. Normalisation uses the ImageNet statistics (mean 0.485, 0.456, 0.406; std 0.229,
0.224, 0.225), those of the models trained on mini- or tiered-ImageNet; there is no augmentation.

References:
    Wah et al., 2011. "The Caltech-UCSD Birds-200-2011 Dataset." Caltech CNS-TR-2011-001.
    Triantafillou et al., 2020. "Meta-Dataset: A Dataset of Datasets for Learning to Learn from Few
    Examples." ICLR.
"""

from __future__ import annotations

from collections.abc import Iterator

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit

NAME = "cub200"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 140, "validation": 30, "test": 30}
LAYOUT = """\
  {root}/cubirds200/CUB_200_2011/images/<class>/<image>.jpg
  (the 200 class folders of CUB_200_2011.tgz, e.g. 001.Black_footed_Albatross/, as learn2learn's
  CUBirds200 reads them)"""


class CUB200(ConvertedDataset):
    """CUB-200-2011 without its ImageNet duplicates, read through learn2learn's ``CUBirds200``."""

    name, split_classes, layout = NAME, SPLIT_CLASSES, LAYOUT

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        self.require(spec, [spec.root / "cubirds200" / "CUB_200_2011" / "images"], download)
        from learn2learn.vision.datasets import CUBirds200  # slow import: only when converting
        from learn2learn.vision.datasets.cu_birds200 import SPLITS as CLASSES

        for split in SPLITS:
            birds = CUBirds200(
                str(spec.root),
                mode=split,
                download=download,
                include_imagenet_duplicates=False,
                bounding_box_crop=False,
            )
            # birds.data holds (path, label) in os.listdir order; store by (label, path) instead
            keys = [(label, path) for path, label in birds.data]
            order = sorted(range(len(keys)), key=keys.__getitem__)
            yield SourceSplit(split, CLASSES[split], birds, SPLIT_CLASSES[split], order=order)


load_cub200 = CUB200.register()

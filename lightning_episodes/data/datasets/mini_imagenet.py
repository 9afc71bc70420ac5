"""Mini-ImageNet (Vinyals et al., 2016) with the class split of Ravi & Larochelle (2017).

100 ILSVRC-2012 classes of 600 images each at 84 × 84 pixels, split 64 / 16 / 20 (train / validation /
test). The source files are the pickles that learn2learn's ``MiniImagenet`` reads and downloads
(``download=True``: about 3 GB)::

    <root>/mini-imagenet-cache-{train,validation,test}.pkl
    each a dict {"image_data": uint8 [N, 84, 84, 3], "class_dict": {wnid: [row, ...]}}

They are read through ``learn2learn.vision.datasets.MiniImagenet`` (labels follow the order of
``class_dict``) and converted once into the uint8 cache of :mod:`~lightning_episodes.data.datasets.cache`
(about 1.3 GB at 84 px; learn2learn holds a split as float32 meanwhile, about 3.3 GB for training).
Normalisation uses the ImageNet statistics (mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225), as is
common for this benchmark; there is no augmentation.

References:
    Vinyals et al., 2016. "Matching Networks for One Shot Learning." NeurIPS.
    Ravi & Larochelle, 2017. "Optimization as a Model for Few-Shot Learning." ICLR.
"""

from __future__ import annotations

from collections.abc import Iterator

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit

NAME = "mini-imagenet"
#: Classes per split in Ravi & Larochelle (2017).
SPLIT_CLASSES = {"train": 64, "validation": 16, "test": 20}
LAYOUT = """\
  {root}/mini-imagenet-cache-train.pkl
  {root}/mini-imagenet-cache-validation.pkl
  {root}/mini-imagenet-cache-test.pkl
  (pickled dicts {{"image_data": uint8 [N, 84, 84, 3], "class_dict": {{wnid: [row, ...]}}}},
  as learn2learn's MiniImagenet reads them)"""


class MiniImageNet(ConvertedDataset):
    """Mini-ImageNet from learn2learn's pickles, read through its ``MiniImagenet``."""

    name, split_classes, layout = NAME, SPLIT_CLASSES, LAYOUT

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        self.require(spec, [spec.root / f"mini-imagenet-cache-{split}.pkl" for split in SPLITS], download)
        from learn2learn.vision.datasets import MiniImagenet  # slow import: only when converting

        spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
        for split in SPLITS:
            dataset = MiniImagenet(str(spec.root), mode=split, download=download)
            del dataset.data  # its float copy dataset.x is what __getitem__ reads
            yield SourceSplit(split, list(dataset.class_idx), dataset, SPLIT_CLASSES[split])


load_mini_imagenet = MiniImageNet.register()

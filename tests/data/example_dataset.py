"""A dataset kept as one NumPy archive per split: the complete example of the guide "Your own dataset"
(docs/guides/own-dataset.md).

Layout (``np.savez(path, images=..., labels=..., class_names=...)``)::

    <root>/my_dataset/train.npz, val.npz, test.npz
        images: uint8 [N, H, W, C] (C = 1, 3 or 4; any H and W), labels: [N] in 0..K-1, class_names: [K] str
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit

FILES = {"train": "train.npz", "validation": "val.npz", "test": "test.npz"}


class NpzDataset(ConvertedDataset):
    """The images, labels and class names of each split, read from ``<root>/my_dataset/<split>.npz``."""

    name, downloadable = "npz-example", False
    layout = "  {root}/my_dataset/train.npz, val.npz, test.npz (images uint8 [N, H, W, C], labels, class_names)"

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        paths = {split: spec.root / "my_dataset" / FILES[split] for split in SPLITS}
        self.require(spec, paths.values(), download)
        for split, path in paths.items():
            with np.load(path) as archive:
                images, labels, names = archive["images"], archive["labels"], archive["class_names"].tolist()
            if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] not in (1, 3, 4):
                raise ValueError(f"{path}: images must be uint8 [N, H, W, 1|3|4], got {images.dtype} {images.shape}")
            if labels.dtype.kind not in "iu" or labels.shape != images.shape[:1]:
                raise ValueError(f"{path}: labels must be {len(images)} integers, got {labels.dtype} {labels.shape}")
            pixels = torch.from_numpy(images).permute(0, 3, 1, 2)  # [N, C, H, W], as SourceSplit takes them
            samples = list(zip(pixels, labels.tolist(), strict=True))
            yield SourceSplit(split, names, samples, expected_classes=len(names))


load_npz_example = NpzDataset.register()

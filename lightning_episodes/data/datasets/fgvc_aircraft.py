"""FGVC-Aircraft (Maji et al., 2013) with the Meta-Dataset class split (Triantafillou et al., 2020).

100 aircraft variants of 100 images each, split 70 / 15 / 15 (train / validation / test), used for
cross-domain testing. As in the paper, images are not cropped to their bounding boxes (Meta-Dataset
crops them). The source is the official archive ``fgvc-aircraft-2013b.tar.gz`` in learn2learn's
layout (``download=True``: about 2.75 GB)::

    <root>/fgvc_aircraft/fgvc-aircraft-2013b/data/images/<id>.jpg
    <root>/fgvc_aircraft/fgvc-aircraft-2013b/data/labels.pkl                 (written by learn2learn)
    <root>/fgvc_aircraft/fgvc-aircraft-2013b/data/images_variant_{train,val,test}.txt

Images are read through ``learn2learn.vision.datasets.FGVCAircraft``, which needs ``labels.pkl``:
the list of ``(image id, variant)`` that its download step builds from the ``images_variant_*.txt``
files. When the archive was unpacked by hand, that file is built here the same way. Normalisation
uses the ImageNet statistics (mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225), those of the
models trained on mini- or tiered-ImageNet; there is no augmentation.

References:
    Maji et al., 2013. "Fine-Grained Visual Classification of Aircraft." arXiv:1306.5151.
    Triantafillou et al., 2020. "Meta-Dataset: A Dataset of Datasets for Learning to Learn from Few
    Examples." ICLR.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit

NAME = "fgvc-aircraft"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 70, "validation": 15, "test": 15}
_DATA = Path("fgvc_aircraft", "fgvc-aircraft-2013b", "data")
_VARIANT_FILES = tuple(f"images_variant_{part}.txt" for part in ("train", "val", "test"))
LAYOUT = """\
  {root}/fgvc_aircraft/fgvc-aircraft-2013b/data/images/<id>.jpg
  {root}/fgvc_aircraft/fgvc-aircraft-2013b/data/labels.pkl  (learn2learn's, or instead the archive's
      images_variant_train.txt, images_variant_val.txt, images_variant_test.txt)"""


class FGVCAircraft(ConvertedDataset):
    """FGVC-Aircraft variants without bounding-box crops, read through learn2learn's ``FGVCAircraft``."""

    name, split_classes, layout = NAME, SPLIT_CLASSES, LAYOUT

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        data = spec.root / _DATA
        has_variants = all((data / name).exists() for name in _VARIANT_FILES)
        labels = [] if has_variants else [data / "labels.pkl"]
        self.require(spec, [data / "images", *labels], download)
        if has_variants and not (data / "labels.pkl").exists():
            _write_labels(data)
        spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
        from learn2learn.vision.datasets import FGVCAircraft as Aircraft  # slow import: only when converting
        from learn2learn.vision.datasets.fgvc_aircraft import SPLITS as CLASSES

        for split in SPLITS:
            aircraft = Aircraft(str(spec.root), mode=split, download=download, bounding_box_crop=False)
            classes = CLASSES["valid" if split == "validation" else split]
            yield SourceSplit(split, classes, aircraft, SPLIT_CLASSES[split])


def _write_labels(data: Path) -> None:
    """Write ``labels.pkl`` from the variant lists, as ``FGVCAircraft.download`` does (atomically)."""
    pairs = []
    for name in _VARIANT_FILES:
        for line in (data / name).read_text().splitlines():
            if line.strip():
                image, variant = line.split(" ", 1)
                pairs.append((image.strip(), variant.strip()))
    temporary = data / f".labels.pkl.{os.getpid()}.tmp"
    with open(temporary, "wb") as file:
        pickle.dump(pairs, file)
    os.replace(temporary, data / "labels.pkl")


load_fgvc_aircraft = FGVCAircraft.register()

"""FGVC-Aircraft (Maji et al., 2013) with the Meta-Dataset class split (Triantafillou et al., 2020).

100 aircraft variants of 100 images each, split 70 / 15 / 15 (train / validation / test), used for
cross-domain testing. As in the paper, images are not cropped to their bounding boxes (Meta-Dataset
crops them). The source is the official archive ``fgvc-aircraft-2013b.tar.gz`` in learn2learn's
layout (``download=True``, through learn2learn: about 2.75 GB)::

    <root>/fgvc_aircraft/fgvc-aircraft-2013b/data/images/<id>.jpg
    <root>/fgvc_aircraft/fgvc-aircraft-2013b/data/labels.pkl                 (written by learn2learn)
    <root>/fgvc_aircraft/fgvc-aircraft-2013b/data/images_variant_{train,val,test}.txt

Images are read here as learn2learn's ``FGVCAircraft`` reads them: in the order of the list of ``(image id,
variant)`` that its download step pickles as ``labels.pkl`` from the ``images_variant_{train,val,test}.txt`` files
(read from those files when they are there, the same list; else from ``labels.pkl``, with an unpickler that
reconstructs only containers and strings), each variant labelled by its place in Meta-Dataset's split list
(:mod:`~lightning_episodes.data.datasets.meta_dataset_splits`). Normalisation uses the ImageNet statistics (mean
0.485, 0.456, 0.406; std 0.229, 0.224, 0.225), those of the models trained on mini- or tiered-ImageNet; there is no
augmentation.

References:
    Maji et al., 2013. "Fine-Grained Visual Classification of Aircraft." arXiv:1306.5151.
    Triantafillou et al., 2020. "Meta-Dataset: A Dataset of Datasets for Learning to Learn from Few
    Examples." ICLR.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from lightning_episodes.data.datasets.converted import SPLITS, CacheSpec, ConvertedDataset, SourceSplit
from lightning_episodes.data.datasets.downloads import learn2learn_module
from lightning_episodes.data.datasets.folder import ImageFiles
from lightning_episodes.data.datasets.meta_dataset_splits import FGVC_AIRCRAFT as CLASSES
from lightning_episodes.data.datasets.pickles import read_pickle

NAME = "fgvc-aircraft"
#: Classes per split in Meta-Dataset.
SPLIT_CLASSES = {"train": 70, "validation": 15, "test": 15}
_DATA = Path("fgvc_aircraft", "fgvc-aircraft-2013b", "data")
_VARIANT_FILES = tuple(f"images_variant_{part}.txt" for part in ("train", "val", "test"))
LAYOUT = """\
  {root}/fgvc_aircraft/fgvc-aircraft-2013b/data/images/<id>.jpg
  {root}/fgvc_aircraft/fgvc-aircraft-2013b/data/images_variant_train.txt, images_variant_val.txt,
      images_variant_test.txt  (of the archive; or instead learn2learn's labels.pkl)"""


class FGVCAircraft(ConvertedDataset):
    """FGVC-Aircraft variants without bounding-box crops (read here; downloaded through learn2learn)."""

    name, split_classes, layout, downloads_with_learn2learn = NAME, SPLIT_CLASSES, LAYOUT, True

    def read_splits(self, spec: CacheSpec, download: bool) -> Iterator[SourceSplit]:
        data = spec.root / _DATA
        has_variants = all((data / name).exists() for name in _VARIANT_FILES)
        self.require(spec, [data / "images", *([] if has_variants else [data / "labels.pkl"])], download)
        pairs = image_variants(data)
        for split in SPLITS:
            position = {variant: label for label, variant in enumerate(CLASSES[split])}
            chosen = [(image, position[variant]) for image, variant in pairs if variant in position]
            files = [data / "images" / f"{image}.jpg" for image, _ in chosen]
            aircraft = ImageFiles(files, [label for _, label in chosen], mode="RGB")  # as learn2learn converts them
            yield SourceSplit(split, CLASSES[split], aircraft, SPLIT_CLASSES[split])

    def fetch(self, spec: CacheSpec) -> None:
        """Download and unpack the archive (and write ``labels.pkl``) with learn2learn's ``FGVCAircraft``."""
        datasets = learn2learn_module("learn2learn.vision.datasets", NAME)
        spec.root.mkdir(parents=True, exist_ok=True)  # learn2learn creates only the last folder level
        datasets.FGVCAircraft(str(spec.root), mode="test", download=True, bounding_box_crop=False)


def image_variants(data: Path) -> list[tuple[str, str]]:
    """``(image id, variant)`` of every image, in learn2learn's order: the lines of ``images_variant_train.txt``,
    ``_val.txt`` and ``_test.txt`` in turn, or, without them, the list in ``labels.pkl``.

    Raises:
        ValueError: if ``labels.pkl`` holds anything but a list of pairs of strings.
    """
    if all((data / name).exists() for name in _VARIANT_FILES):
        pairs = []
        for name in _VARIANT_FILES:
            for line in (data / name).read_text().splitlines():
                if line.strip():
                    image, variant = line.split(" ", 1)
                    pairs.append((image.strip(), variant.strip()))
        return pairs
    pairs = read_pickle(data / "labels.pkl", "FGVC-Aircraft's labels.pkl")
    if not isinstance(pairs, list) or not all(
        isinstance(pair, tuple | list) and len(pair) == 2 and all(isinstance(x, str) for x in pair) for pair in pairs
    ):
        raise ValueError(f"{data / 'labels.pkl'} is not FGVC-Aircraft's labels.pkl: a list of (image id, variant)")
    return [(str(image), str(variant)) for image, variant in pairs]


load_fgvc_aircraft = FGVCAircraft.register()

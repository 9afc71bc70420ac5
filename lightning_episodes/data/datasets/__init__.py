"""Datasets: each module registers a loader that returns an :class:`ImageDataset`.

A dataset read from source files subclasses :class:`~.converted.ConvertedDataset` (the paper's datasets,
``folder``); one rendered in the library is a :class:`~.rendered.RenderedDataset` (``glyphs``,
``glyphs-hard``, ``glyphs-100``). A new loader gets the shared tests by one row in
``tests/data/test_loader_contract.py``.
"""

# importing a dataset module registers its loader (learn2learn is imported only to download a dataset's files)
from lightning_episodes.data.datasets import (  # noqa: E402, F401
    cub200,
    dtd,
    fgvc_aircraft,
    folder,
    glyphs,
    glyphs_100,
    glyphs_hard,
    mini_imagenet,
    tiered_imagenet,
    vgg_flowers,
)
from lightning_episodes.data.datasets.base import (
    SPLITS,
    ImageDataset,
    available_datasets,
    load_dataset,
    register_dataset,
)

__all__ = ["SPLITS", "ImageDataset", "available_datasets", "load_dataset", "register_dataset"]

"""Datasets: each module registers a loader that returns an :class:`ImageDataset`."""

# importing a dataset module registers its loader (learn2learn itself is imported only to build a cache)
from lightning_episodes.data.datasets import (  # noqa: E402, F401
    cub200,
    dtd,
    fgvc_aircraft,
    folder,
    glyphs,
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

"""The one loader shape of every dataset read from source files: a subclass says only how its files are read.

A :class:`ConvertedDataset` turns its source files into the uint8 cache of
:mod:`~lightning_episodes.data.datasets.cache` on first use and reads that cache afterwards. A dataset module
subclasses it with its registered name, the number of classes of each published split, a description of
its on-disk layout and :meth:`~ConvertedDataset.read_splits`, and registers it::

    class Flowers(ConvertedDataset):
        name, split_classes, layout = "flowers", {"train": 71, "validation": 15, "test": 16}, "{root}/flowers/..."

        def read_splits(self, spec, download):
            self.require(spec, [spec.root / "flowers"], download)
            for split in SPLITS:
                yield SourceSplit(split, class_names, samples, self.split_classes[split])

    load_flowers = Flowers.register()

The arguments, their defaults, the checks of ``image_size`` and ``channels`` and the normalisation (the
ImageNet statistics unless :meth:`~ConvertedDataset.statistics` says otherwise) are those of every such dataset.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from lightning_episodes.data.datasets.base import SPLITS, DatasetLoader, ImageDataset, register_dataset
from lightning_episodes.data.datasets.cache import (
    CacheSpec,
    SourceSplit,
    Statistics,
    imagenet_statistics,
    load_cached,
    require_files,
)
from lightning_episodes.data.datasets.downloads import learn2learn_note

#: What a dataset module needs (it imports them all from here).
__all__ = ["SPLITS", "CacheSpec", "ConvertedDataset", "ImageDataset", "SourceSplit", "Statistics"]


class ConvertedDataset(ABC):
    """A few-shot dataset converted once from its source files into the uint8 cache.

    Subclasses set the class attributes and implement :meth:`read_splits`; the data root, the download and
    the size of the download are described in the subclass's module docstring.
    """

    #: The registered name, also the prefix of the cache file.
    name: ClassVar[str]
    #: Classes per split (``train``, ``validation``, ``test``) in the paper that defines the split (checked).
    split_classes: ClassVar[dict[str, int]]
    #: The expected layout of the source files, shown when they are missing; ``{root}`` is the data root.
    layout: ClassVar[str]
    #: Whether ``root`` must be given (no default data root).
    needs_root: ClassVar[bool] = False
    #: Whether ``download=True`` can fetch the source files.
    downloadable: ClassVar[bool] = True
    #: Whether :meth:`fetch` downloads through learn2learn (the paper's datasets): the message about missing files
    #: then says whether it is installed, and how to install it.
    downloads_with_learn2learn: ClassVar[bool] = False

    @classmethod
    def register(cls) -> DatasetLoader:
        """Register the :meth:`load` of an instance under :attr:`name`, and return it."""
        return register_dataset(cls.name)(cls().load)

    def load(
        self,
        root: Path | None = None,
        image_size: int | None = None,
        channels: int | None = None,
        download: bool = False,
        cache_dir: str | Path | None = None,
    ) -> ImageDataset:
        """Load the dataset, converting its source files into the cache on first use.

        Args:
            root: the data root holding the source files in :attr:`layout` (default
                ``$LIGHTNING_EPISODES_DATA`` or ``~/data``).
            image_size: side of the stored square images in pixels (default 84).
            channels: 3 (RGB, default) or 1 (grayscale).
            download: download missing source files (how and how much: the dataset's module docstring).
            cache_dir: folder of the converted cache (default ``root``).

        Returns:
            The dataset, classes ordered train, validation, test (each in the order of the published split).

        Raises:
            FileNotFoundError: if source files are missing and ``download`` is false.
            ValueError: for an ``image_size`` below 1 or ``channels`` not 1 or 3, a split without its
                published number of classes, or a class without images; without ``root`` where the dataset
                :attr:`needs_root`, with ``download`` where it is not :attr:`downloadable`.
        """
        if root is None and self.needs_root:
            raise ValueError(
                f"data.dataset={self.name} needs data.root: the folder laid out as\n{self.layout.format(root='ROOT')}"
            )
        if download and not self.downloadable:
            raise ValueError(
                f"data.download=true: the {self.name} dataset reads local files, there is nothing to download"
            )
        spec = self.cache_spec(CacheSpec.resolve(self.name, root, image_size, channels, cache_dir))
        return load_cached(spec, lambda: self.read_splits(spec, download), self.statistics)

    def cache_spec(self, spec: CacheSpec) -> CacheSpec:
        """The cache file of ``spec`` (default: as :meth:`CacheSpec.resolve` names it, by dataset, size and
        channels)."""
        return spec

    @abstractmethod
    def read_splits(self, spec: CacheSpec, download: bool) -> Iterable[SourceSplit]:
        """Read the source files under ``spec.root``, one split at a time (only called to build the cache).

        Raises:
            FileNotFoundError: if source files are missing and ``download`` is false (see :meth:`require`).
        """

    def statistics(self, data: ImageDataset) -> Statistics:
        """Per-channel normalisation mean and std: the ImageNet statistics, those of the models trained on
        mini- or tiered-ImageNet."""
        return imagenet_statistics(data.image_shape[0])

    def require(self, spec: CacheSpec, required: Iterable[Path], download: bool) -> None:
        """Check that the ``required`` source files exist, or download them with :meth:`fetch` when ``download``.

        Raises:
            FileNotFoundError: naming the missing paths, :attr:`layout` and, if :attr:`downloadable`, the download
                option.
            ValueError: from :meth:`fetch`, e.g. without learn2learn for a download that needs it.
        """
        required = list(required)
        note = learn2learn_note() if self.downloads_with_learn2learn else ""
        require_files(spec, required, self.layout, download, self.downloadable, note)
        if download and any(not path.exists() for path in required):
            self.fetch(spec)

    def fetch(self, spec: CacheSpec) -> None:  # noqa: B027 (a hook with a default, not an abstract method)
        """Download the missing source files into ``spec.root`` (called by :meth:`require` with ``download``).

        The default does nothing, for a subclass that downloads in :meth:`read_splits` itself.
        """

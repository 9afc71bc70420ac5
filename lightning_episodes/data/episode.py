"""The episode batch type that every part of the library passes around.

A batch holds ``B`` episodes of the same shape. Inside an episode, samples are stored class-major:
support position ``j * shots + s`` is the ``s``-th support sample of class ``j`` and has label ``j``
(queries likewise), so a model may reshape support features to ``[B, ways, shots, D]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class EpisodeIdentity:
    """What an episode *is*: enough to rebuild its tensors and labels exactly.

    Args:
        classes: ``[B, ways]`` global class ids; label ``j`` is ``classes[:, j]``.
        support_indices: ``[B, ways, shots]`` dataset row indices of the support samples, per class.
        query_indices: ``[B, ways, queries]`` dataset row indices of the query samples, per class.
        episode_ids: ``[B]`` the episode's position in its stream: ``step * batch + j`` for training
            episode ``j`` of global step ``step``, ``i`` for evaluation episode ``i``.
    """

    classes: Tensor
    support_indices: Tensor
    query_indices: Tensor
    episode_ids: Tensor

    def __len__(self) -> int:
        return int(self.classes.shape[0])

    @property
    def ways(self) -> int:
        return int(self.classes.shape[1])

    @property
    def shots(self) -> int:
        return int(self.support_indices.shape[2])

    @property
    def queries(self) -> int:
        return int(self.query_indices.shape[2])

    def __getitem__(self, index: slice | Tensor | int) -> EpisodeIdentity:
        if isinstance(index, int):
            index = slice(index, index + 1)
        return EpisodeIdentity(
            self.classes[index],
            self.support_indices[index],
            self.query_indices[index],
            self.episode_ids[index],
        )

    def pin_memory(self) -> EpisodeIdentity:
        return EpisodeIdentity(**{k: t.pin_memory() for k, t in vars(self).items()})

    @staticmethod
    def cat(parts: list[EpisodeIdentity]) -> EpisodeIdentity:
        return EpisodeIdentity(
            torch.cat([p.classes for p in parts]),
            torch.cat([p.support_indices for p in parts]),
            torch.cat([p.query_indices for p in parts]),
            torch.cat([p.episode_ids for p in parts]),
        )


@dataclass
class Episode:
    """A batch of assembled episodes.

    Args:
        support: ``[B, ways * shots, C, H, W]`` normalised support images.
        support_labels: ``[B, ways * shots]`` labels in ``0..ways-1``.
        query: ``[B, ways * queries, C, H, W]`` normalised query images.
        query_labels: ``[B, ways * queries]`` labels in ``0..ways-1``.
        identity: the episodes' :class:`EpisodeIdentity`.
    """

    support: Tensor
    support_labels: Tensor
    query: Tensor
    query_labels: Tensor
    identity: EpisodeIdentity

    def __len__(self) -> int:
        return int(self.support.shape[0])

    @property
    def ways(self) -> int:
        return self.identity.ways

    @property
    def shots(self) -> int:
        return self.identity.shots

    @property
    def queries(self) -> int:
        return self.identity.queries

    @classmethod
    def from_tensors(cls, support: Tensor, query: Tensor, ways: int) -> Episode:
        """Episodes from class-major tensors alone, e.g. to try an algorithm on synthetic data.

        Labels are those the data module gives (``0…0 1…1 …``); the identity names classes ``0..ways-1``,
        sample index 0 everywhere and episode ids ``0..B-1``, so it does not rebuild the episodes from a dataset.

        Args:
            support: ``[B, ways * shots, ...]`` support samples, class-major.
            query: ``[B, ways * queries, ...]`` query samples, class-major.
            ways: classes per episode.

        Raises:
            ValueError: if a sample count does not divide by ``ways`` or the batch sizes differ.

        Example::

            >>> batch = Episode.from_tensors(torch.zeros(2, 5, 1, 8, 8), torch.zeros(2, 15, 1, 8, 8), ways=5)
            >>> (len(batch), batch.ways, batch.shots, batch.queries), batch.query_labels[0].tolist()[:4]
            ((2, 5, 1, 3), [0, 0, 0, 1])
        """
        episodes = support.shape[0]
        if query.shape[0] != episodes or support.shape[1] % ways or query.shape[1] % ways:
            raise ValueError(
                f"support {tuple(support.shape)} and query {tuple(query.shape)} must hold the same number of episodes "
                f"and a multiple of ways={ways} samples each"
            )
        shots, queries = support.shape[1] // ways, query.shape[1] // ways
        identity = EpisodeIdentity(
            torch.arange(ways).repeat(episodes, 1),
            torch.zeros(episodes, ways, shots, dtype=torch.long),
            torch.zeros(episodes, ways, queries, dtype=torch.long),
            torch.arange(episodes),
        )
        device = support.device
        return cls(
            support,
            episode_labels(episodes, ways, shots, device),
            query,
            episode_labels(episodes, ways, queries, device),
            identity,
        )

    def pin_memory(self) -> Episode:
        """Called by ``DataLoader(pin_memory=True)`` for faster, non-blocking host-to-device copies."""
        return Episode(
            self.support.pin_memory(),
            self.support_labels.pin_memory(),
            self.query.pin_memory(),
            self.query_labels.pin_memory(),
            self.identity.pin_memory(),
        )

    def __getitem__(self, index: slice | Tensor | int) -> Episode:
        if isinstance(index, int):
            index = slice(index, index + 1)
        return Episode(
            self.support[index],
            self.support_labels[index],
            self.query[index],
            self.query_labels[index],
            self.identity[index],
        )


def episode_labels(batch: int, ways: int, per_class: int, device: torch.device | None = None) -> Tensor:
    """Class-major labels ``[batch, ways * per_class]``: ``0…0 1…1 …`` (each repeated ``per_class`` times)."""
    return torch.arange(ways, device=device).repeat_interleave(per_class).repeat(batch, 1)

"""A soft nearest-neighbour few-shot classifier: the complete example of the guide "Your own
algorithm" (docs/guides/own-algorithm.md)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodicModule, check_min
from lightning_episodes.algorithms.functional import negative_squared_distances
from lightning_episodes.data.episode import Episode


class NearestNeighbour(EpisodicModule):
    """Scores each class of an episode by how near its nearest support samples are to the query: the soft
    maximum ``temperature · log Σ_s exp(-‖q − s‖² / temperature)`` over the class's support samples ``s``.

    Args:
        temperature: softness of the maximum (> 0; towards 0 it becomes the 1-nearest-neighbour rule).
        **kwargs: the backbone, optimiser and evaluation arguments of :class:`EpisodicModule`.

    Raises:
        ValueError: on a non-positive ``temperature``, or as :class:`EpisodicModule`.
    """

    def __init__(self, temperature: float = 1.0, **kwargs: Any) -> None:
        check_min("temperature", temperature, 0, inclusive=False)
        super().__init__(**kwargs)
        self.temperature = temperature

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        n_support = batch.support.shape[1]
        features = self.backbone(torch.cat([batch.support, batch.query], 1))
        scores = negative_squared_distances(features[:, n_support:], features[:, :n_support])  # [B, Q, ways·shots]
        per_class = scores.unflatten(2, (batch.ways, -1)) / self.temperature  # support is class-major
        return self.temperature * per_class.logsumexp(-1)

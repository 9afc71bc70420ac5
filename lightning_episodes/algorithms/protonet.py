"""Prototypical Networks with Euclidean or scaled-cosine similarity."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodicModule, check_choice, check_min
from lightning_episodes.algorithms.functional import negative_squared_distances, prototypes, scaled_cosine
from lightning_episodes.data.episode import Episode


class ProtoNet(EpisodicModule):
    """Prototypical Networks (Snell et al., NeurIPS 2017).

    Each class's prototype is the mean embedding of its support samples; queries are classified by
    negative squared Euclidean distance to the prototypes, or by cosine similarity scaled by a learnable
    scalar (Gidaris & Komodakis, CVPR 2018; Chen et al., ICLR 2019). Support and query images of an
    episode are embedded together, with batch-norm statistics per episode.

    Args:
        distance: ``euclidean`` (squared) or ``cosine``.
        cosine_scale: initial value of the learnable cosine scale.
        **kwargs: the backbone, optimiser and evaluation arguments of :class:`EpisodicModule`.

    Raises:
        ValueError: on an unknown ``distance``, a non-positive ``cosine_scale``, or as :class:`EpisodicModule`.
    """

    def __init__(
        self, distance: Literal["euclidean", "cosine"] = "euclidean", cosine_scale: float = 10.0, **kwargs: Any
    ) -> None:
        check_choice("distance", distance, ("euclidean", "cosine"))
        check_min("cosine_scale", cosine_scale, 0, inclusive=False)
        super().__init__(**kwargs)
        self.distance = distance
        # the scale only exists (and receives gradients, as DDP requires) for the cosine variant
        self.scale = nn.Parameter(torch.tensor(float(cosine_scale))) if distance == "cosine" else None

    def logits(self, support: Tensor, query: Tensor, ways: int) -> Tensor:
        """Query logits ``[B, Q, ways]`` from support ``[B, ways * shots, D]`` and query ``[B, Q, D]`` features."""
        protos = prototypes(support, ways)
        if self.scale is None:
            return negative_squared_distances(query, protos)
        return scaled_cosine(query, protos, self.scale)

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        n_support = batch.support.shape[1]
        features = self.backbone(torch.cat([batch.support, batch.query], 1))
        return self.logits(features[:, :n_support], features[:, n_support:], batch.ways)

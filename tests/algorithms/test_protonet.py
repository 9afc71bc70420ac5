"""ProtoNet's per-episode losses against hand computations (its contract: ``test_contract.py``)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_episodes import ProtoNet
from lightning_episodes.data.episode import Episode, EpisodeIdentity, episode_labels
from tests.algorithms.builders import Flatten


def _episode(support: list[list[float]], query: list[list[float]], ways: int) -> Episode:
    s = torch.tensor(support, dtype=torch.float32).view(1, len(support), 1, 1, -1)
    q = torch.tensor(query, dtype=torch.float32).view(1, len(query), 1, 1, -1)
    shots, queries = len(support) // ways, len(query) // ways
    identity = EpisodeIdentity(
        classes=torch.arange(ways)[None],
        support_indices=torch.zeros(1, ways, shots, dtype=torch.long),
        query_indices=torch.zeros(1, ways, queries, dtype=torch.long),
        episode_ids=torch.zeros(1, dtype=torch.long),
    )
    return Episode(s, episode_labels(1, ways, shots), q, episode_labels(1, ways, queries), identity)


def test_euclidean_loss_matches_hand_computation() -> None:
    model = ProtoNet(image_size=16)
    model.backbone = Flatten()
    # 2-way 2-shot: prototypes (0, 0) and (2, 0); queries (0.5, 0) label 0 and (1.5, 1) label 1
    episode = _episode([[-1, 0], [1, 0], [2, 1], [2, -1]], [[0.5, 0], [1.5, 1]], ways=2)
    out = model.episode_losses(episode)
    # query 1: squared distances 0.25 and 2.25 -> CE = log(1 + e^{-2})
    # query 2: squared distances 3.25 and 1.25 -> CE = log(1 + e^{-2})
    expected = math.log1p(math.exp(-2.0))
    assert out.losses.item() == pytest.approx(expected, rel=1e-6)
    assert out.accuracies.item() == 1.0


def test_cosine_loss_matches_hand_computation() -> None:
    model = ProtoNet(image_size=16, distance="cosine", cosine_scale=10.0)
    model.backbone = Flatten()
    # prototypes (1, 0) and (0, 1); query (1, 1) label 1: cosines 1/sqrt2 for both -> CE = log 2
    # query (3, 1) label 0: cosines 3/sqrt10 and 1/sqrt10
    episode = _episode([[1, 0], [0, 1]], [[3, 1], [1, 1]], ways=2)
    out = model.episode_losses(episode)
    gap = 10 * (3 - 1) / math.sqrt(10)
    expected = (math.log1p(math.exp(-gap)) + math.log(2)) / 2
    assert out.losses.item() == pytest.approx(expected, rel=1e-6)
    assert model.scale is not None
    assert model.scale.requires_grad

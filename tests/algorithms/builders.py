"""Small builders the algorithm tests share: synthetic episodes, an identity backbone, gradients."""

from __future__ import annotations

import torch
from torch import nn

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.data.episode import Episode

HIDDEN = 16  # a narrow conv4 keeps the float64 second-order comparisons fast


class Flatten(nn.Module):
    """Identity backbone: the features are the pixels, so distances can be computed by hand."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2)


def random_episodes(episodes: int = 2, ways: int = 5, dtype: torch.dtype = torch.float64) -> Episode:
    """1-shot, 3-query episodes of random 16×16 images with class-major labels (as the data module yields)."""
    shots, queries = 1, 3
    g = torch.Generator().manual_seed(0)
    support = torch.randn(episodes, ways * shots, 1, 16, 16, generator=g, dtype=dtype)
    query = torch.randn(episodes, ways * queries, 1, 16, 16, generator=g, dtype=dtype)
    return Episode.from_tensors(support, query, ways)


def feature_episodes(support: torch.Tensor, query: torch.Tensor, ways: int) -> Episode:
    """Episodes ``[B, N, D]`` of class-major features, as images ``[B, N, 1, 1, D]``."""
    return Episode.from_tensors(support[:, :, None, None], query[:, :, None, None], ways)


def our_gradients(model: EpisodicModule, batch: Episode) -> dict[str, torch.Tensor]:
    """The gradient of the mean episode loss (the base's loss when every weight is 1), by parameter name."""
    model.zero_grad()
    model.episode_losses(batch).losses.mean().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

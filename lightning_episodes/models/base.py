"""The backbone contract: a batch of episodes' images in, one feature vector per image out."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from lightning_episodes.models.batchnorm import deferred_running_stats
from lightning_episodes.models.devices import on_cpu


class EpisodicBackbone(nn.Module, ABC):
    """Base class of the backbones: maps images `[B, N, C, H, W]` to features `[B, N, D]`.

    `B` is the number of episodes and `N` the number of images per episode. Subclasses implement
    `embed` on the images stacked as `[B * N, C, H, W]`, passing `episodes=B` to their
    `EpisodicBatchNorm2d` layers so that batch statistics stay per episode.

    Attributes:
        min_image_size: The smallest image side (pixels) the backbone's pooling accepts.
        channels_last: Whether `embed` receives its images `channels_last` (converted here, where they are
            flattened, unless they already are): set with the weights' layout by an algorithm's
            `channels_last=True` (`EpisodicModule.use_channels_last`). Default: False.
    """

    min_image_size: int = 1
    channels_last: bool = False

    def forward(self, images: Tensor) -> Tensor:
        """Embed the images of a batch of episodes.

        Args:
            images: `[B, N, C, H, W]`, or `[M, C, H, W]` for a single episode.

        Returns:
            Features `[B, N, D]`, or `[M, D]` for a single episode.

        Raises:
            ValueError: If `images` is neither 4-D nor 5-D.
        """
        if images.dim() not in (4, 5):
            raise ValueError(f"expected images [B, N, C, H, W] or [M, C, H, W], got {tuple(images.shape)}")
        if images.dim() == 4:
            return self.embed(self._layout(images), 1)
        episodes, size = images.shape[:2]
        if episodes > 1 and on_cpu(images) and self.embeds_episodes_apart():
            # On a CPU, one episode at a time: its activations stay in the caches and every batch norm runs its fused
            # kernel on one contiguous block, in either layout and precision (benchmarks/batchnorm.py: as fast as a
            # plain per-episode loop, up to 2.7x the batched forward); a training batch norm updates its running
            # statistics once for the batch, in its order, as the batched forward does
            with deferred_running_stats(self):
                return torch.stack([self.embed(self._layout(episode), 1) for episode in images])
        return self.embed(self._layout(images.flatten(0, 1)), episodes).unflatten(0, (episodes, size))

    def _layout(self, flat: Tensor) -> Tensor:
        """``[M, C, H, W]`` images in the layout ``embed`` receives."""
        if self.channels_last:
            # here, not in the data: the algorithms' torch.cat of support and query gives a contiguous tensor
            return flat.contiguous(memory_format=torch.channels_last)  # no copy if it already is
        return flat

    def embeds_episodes_apart(self) -> bool:
        """Whether embedding the episodes one at a time is the computation of embedding them together: no layer mixes
        episodes (statistics over the whole batch) or, in training, draws random numbers or counts its forwards (the
        library's per-episode batch norm does none of these). Then :meth:`forward`, on a CPU, embeds them one at a
        time: the same features and running statistics up to float rounding (bit for bit without autograd and
        without a training batch norm). The base class cannot tell (``False``)."""
        return False

    @abstractmethod
    def embed(self, images: Tensor, episodes: int) -> Tensor:
        """Embed `episodes` equal-sized episodes stacked as `[B * N, C, H, W]` into `[B * N, D]`."""


def check_positive(**values: int) -> None:
    """Raise a `ValueError` naming the first argument that is not a positive integer."""
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")

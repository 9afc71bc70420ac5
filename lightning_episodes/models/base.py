"""The backbone contract: a batch of episodes' images in, one feature vector per image out."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn


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
        flat = images.flatten(0, 1) if images.dim() == 5 else images
        if self.channels_last:
            # here, not in the data: the algorithms' torch.cat of support and query gives a contiguous tensor
            flat = flat.contiguous(memory_format=torch.channels_last)  # no copy if it already is
        if images.dim() == 4:
            return self.embed(flat, 1)
        episodes, size = images.shape[:2]
        return self.embed(flat, episodes).unflatten(0, (episodes, size))

    @abstractmethod
    def embed(self, images: Tensor, episodes: int) -> Tensor:
        """Embed `episodes` equal-sized episodes stacked as `[B * N, C, H, W]` into `[B * N, D]`."""


def check_positive(**values: int) -> None:
    """Raise a `ValueError` naming the first argument that is not a positive integer."""
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")

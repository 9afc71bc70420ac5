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
        if images.dim() == 4:
            return self.embed(self._layout(images), 1)
        episodes, size = images.shape[:2]
        # channels_last is left out: its per-episode batch norm composes other kernels than one episode's fused one
        contiguous_cpu = images.device.type == "cpu" and not self.channels_last
        if episodes > 1 and contiguous_cpu and not torch.is_grad_enabled() and self.embeds_episodes_apart():
            # one episode's activations stay in the CPU's caches: the same numbers, up to 1.8x sooner for small images
            # (benchmarks/episode_chunks.py); with autograd the batch's weight gradients would sum in another order
            return torch.stack([self.embed(episode, 1) for episode in images])
        return self.embed(self._layout(images.flatten(0, 1)), episodes).unflatten(0, (episodes, size))

    def _layout(self, flat: Tensor) -> Tensor:
        """``[M, C, H, W]`` images in the layout ``embed`` receives."""
        if self.channels_last:
            # here, not in the data: the algorithms' torch.cat of support and query gives a contiguous tensor
            return flat.contiguous(memory_format=torch.channels_last)  # no copy if it already is
        return flat

    def embeds_episodes_apart(self) -> bool:
        """Whether embedding the episodes one at a time gives the very numbers that embedding them together does:
        no layer mixes episodes (batch statistics over the whole batch), updates a buffer or draws random numbers.
        Then :meth:`forward`, on a CPU, without autograd and in the default memory layout, embeds them one at a
        time. The base class cannot tell (``False``); the library's backbones can (:func:`no_layer_in_training`)."""
        return False

    @abstractmethod
    def embed(self, images: Tensor, episodes: int) -> Tensor:
        """Embed `episodes` equal-sized episodes stacked as `[B * N, C, H, W]` into `[B * N, D]`."""


def check_positive(**values: int) -> None:
    """Raise a `ValueError` naming the first argument that is not a positive integer."""
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")


def no_layer_in_training(module: nn.Module, kinds: tuple[type[nn.Module], ...]) -> bool:
    """Whether no layer of ``module`` of one of ``kinds`` (the layers that, training, keep per-batch state or draw
    random numbers: batch norms, dropouts) is in training mode."""
    return not any(layer.training for layer in module.modules() if isinstance(layer, kinds))

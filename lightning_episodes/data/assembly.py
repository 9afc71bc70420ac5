"""Turning episode identities into normalised image tensors in one vectorised gather."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lightning_episodes.data.augment import RandomShiftFlip
from lightning_episodes.data.episode import Episode, EpisodeIdentity, episode_labels


class EpisodeAssembler(nn.Module):
    """Gathers the images of a batch of episodes with one ``index_select`` and normalises them.

    The uint8 image store is a (non-persistent) buffer, so moving the assembler to a GPU moves the
    whole dataset there and episodes are then assembled on the device.

    Args:
        images: uint8 ``[N, C, H, W]`` store.
        mean: per-channel mean of ``images / 255``.
        std: per-channel standard deviation of ``images / 255``.
        augment: optional augmentation of the normalised images (used when called with ``augment=True``).
    """

    images: Tensor
    scale: Tensor
    shift: Tensor

    def __init__(
        self,
        images: Tensor,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        augment: RandomShiftFlip | None = None,
    ) -> None:
        super().__init__()
        std_t = torch.tensor(std, dtype=torch.float32)
        # x_normalised = (x / 255 - mean) / std = x * scale + shift
        self.register_buffer("images", images, persistent=False)
        self.register_buffer("scale", (1.0 / (255.0 * std_t)).view(-1, 1, 1), persistent=False)
        self.register_buffer("shift", (-torch.tensor(mean) / std_t).view(-1, 1, 1), persistent=False)
        self.augment = augment

    def gather(self, identity: EpisodeIdentity) -> Episode:
        """The episodes' raw uint8 images (one ``index_select``), on the device of the image store.

        Batches travel as uint8 (4x fewer bytes than float32) and are normalised on the device.
        """
        batch, ways, shots, queries = len(identity), identity.ways, identity.shots, identity.queries
        device = self.images.device
        rows = torch.cat([identity.support_indices.flatten(1), identity.query_indices.flatten(1)], 1)
        x = self.images.index_select(0, rows.flatten().to(device))
        x = x.view(batch, ways * (shots + queries), *x.shape[1:])
        identity = EpisodeIdentity(**{k: t.to(device) for k, t in vars(identity).items()})
        return Episode(
            support=x[:, : ways * shots],
            support_labels=episode_labels(batch, ways, shots, device),
            query=x[:, ways * shots :],
            query_labels=episode_labels(batch, ways, queries, device),
            identity=identity,
        )

    def normalize(self, episode: Episode, augment: bool = False, dtype: torch.dtype = torch.float32) -> Episode:
        """Convert a uint8 episode batch to normalised ``dtype`` images on its device, optionally augmented."""
        if episode.support.is_floating_point():
            return episode
        device = episode.support.device
        scale, shift = self.scale.to(device, dtype), self.shift.to(device, dtype)
        # dtype conversion and normalisation fused in one addcmul per set
        support, query = (torch.addcmul(shift, x.to(dtype), scale) for x in (episode.support, episode.query))
        if augment and self.augment is not None:
            support = self.augment(support, episode.identity.episode_ids)
            query = self.augment(query, episode.identity.episode_ids + (1 << 40))
        return Episode(support, episode.support_labels, query, episode.query_labels, episode.identity)

    def forward(self, identity: EpisodeIdentity, augment: bool = False, dtype: torch.dtype = torch.float32) -> Episode:
        """Gather and normalise: a ready-to-use float batch."""
        return self.normalize(self.gather(identity), augment, dtype)

"""Turning episode identities into normalised image tensors in one vectorised gather."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import get_worker_info

from lightning_episodes.data.augment import RandomShiftFlip
from lightning_episodes.data.episode import Episode, EpisodeIdentity, episode_labels

_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _references(tensor: Tensor) -> int:
    """Strong references to ``tensor``'s storage (tensors and views of it, autograd's saved tensors)."""
    assert _use_count is not None
    return int(_use_count(tensor.untyped_storage()._cdata))


class BufferPool:
    """Reuses CPU output tensors that nothing outside the pool references any more.

    A fresh 34 MB batch (16 Mini-ImageNet episodes) costs more in page faults than the copy into it (the
    allocator returns such blocks to the kernel and takes them back zeroed), so the gather and the float
    conversion write into buffers kept here. A buffer is handed out again only when no tensor outside
    the pool shares its storage (the episode, its views and autograd's saved inputs are all gone), so a
    batch that a prefetcher, a callback or the user still holds is never overwritten. Never reused:
    buffers in shared memory (sent from a dataloader worker, whose receiver holds no reference the pool
    can see), buffers in dataloader workers at all, and inference tensors outside inference mode (or the
    reverse). Without the reference count (a private torch function), every call allocates.

    Args:
        capacity: buffers kept at most (least recently used free ones are dropped first).
    """

    def __init__(self, capacity: int = 6) -> None:
        self.capacity = capacity
        self._buffers: list[tuple[Tensor, int]] = []  # (buffer, its reference count while free)

    def empty(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        memory_format: torch.memory_format = torch.contiguous_format,
    ) -> Tensor:
        """An uninitialised tensor, reused when a kept one of this kind is free (CPU only)."""
        if device.type != "cpu" or _use_count is None or get_worker_info() is not None:
            return torch.empty(shape, dtype=dtype, device=device, memory_format=memory_format)
        inference = torch.is_inference_mode_enabled()
        self._buffers = [(b, free) for b, free in self._buffers if not b.is_shared()]
        for i, (buffer, free) in enumerate(self._buffers):
            if (
                buffer.shape == shape
                and buffer.dtype == dtype
                and buffer.is_contiguous(memory_format=memory_format)
                and buffer.is_inference() == inference
                and _references(buffer) <= free
            ):
                self._buffers.append(self._buffers.pop(i))  # most recently used last
                return buffer[...]
        buffer = torch.empty(shape, dtype=dtype, memory_format=memory_format)
        if len(self._buffers) >= self.capacity:
            idle = [i for i, (b, free) in enumerate(self._buffers) if _references(b) <= free]
            if not idle:
                return buffer  # every kept buffer is in use: this one is not kept
            self._buffers.pop(idle[0])
        self._buffers.append((buffer, _references(buffer)))
        # a view, never the kept tensor itself: holding the kept tensor object would not count as a reference
        return buffer[...]

    def clear(self) -> None:
        self._buffers = []


def _memory_format(x: Tensor) -> torch.memory_format | None:
    """The layout to give a copy of ``x`` from the pool; ``None``: no pooled layout matches."""
    if x.is_contiguous():
        return torch.contiguous_format
    # a channels_last store gives channels_last episodes (every image is still one contiguous block)
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return None


def _whole(support: Tensor, query: Tensor) -> Tensor | None:
    """The one buffer that holds ``support`` then ``query`` back to back (as :meth:`gather` makes them)."""
    base = support._base
    if base is None or query._base is not base or support.data_ptr() != base.data_ptr():
        return None
    if base.numel() != support.numel() + query.numel() or query.data_ptr() != base.data_ptr() + support.nbytes:
        return None
    if not (support.is_contiguous() and query.is_contiguous()):
        return None
    return base


class EpisodeAssembler(nn.Module):
    """Gathers the images of a batch of episodes with one ``index_select`` and normalises them.

    The uint8 image store is a (non-persistent) buffer, so moving the assembler to a GPU moves the
    whole dataset there and episodes are then assembled on the device. On the CPU, outputs are written
    into reused buffers (see :class:`BufferPool`); a batch that is still referenced is never overwritten.

    A ``channels_last`` image store (``images.contiguous(memory_format=torch.channels_last)``) gives
    episodes whose images are ``channels_last`` too (``episode.support.flatten(0, 1)`` is then a
    ``channels_last`` 4-d tensor, ready for a ``channels_last`` model).

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
        self.pool = BufferPool()

    def __getstate__(self) -> dict[str, Any]:
        # a pickled assembler (spawned dataloader workers) starts with an empty pool
        state = super().__getstate__()
        state["pool"] = BufferPool(self.pool.capacity)
        return state

    def gather(self, identity: EpisodeIdentity) -> Episode:
        """The episodes' raw uint8 images (one ``index_select``), on the device of the image store.

        Batches travel as uint8 (4x fewer bytes than float32) and are normalised on the device. The
        support images of all episodes come first in the output buffer, then the query images, so that
        ``support`` and ``query`` are both contiguous (a model can flatten them without a copy).
        """
        batch, ways, shots, queries = len(identity), identity.ways, identity.shots, identity.queries
        device = self.images.device
        rows = torch.cat([identity.support_indices.flatten(), identity.query_indices.flatten()]).to(device)
        memory_format = _memory_format(self.images) or torch.contiguous_format
        x = self.pool.empty((len(rows), *self.images.shape[1:]), self.images.dtype, device, memory_format)
        torch.index_select(self.images, 0, rows, out=x)
        split = batch * ways * shots
        identity = EpisodeIdentity(**{k: t.to(device) for k, t in vars(identity).items()})
        return Episode(
            support=x[:split].view(batch, ways * shots, *x.shape[1:]),
            support_labels=episode_labels(batch, ways, shots, device),
            query=x[split:].view(batch, ways * queries, *x.shape[1:]),
            query_labels=episode_labels(batch, ways, queries, device),
            identity=identity,
        )

    def normalize(self, episode: Episode, augment: bool = False, dtype: torch.dtype = torch.float32) -> Episode:
        """Convert a uint8 episode batch to normalised ``dtype`` images on its device, optionally augmented.

        The output keeps the input's memory layout (``channels_last`` stays ``channels_last``).
        """
        if episode.support.is_floating_point():
            return episode
        device = episode.support.device
        scale, shift = self.scale.to(device, dtype), self.shift.to(device, dtype)
        whole = _whole(episode.support, episode.query)
        if whole is not None:  # one conversion over the gather's buffer, then the same two views
            out = self._convert(whole, scale, shift, dtype)
            split = episode.support.shape[0] * episode.support.shape[1]
            support, query = out[:split].view(episode.support.shape), out[split:].view(episode.query.shape)
        else:
            support, query = (self._convert(x, scale, shift, dtype) for x in (episode.support, episode.query))
        if augment and self.augment is not None:
            support = self.augment(support, episode.identity.episode_ids)
            query = self.augment(query, episode.identity.episode_ids + (1 << 40))
        return Episode(support, episode.support_labels, query, episode.query_labels, episode.identity)

    def _convert(self, x: Tensor, scale: Tensor, shift: Tensor, dtype: torch.dtype) -> Tensor:
        # three in-place passes over a reused buffer beat one fused op into fresh memory (page faults)
        memory_format = _memory_format(x)
        if memory_format is None:
            out = torch.empty_like(x, dtype=dtype)  # keeps x's strides (e.g. channels_last 5-d views)
        else:
            out = self.pool.empty(tuple(x.shape), dtype, x.device, memory_format)
        return out.copy_(x).mul_(scale).add_(shift)

    def forward(self, identity: EpisodeIdentity, augment: bool = False, dtype: torch.dtype = torch.float32) -> Episode:
        """Gather and normalise: a ready-to-use float batch."""
        return self.normalize(self.gather(identity), augment, dtype)

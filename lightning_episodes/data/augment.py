"""Optional training-time augmentation (off by default: the paper reports none)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_episodes.data.sampler import mix_seed

_AUGMENT_STREAM = 3


class RandomShiftFlip:
    """Random translation (zero padded, up to ``padding`` pixels) and optional horizontal flip per image.

    Randomness is a pure function of ``(seed, episode id)``, so an augmented episode is reproducible
    and a resumed run sees the same augmentations.

    Args:
        seed: the data seed.
        padding: the largest shift in pixels.
        flip: also flip each image horizontally with probability 1/2 (leave off for characters).
    """

    def __init__(self, seed: int = 0, padding: int = 4, flip: bool = False) -> None:
        if padding < 0:
            raise ValueError(f"padding must be >= 0, got {padding}")
        self.seed, self.padding, self.flip = seed, padding, flip

    def __call__(self, x: Tensor, episode_ids: Tensor) -> Tensor:
        """Augment ``x`` of shape ``[B, N, C, H, W]``; ``episode_ids`` ``[B]`` seed each episode."""
        batch, n, _, h, w = x.shape
        p = self.padding
        draws = []
        for episode in episode_ids.tolist():
            g = torch.Generator().manual_seed(mix_seed(self.seed, _AUGMENT_STREAM, episode))
            draws.append(torch.randint(0, 2 * p + 1, (n, 3), generator=g))
        dy, dx, flips = torch.stack(draws).to(x.device).flatten(0, 1).unbind(1)
        padded = F.pad(x.flatten(0, 1), (p, p, p, p))
        rows = (torch.arange(h, device=x.device) + dy[:, None])[:, None, :, None]
        cols = torch.arange(w, device=x.device) + dx[:, None]
        if self.flip:
            cols = torch.where((flips % 2 == 1)[:, None], cols.flip(1), cols)
        c = x.shape[2]
        out = padded.gather(2, rows.expand(-1, c, -1, padded.shape[3]))
        out = out.gather(3, cols[:, None, None, :].expand(-1, c, h, -1))
        return out.view(batch, n, *out.shape[1:])

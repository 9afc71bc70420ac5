"""DropBlock with the linear drop-rate warm-up of MetaOptNet and FEAT's ResNet-12."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_episodes.models.base import check_positive


def dropped_blocks(seeds: Tensor, block_size: int) -> Tensor:
    """Expand block seeds `[M, C, H - b + 1, W - b + 1]` into the dropped area `[M, C, H, W]` (1 = drop).

    A seed at (i, j) drops the block [i, i + b) × [j, j + b), as Lee et al. (2019)'s reference code
    (copied by FEAT and learn2learn) intends; a max-pool over the zero-padded seeds does it in one kernel.
    That code tiles its list of seeds and its list of b² offsets and pairs them position by position, so
    when the number of seeds shares a factor with b² some blocks come out incomplete; here every block
    is whole, as in Ghiasi et al. (2018).
    """
    return F.max_pool2d(F.pad(seeds, (block_size - 1,) * 4), kernel_size=block_size, stride=1)


class DropBlock(nn.Module):
    """Drops square blocks of feature maps (Ghiasi et al., 2018), scheduled as in MetaOptNet and FEAT.

    As in the ResNet-12 of Lee et al. (2019), which FEAT (Ye et al., 2020) and learn2learn reuse: the
    keep probability falls linearly from 1 to `1 - drop_rate` over the first `schedule_steps` training
    forwards, `keep = max(1 - drop_rate * t / schedule_steps, 1 - drop_rate)` with `t` the number of
    training forwards so far (this one included), and block seeds are drawn with probability
    `gamma = (1 - keep) / b² · (H·W) / ((H - b + 1)(W - b + 1))`. Those codebases use
    `schedule_steps = 40000` (their `20 * 2000`); FEAT forwards once per training step, MetaOptNet twice
    (support and query). Two deliberate differences: the counter only advances in training (theirs
    also counts evaluation forwards, and evaluation must not change the model), and the
    `numel / kept` rescaling is computed per episode (their batch is one episode), so an episode's
    scale does not depend on its batch-mates. The block side is clipped to the feature map. The
    counter is saved in the state dict.

    References:
        Ghiasi et al. 2018, "DropBlock: A regularization method for convolutional networks", NeurIPS.
        Lee et al. 2019, "Meta-Learning with Differentiable Convex Optimization", CVPR.
        Ye et al. 2020, "Few-Shot Learning via Embedding Adaptation with Set-to-Set Functions", CVPR.

    Args:
        drop_rate: Final fraction of dropped activations, in [0, 1). Default: 0.1.
        block_size: Side of the dropped blocks, in feature-map pixels. Default: 5.
        schedule_steps: Training forwards over which the drop rate ramps up; 0 disables the ramp.
            Default: 40000.

    Raises:
        ValueError: If `drop_rate` is outside [0, 1), `block_size` is not positive or
            `schedule_steps` is negative.
    """

    def __init__(self, drop_rate: float = 0.1, block_size: int = 5, schedule_steps: int = 40000) -> None:
        super().__init__()
        if not 0.0 <= drop_rate < 1.0:
            raise ValueError(f"drop_rate must be in [0, 1), got {drop_rate}")
        check_positive(block_size=block_size)
        if schedule_steps < 0:
            raise ValueError(f"schedule_steps must be non-negative, got {schedule_steps}")
        self.drop_rate = drop_rate
        self.block_size = block_size
        self.schedule_steps = schedule_steps
        # A Python int (saved through the extra state) so that reading it never synchronises a GPU.
        self.steps = 0

    def keep_rate(self) -> float:
        """The keep probability of the current training forward (`steps` already counts it)."""
        if self.schedule_steps == 0:
            return 1.0 - self.drop_rate
        return max(1.0 - self.drop_rate * self.steps / self.schedule_steps, 1.0 - self.drop_rate)

    def forward(self, x: Tensor, episodes: int = 1) -> Tensor:
        """Drop blocks of `x` (`[B * N, C, H, W]`, `episodes` = B) in training; identity in evaluation."""
        if not self.training or self.drop_rate == 0.0:
            return x
        self.steps += 1
        height, width = x.shape[-2:]
        block = min(self.block_size, height, width)
        valid = (height - block + 1) * (width - block + 1)
        gamma = (1.0 - self.keep_rate()) / block**2 * (height * width) / valid
        seeds = x.new_empty(*x.shape[:2], height - block + 1, width - block + 1).bernoulli_(min(gamma, 1.0))
        keep = (1.0 - dropped_blocks(seeds, block)).unflatten(0, (episodes, -1))
        kept = keep.sum(dim=(1, 2, 3, 4), keepdim=True).clamp_min(1.0)
        scale = keep * (keep[0].numel() / kept)
        return x * scale.flatten(0, 1)

    def get_extra_state(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])

    def extra_repr(self) -> str:
        return (
            f"drop_rate={self.drop_rate}, block_size={self.block_size}, "
            f"schedule_steps={self.schedule_steps}, steps={self.steps}"
        )

"""ResNet-12: the residual backbone of TADAM and MetaOptNet (and FEAT's "wide" variant)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_episodes.models.base import EpisodicBackbone, check_positive
from lightning_episodes.models.batchnorm import EpisodicBatchNorm2d
from lightning_episodes.models.dropblock import DropBlock

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "leaky_relu": lambda: nn.LeakyReLU(0.1),  # MetaOptNet, FEAT and learn2learn
    "swish": nn.SiLU,  # TADAM's swish-1
}
"""Activations by name."""

TADAM_WIDTHS = (64, 128, 256, 512)
"""Oreshkin et al. (2018)'s widths, the paper's ResNet-12."""

WIDE_WIDTHS = (64, 160, 320, 640)
"""Lee et al. (2019)'s widths, used by FEAT."""


def _conv3x3(in_channels: int, out_channels: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)


class ResidualBlock(nn.Module):
    """Three conv 3×3 + batch norm layers with a conv 1×1 + batch norm shortcut, then a 2×2 max-pool.

    `conv-bn-act-conv-bn-act-conv-bn (+ shortcut) -act-maxpool`, then DropBlock or dropout if asked.

    Args:
        in_channels: Input channels.
        out_channels: Output channels of all three convolutions and the shortcut.
        activation: A key of `ACTIVATIONS`.
        drop_rate: Dropout probability after the block, unless `dropblock` is given.
        dropblock: Replaces dropout by this DropBlock.
        track_running_stats: Whether the batch norms keep running statistics.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        activation: str = "relu",
        drop_rate: float = 0.0,
        dropblock: DropBlock | None = None,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()

        def norm() -> EpisodicBatchNorm2d:
            return EpisodicBatchNorm2d(out_channels, track_running_stats=track_running_stats)

        self.conv1, self.bn1 = _conv3x3(in_channels, out_channels), norm()
        self.conv2, self.bn2 = _conv3x3(out_channels, out_channels), norm()
        self.conv3, self.bn3 = _conv3x3(out_channels, out_channels), norm()
        self.shortcut_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)
        self.shortcut_bn = norm()
        self.activation = ACTIVATIONS[activation]()
        self.drop_rate = drop_rate
        self.dropblock = dropblock

    def forward(self, x: Tensor, episodes: int = 1) -> Tensor:
        """Map `[B * N, C, H, W]` to `[B * N, out_channels, H // 2, W // 2]`."""
        out = self.activation(self.bn1(self.conv1(x), episodes))
        out = self.activation(self.bn2(self.conv2(out), episodes))
        out = self.bn3(self.conv3(out), episodes)
        out = self.activation(out + self.shortcut_bn(self.shortcut_conv(x), episodes))
        out = F.max_pool2d(out, kernel_size=2)
        if self.dropblock is not None:
            return self.dropblock(out, episodes)
        return F.dropout(out, p=self.drop_rate, training=self.training) if self.drop_rate > 0 else out


class ResNet12(EpisodicBackbone):
    """The 12-layer residual network of few-shot learning (Mishra et al., 2018; Oreshkin et al., 2018).

    Four `ResidualBlock`s of widths `widths`, each halving the resolution. Defaults give the paper's
    ResNet-12 (Arnold et al., 2021): TADAM's widths 64-128-256-512, ReLU, no dropout. `resnet12_wide`
    gives the variant of Lee et al. (2019) that FEAT uses: 64-160-320-640, LeakyReLU 0.1, dropout 0.1
    after the first two blocks and scheduled DropBlock (block 5) after the last two.

    Features are globally average-pooled by default (`avg_pool=True`: `widths[-1]` dimensions, as in
    learn2learn's `ResNet12Backbone`, MetaOptNet and FEAT, whose `AvgPool2d(5)` is global for 84×84
    images); `avg_pool=False` flattens the final map (512 · 5 · 5 = 12800 dimensions at 84×84).
    Parameters (bias-free convolutions, affine batch norm) and initialisation (Kaiming-normal, fan-out)
    are learn2learn's: `ResNet12Backbone(wider=False)` and `(wider=True)` have exactly as many.

    References:
        Mishra et al. 2018, "A Simple Neural Attentive Meta-Learner", ICLR.
        Oreshkin et al. 2018, "TADAM: Task dependent adaptive metric for improved few-shot learning",
            NeurIPS.
        Lee et al. 2019, "Meta-Learning with Differentiable Convex Optimization", CVPR.

    Args:
        in_channels: Image channels. Default: 3.
        widths: Output channels of the four blocks. Default: (64, 128, 256, 512).
        activation: `"relu"`, `"leaky_relu"` (slope 0.1) or `"swish"`. Default: `"relu"`.
        dropblock: Use DropBlock instead of dropout after the last two blocks. Default: False.
        drop_rate: Dropout rate after each block (DropBlock's final rate in the last two blocks when
            `dropblock`). Default: 0.0.
        dropblock_size: DropBlock's block side, in feature-map pixels. Default: 5.
        dropblock_schedule_steps: Training forwards over which DropBlock's rate ramps up. Default: 40000.
        avg_pool: Average the final feature map over space instead of flattening it. Default: True.
        track_running_stats: Whether batch norm keeps running statistics (False for MAML/ANIL).
            Default: True.

    Raises:
        ValueError: If `widths` does not have four positive entries, `in_channels` or `dropblock_size` is
            not positive, `drop_rate` is outside [0, 1) or `activation` is unknown.
    """

    min_image_size = 16  # four 2×2 max-pools

    def __init__(
        self,
        in_channels: int = 3,
        widths: Sequence[int] = TADAM_WIDTHS,
        activation: str = "relu",
        dropblock: bool = False,
        drop_rate: float = 0.0,
        dropblock_size: int = 5,
        dropblock_schedule_steps: int = 40000,
        avg_pool: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        widths = tuple(widths)
        if len(widths) != 4:
            raise ValueError(f"widths must have 4 entries (one per residual block), got {widths}")
        check_positive(in_channels=in_channels, dropblock_size=dropblock_size)
        check_positive(**{f"widths[{i}]": width for i, width in enumerate(widths)})
        if not 0.0 <= drop_rate < 1.0:
            raise ValueError(f"drop_rate must be in [0, 1), got {drop_rate}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.widths = widths
        self.avg_pool = avg_pool
        blocks = []
        for i, width in enumerate(widths):
            use_dropblock = dropblock and i >= 2 and drop_rate > 0
            blocks.append(
                ResidualBlock(
                    in_channels if i == 0 else widths[i - 1],
                    width,
                    activation=activation,
                    drop_rate=drop_rate,
                    dropblock=DropBlock(drop_rate, dropblock_size, dropblock_schedule_steps) if use_dropblock else None,
                    track_running_stats=track_running_stats,
                )
            )
        self.blocks = nn.ModuleList(blocks)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="leaky_relu")

    def embeds_episodes_apart(self) -> bool:
        """True unless a dropout or DropBlock trains (they draw random numbers; DropBlock also counts forwards)."""
        drops = [
            b for b in self.blocks if isinstance(b, ResidualBlock) and (b.drop_rate > 0 or b.dropblock is not None)
        ]
        return not any(block.training for block in drops)

    def embed(self, images: Tensor, episodes: int) -> Tensor:
        x = images
        for block in self.blocks:
            x = block(x, episodes)
        return x.mean(dim=(2, 3)) if self.avg_pool else x.flatten(1)


def resnet12_wide(in_channels: int = 3, **options: Any) -> ResNet12:
    """FEAT's ResNet-12 (Lee et al., 2019; Ye et al., 2020): 64-160-320-640, LeakyReLU 0.1, DropBlock.

    Dropout 0.1 after the first two blocks, DropBlock (block 5, rate ramped up to 0.1 over 40000
    training forwards) after the last two, average-pooled to 640 dimensions. Any `ResNet12` argument
    in `options` overrides these.

    Args:
        in_channels: Image channels. Default: 3.
        **options: Overrides of the `ResNet12` arguments above.

    Returns:
        The backbone.
    """
    preset: dict[str, Any] = {
        "widths": WIDE_WIDTHS,
        "activation": "leaky_relu",
        "dropblock": True,
        "drop_rate": 0.1,
        "dropblock_size": 5,
        "avg_pool": True,
    }
    return ResNet12(in_channels=in_channels, **(preset | options))

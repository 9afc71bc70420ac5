"""The four-layer convolutional backbone of few-shot learning ("conv4")."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_episodes.models.base import EpisodicBackbone, check_positive
from lightning_episodes.models.batchnorm import EpisodicBatchNorm2d


class ConvBlock(nn.Module):
    """conv 3×3 (padding 1, with bias) → episodic batch norm → ReLU → 2×2 max-pool.

    Initialised as learn2learn's `ConvBlock`: Xavier-uniform convolution weights, zero biases and
    batch-norm scales drawn from U(0, 1).

    Args:
        in_channels: Input channels.
        out_channels: Output channels.
        track_running_stats: Whether the batch norm keeps running statistics.
        conv_bias: Whether the convolution has a bias.
    """

    def __init__(
        self, in_channels: int, out_channels: int, track_running_stats: bool = True, conv_bias: bool = True
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=conv_bias)
        self.norm = EpisodicBatchNorm2d(out_channels, track_running_stats=track_running_stats)
        assert self.norm.weight is not None
        nn.init.xavier_uniform_(self.conv.weight, gain=1.0)
        if self.conv.bias is not None:
            nn.init.zeros_(self.conv.bias)
        nn.init.uniform_(self.norm.weight)

    def forward(self, x: Tensor, episodes: int = 1) -> Tensor:
        """Map `[B * N, C, H, W]` to `[B * N, out_channels, H // 2, W // 2]`."""
        return F.max_pool2d(F.relu(self.norm(self.conv(x), episodes)), kernel_size=2)


class Conv4(EpisodicBackbone):
    """The conv4 backbone of Vinyals et al. (2016) and Snell et al. (2017), with flattened output.

    Blocks of conv 3×3 → batch norm → ReLU → 2×2 max-pool, as in Finn et al. (2017) and Ravi &
    Larochelle (2017); the parameterisation and initialisation are those of learn2learn's
    `CNN4Backbone(hidden_size=64, layers=4, channels=in_channels, max_pool=True)`, which the paper
    (Arnold et al., 2021) used: convolutions with bias, affine batch norm with PyTorch's default
    momentum 0.1 and eps 1e-5. Unlike learn2learn, batch-norm statistics are per episode and every
    block pools by 2 whatever the number of layers (learn2learn pools by `4 // layers`).

    With 84×84 images (Mini-ImageNet) the features have 64 · 5 · 5 = 1600 dimensions.

    References:
        Vinyals et al. 2016, "Matching Networks for One Shot Learning", NeurIPS.
        Snell et al. 2017, "Prototypical Networks for Few-shot Learning", NeurIPS.
        Finn et al. 2017, "Model-Agnostic Meta-Learning for Fast Adaptation of Deep Networks", ICML.

    Args:
        in_channels: Image channels. Default: 3.
        hidden: Channels of every block. Default: 64.
        layers: Number of blocks. Default: 4.
        track_running_stats: Whether batch norm keeps running statistics (False for MAML/ANIL, which
            then always normalise with the episode's own statistics). Default: True.
        conv_bias: Give the convolutions a bias, as learn2learn does. The batch norm that follows
            subtracts every episode's per-channel mean, so in training these biases change no output
            and their gradient is zero up to rounding; Adam rescales that rounding noise into steps of up to its
            learning rate, which is harmless but makes runs differ (e.g. one process against DDP).
            False drops them (4 · hidden fewer parameters). Default: True.

    Raises:
        ValueError: If `in_channels`, `hidden` or `layers` is not positive.

    Example:
        >>> backbone = Conv4(in_channels=3)
        >>> backbone(torch.randn(2, 10, 3, 84, 84)).shape  # 2 episodes of 10 images
        torch.Size([2, 10, 1600])
    """

    def __init__(
        self,
        in_channels: int = 3,
        hidden: int = 64,
        layers: int = 4,
        track_running_stats: bool = True,
        conv_bias: bool = True,
    ) -> None:
        super().__init__()
        check_positive(in_channels=in_channels, hidden=hidden, layers=layers)
        self.min_image_size = 2**layers
        self.blocks = nn.ModuleList(
            ConvBlock(in_channels if i == 0 else hidden, hidden, track_running_stats, conv_bias) for i in range(layers)
        )

    def embeds_episodes_apart(self) -> bool:
        """True: conv4 has no layer that mixes episodes or draws random numbers."""
        return True

    def embed(self, images: Tensor, episodes: int) -> Tensor:
        x = images
        for block in self.blocks:
            x = block(x, episodes)
        return x.flatten(1)

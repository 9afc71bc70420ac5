"""Our backbones against learn2learn's (the paper's implementation): parameters and outputs."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch import nn

from lightning_episodes.models import Conv4, ResNet12, resnet12_wide

l2l_models = pytest.importorskip("learn2learn.vision.models")


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


Renames = list[tuple[str, Any]]


def _renamed(reference: nn.Module, renames: Renames) -> dict[str, torch.Tensor]:
    """`reference`'s state dict with its keys renamed by the regex pairs."""
    state = {}
    for key, value in reference.state_dict().items():
        for pattern, replacement in renames:
            key = re.sub(pattern, replacement, key)
        state[key] = value
    return state


def _load_renamed(ours: nn.Module, reference: nn.Module, renames: Renames) -> None:
    state = _renamed(reference, renames)
    ours.load_state_dict(state, strict=False)
    assert set(state) == {key for key in ours.state_dict() if not key.endswith("_extra_state")}


def _assert_same_state(ours: nn.Module, reference: nn.Module, renames: Renames) -> None:
    """Parameters and running statistics agree (after the same training-mode forward)."""
    for key, value in _renamed(reference, renames).items():
        torch.testing.assert_close(ours.state_dict()[key], value, rtol=0, atol=1e-6, msg=key)


CONV4_RENAMES: Renames = [
    (r"^(\d+)\.normalize\.", r"blocks.\1.norm."),
    (r"^(\d+)\.conv\.", r"blocks.\1.conv."),
]
RESNET_RENAMES: Renames = [
    (r"^layer(\d)\.0\.", lambda m: f"blocks.{int(m.group(1)) - 1}."),
    (r"downsample\.0\.", "shortcut_conv."),
    (r"downsample\.1\.", "shortcut_bn."),
]


@pytest.mark.parametrize("channels", [1, 3])
def test_conv4_matches_cnn4_backbone(channels: int) -> None:
    reference = l2l_models.CNN4Backbone(hidden_size=64, layers=4, channels=channels, max_pool=True)
    ours = Conv4(in_channels=channels)
    assert _count(ours) == _count(reference) == 64 * (9 * channels + 1) + 3 * 64 * (9 * 64 + 1) + 4 * 2 * 64
    _load_renamed(ours, reference, CONV4_RENAMES)
    episode = torch.randn(10, channels, 28, 28)
    torch.testing.assert_close(ours.train()(episode), reference.train()(episode), rtol=1e-5, atol=1e-5)
    _assert_same_state(ours, reference, CONV4_RENAMES)


def _resnet12_count(in_channels: int, widths: tuple[int, ...]) -> int:
    """Hand count: per block 3 conv 3×3 + conv 1×1 shortcut (no bias) + 4 affine batch norms."""
    total, previous = 0, in_channels
    for width in widths:
        total += 9 * previous * width + 18 * width * width + previous * width + 8 * width
        previous = width
    return total


@pytest.mark.parametrize("wider", [False, True])
def test_resnet12_matches_resnet12_backbone(wider: bool) -> None:
    reference = l2l_models.ResNet12Backbone(avg_pool=False, wider=wider, dropblock_dropout=0.0)
    # learn2learn's ResNet-12 always uses LeakyReLU 0.1, whatever its widths.
    ours = resnet12_wide(avg_pool=False, drop_rate=0.0) if wider else ResNet12(activation="leaky_relu", avg_pool=False)
    widths = (64, 160, 320, 640) if wider else (64, 128, 256, 512)
    # Published: 12.4M parameters for the wide ResNet-12 (Lee et al., 2019), about 8M for TADAM's widths.
    assert _count(ours) == _count(reference) == _resnet12_count(3, widths)
    _load_renamed(ours, reference, RESNET_RENAMES)
    episode = torch.randn(4, 3, 16, 16)
    torch.testing.assert_close(ours.train()(episode), reference.train()(episode), rtol=1e-4, atol=1e-5)
    _assert_same_state(ours, reference, RESNET_RENAMES)


def test_block_mask_matches_learn2learn() -> None:
    from learn2learn.vision.models.resnet12 import DropBlock as ReferenceDropBlock

    from lightning_episodes.models.dropblock import dropped_blocks

    generator = torch.Generator().manual_seed(0)
    for block_size in (1, 2, 3, 5):
        # 7 seeds: the reference pairs seed k with offset k mod b² after tiling both lists, which covers
        # every (seed, offset) pair only when the seed count is coprime with b² (see dropblock.py).
        seeds = torch.zeros(2 * 3 * 8 * 9)
        seeds[torch.randperm(seeds.numel(), generator=generator)[:7]] = 1.0
        seeds = seeds.view(2, 3, 8, 9)
        expected = 1 - ReferenceDropBlock(block_size)._compute_block_mask(seeds)
        torch.testing.assert_close(dropped_blocks(seeds, block_size), expected, rtol=0, atol=0)

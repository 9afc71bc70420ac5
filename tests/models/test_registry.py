"""build_backbone, available_backbones, feature_size and their errors."""

from __future__ import annotations

import copy

import pytest
import torch

from lightning_episodes.models import (
    Conv4,
    ResNet12,
    available_backbones,
    build_backbone,
    feature_size,
    register_backbone,
    registry,
)


def test_available_backbones() -> None:
    assert {"conv4", "resnet12", "resnet12-wide"} <= set(available_backbones())


@pytest.mark.parametrize(
    ("name", "options", "image_size", "expected"),
    [
        ("conv4", {}, 84, 64 * 5 * 5),  # Mini-ImageNet: 84 -> 42 -> 21 -> 10 -> 5
        ("conv4", {"hidden": 32}, 28, 32 * 1 * 1),  # 28 -> 14 -> 7 -> 3 -> 1
        ("resnet12", {"widths": (4, 8, 8, 16)}, 84, 16),  # average-pooled
        ("resnet12", {"widths": (4, 8, 8, 16), "avg_pool": False}, 84, 16 * 5 * 5),
        ("resnet12-wide", {"widths": (4, 8, 8, 10)}, 32, 10),
    ],
)
def test_feature_size(name: str, options: dict[str, object], image_size: int, expected: int) -> None:
    backbone = build_backbone(name, in_channels=3, image_size=image_size, **options)
    backbone.train()
    before = copy.deepcopy(backbone.state_dict())
    assert feature_size(backbone, in_channels=3, image_size=image_size) == expected
    assert all(module.training for module in backbone.modules())  # modes restored
    for key, value in backbone.state_dict().items():  # nothing changed, DropBlock counters included
        assert key.endswith("_extra_state") or torch.equal(value, before[key]), key
    features = backbone(torch.randn(2, 3, 3, image_size, image_size))
    assert features.shape == (2, 3, expected)


def test_presets() -> None:
    assert isinstance(build_backbone("conv4", 1, 28), Conv4)
    unbiased = build_backbone("conv4", 1, 28, conv_bias=False)
    full = build_backbone("conv4", 1, 28)
    assert sum(p.numel() for p in full.parameters()) - sum(p.numel() for p in unbiased.parameters()) == 4 * 64
    wide = build_backbone("resnet12-wide", 3, 84, widths=(2, 2, 2, 2))
    assert isinstance(wide, ResNet12)
    assert wide.avg_pool
    assert [block.dropblock is not None for block in wide.blocks] == [False, False, True, True]
    plain = build_backbone("resnet12", 3, 84, widths=(2, 2, 2, 2), track_running_stats=False)
    assert all(block.dropblock is None and block.drop_rate == 0 for block in plain.blocks)
    assert not any("running" in name for name, _ in plain.named_buffers())


def test_unknown_name_lists_available() -> None:
    with pytest.raises(ValueError, match=r"unknown backbone 'resnet18'.*conv4, resnet12, resnet12-wide"):
        build_backbone("resnet18", 3, 84)


@pytest.mark.parametrize("name", ["conv4", "resnet12", "resnet12-wide"])
def test_image_too_small(name: str) -> None:
    with pytest.raises(ValueError, match=rf"image_size=15 is too small for backbone '{name}'.*image_size >= 16"):
        build_backbone(name, 3, 15, widths=(2, 2, 2, 2)) if "resnet" in name else build_backbone(name, 3, 15)
    backbone = Conv4(hidden=2)
    with pytest.raises(ValueError, match=r"image_size=8 .*image_size >= 16"):
        feature_size(backbone, 3, 8)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("conv4", {"hidden": 0}, "hidden must be positive, got 0"),
        ("conv4", {"layers": -1}, "layers must be positive"),
        ("resnet12", {"widths": (64, 0, 256, 512)}, r"widths\[1\] must be positive, got 0"),
        ("resnet12", {"widths": (64, 128, 256)}, "widths must have 4 entries"),
        ("resnet12", {"activation": "gelu"}, "activation must be one of"),
        ("resnet12-wide", {"drop_rate": 1.5}, "drop_rate must be in"),
    ],
)
def test_invalid_options(name: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_backbone(name, 3, 84, **options)


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="in_channels must be positive"):
        build_backbone("conv4", 0, 84)
    with pytest.raises(ValueError, match="image_size must be positive"):
        build_backbone("conv4", 3, 0)


def test_register_backbone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_BACKBONES", dict(registry._BACKBONES))  # leave the registry as found
    register_backbone("conv4-tiny", lambda in_channels, **options: Conv4(in_channels, hidden=2, **options))
    assert "conv4-tiny" in available_backbones()
    assert feature_size(build_backbone("conv4-tiny", 1, 32), 1, 32) == 2 * 2 * 2
    with pytest.raises(ValueError, match="already registered"):
        register_backbone("conv4", Conv4)

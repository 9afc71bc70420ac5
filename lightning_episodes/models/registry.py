"""Backbones by name, and their feature sizes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from lightning_episodes.models.base import check_positive
from lightning_episodes.models.conv4 import Conv4
from lightning_episodes.models.resnet12 import ResNet12, resnet12_wide

BackboneFactory = Callable[..., nn.Module]
"""Builds a backbone from `in_channels=` and options; see `register_backbone`."""

_BACKBONES: dict[str, BackboneFactory] = {
    "conv4": Conv4,
    "resnet12": ResNet12,
    "resnet12-wide": resnet12_wide,
}


def available_backbones() -> list[str]:
    """The registered backbone names, sorted."""
    return sorted(_BACKBONES)


def register_backbone(name: str, factory: BackboneFactory, overwrite: bool = False) -> None:
    """Make a backbone available to `build_backbone` under `name`.

    Args:
        name: The name configurations use.
        factory: Called as `factory(in_channels=..., **options)`; it returns a module mapping
            `[B, N, C, H, W]` images to `[B, N, D]` features. A `min_image_size` attribute on the module
            is checked against the image size.
        overwrite: Replace an existing backbone of that name. Default: False.

    Raises:
        ValueError: If `name` is taken and `overwrite` is False.
    """
    if name in _BACKBONES and not overwrite:
        raise ValueError(f"backbone {name!r} is already registered; pass overwrite=True to replace it")
    _BACKBONES[name] = factory


def _check_image_size(backbone: nn.Module, name: str, image_size: int) -> None:
    minimum = int(getattr(backbone, "min_image_size", 1))
    if image_size < minimum:
        raise ValueError(
            f"image_size={image_size} is too small for backbone {name!r}: its 2×2 max-pools need "
            f"image_size >= {minimum}"
        )


def build_backbone(name: str, in_channels: int, image_size: int, **options: Any) -> nn.Module:
    """Build a registered backbone for images of `in_channels` × `image_size` × `image_size`.

    Args:
        name: One of `available_backbones()`: `"conv4"`, `"resnet12"` or `"resnet12-wide"`.
        in_channels: Image channels.
        image_size: Image side, in pixels.
        **options: Passed to the backbone's constructor (e.g. `track_running_stats=False`).

    Returns:
        The backbone, mapping `[B, N, C, H, W]` to `[B, N, D]`.

    Raises:
        ValueError: If `name` is unknown, `in_channels` or `image_size` is not positive, the image is
            smaller than the backbone's pooling allows, or the backbone rejects an option's value.

    Example:
        >>> backbone = build_backbone("conv4", in_channels=3, image_size=84)
        >>> feature_size(backbone, in_channels=3, image_size=84)
        1600
    """
    if name not in _BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; available backbones: {', '.join(available_backbones())}")
    check_positive(in_channels=in_channels, image_size=image_size)
    backbone = _BACKBONES[name](in_channels=in_channels, **options)
    _check_image_size(backbone, name, image_size)
    return backbone


def feature_size(backbone: nn.Module, in_channels: int, image_size: int) -> int:
    """The feature dimension `D` of `backbone` for such images, measured by a dry run.

    The dry run forwards one episode of two blank images in evaluation mode without gradient, and
    restores every module's mode afterwards: it changes no parameter, buffer or schedule.

    Args:
        backbone: A module mapping `[B, N, C, H, W]` to `[B, N, D]`.
        in_channels: Image channels.
        image_size: Image side, in pixels.

    Returns:
        `D`.

    Raises:
        ValueError: If `in_channels` or `image_size` is not positive, the image is too small for the
            backbone, or its output is not `[B, N, D]`.
    """
    check_positive(in_channels=in_channels, image_size=image_size)
    _check_image_size(backbone, type(backbone).__name__, image_size)
    reference = next(backbone.parameters(), None)
    device = reference.device if reference is not None else None
    dtype = reference.dtype if reference is not None and reference.is_floating_point() else None
    images = torch.zeros(1, 2, in_channels, image_size, image_size, device=device, dtype=dtype)
    modes = [(module, module.training) for module in backbone.modules()]
    try:
        backbone.eval()
        with torch.no_grad():
            features = backbone(images)
    finally:
        for module, training in modes:
            module.training = training
    if features.dim() != 3:
        raise ValueError(f"a backbone must return features [B, N, D]; got shape {tuple(features.shape)}")
    return int(features.shape[-1])

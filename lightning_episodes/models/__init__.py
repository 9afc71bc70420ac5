"""Backbones for episodic few-shot learning: conv4, ResNet-12, any ``nn.Module`` (a class path: torchvision's, yours),
and batch norm with per-episode statistics.

A backbone maps a batch of episodes' images `[B, N, C, H, W]` to features `[B, N, D]`; during training
its batch norms normalise every episode with that episode's own statistics (`EpisodicBatchNorm2d`).
"""

from lightning_episodes.models.base import EpisodicBackbone
from lightning_episodes.models.batchnorm import EpisodicBatchNorm2d, EvalBatchNorm, set_eval_batch_norm
from lightning_episodes.models.conv4 import Conv4
from lightning_episodes.models.dropblock import DropBlock
from lightning_episodes.models.heads import LinearHead
from lightning_episodes.models.modules import (
    EpisodeAdapter,
    build_episodic_backbone,
    build_module,
    drop_head,
    load_backbone_weights,
    module_class,
)
from lightning_episodes.models.registry import (
    available_backbones,
    build_backbone,
    feature_size,
    register_backbone,
)
from lightning_episodes.models.resnet12 import ResNet12, resnet12_wide

__all__ = [
    "Conv4",
    "DropBlock",
    "EpisodeAdapter",
    "EpisodicBackbone",
    "EpisodicBatchNorm2d",
    "EvalBatchNorm",
    "LinearHead",
    "ResNet12",
    "available_backbones",
    "build_backbone",
    "build_episodic_backbone",
    "build_module",
    "drop_head",
    "feature_size",
    "load_backbone_weights",
    "module_class",
    "register_backbone",
    "resnet12_wide",
    "set_eval_batch_norm",
]

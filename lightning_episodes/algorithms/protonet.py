"""Prototypical Networks with Euclidean or scaled-cosine similarity."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor, nn
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodeOutput, EpisodicModule, EvalBatchNorm, default_optimizer
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import build_backbone


def prototypes(support: Tensor, ways: int) -> Tensor:
    """Class means ``[B, ways, D]`` of class-major support features ``[B, ways * shots, D]``."""
    return support.unflatten(1, (ways, -1)).mean(2)


def query_loss(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Per-episode mean cross-entropy and accuracy of ``logits`` ``[B, Q, ways]`` against ``labels`` ``[B, Q]``."""
    losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").mean(1)
    accuracies = (logits.argmax(-1) == labels).float().mean(1)
    return losses, accuracies


class ProtoNet(EpisodicModule):
    """Prototypical Networks (Snell et al., NeurIPS 2017).

    Each class's prototype is the mean embedding of its support samples; queries are classified by
    negative squared Euclidean distance to the prototypes, or by cosine similarity scaled by a learnable
    scalar (Gidaris & Komodakis, CVPR 2018; Chen et al., ICLR 2019). Support and query images of an
    episode are embedded together, with batch-norm statistics per episode.

    Args:
        backbone: registered backbone name (``conv4``, ``resnet12``, ``resnet12-wide``).
        backbone_options: extra keyword arguments for the backbone.
        in_channels: image channels (linked from ``data.channels`` by the CLI).
        image_size: image height and width (linked from ``data.image_size`` by the CLI).
        distance: ``euclidean`` (squared) or ``cosine``.
        cosine_scale: initial value of the learnable cosine scale.
        optimizer: optimiser factory (default Adam, lr 1e-3).
        lr_scheduler: optional scheduler factory.
        eval_batch_norm: ``running`` (default) or ``episode`` batch-norm statistics at evaluation.
        channels_last: run the convolutions ``channels_last`` (see :class:`EpisodicModule`; default False).
        compile_backbone: compile the backbone (see :class:`EpisodicModule`; default False).
    """

    def __init__(
        self,
        backbone: str = "conv4",
        backbone_options: dict[str, Any] | None = None,
        in_channels: int = 1,
        image_size: int = 28,
        distance: Literal["euclidean", "cosine"] = "euclidean",
        cosine_scale: float = 10.0,
        optimizer: OptimizerCallable = default_optimizer,
        lr_scheduler: LRSchedulerCallable | None = None,
        eval_batch_norm: EvalBatchNorm = "running",
        channels_last: bool = False,
        compile_backbone: bool = False,
    ) -> None:
        super().__init__(optimizer, lr_scheduler, eval_batch_norm, channels_last, compile_backbone)
        if distance not in ("euclidean", "cosine"):
            raise ValueError(f"model.distance must be 'euclidean' or 'cosine', got {distance!r}")
        if cosine_scale <= 0:
            raise ValueError(f"model.cosine_scale must be > 0, got {cosine_scale}")
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        self.backbone = build_backbone(backbone, in_channels, image_size, **(backbone_options or {}))
        self.distance = distance
        # the scale only exists (and receives gradients, as DDP requires) for the cosine variant
        self.scale = nn.Parameter(torch.tensor(float(cosine_scale))) if distance == "cosine" else None

    def logits(self, support: Tensor, query: Tensor, ways: int) -> Tensor:
        """Query logits ``[B, Q, ways]`` from support ``[B, ways * shots, D]`` and query ``[B, Q, D]`` features."""
        protos = prototypes(support, ways)
        if self.scale is None:
            # the explicit difference (not cdist) is exact and has a finite gradient at zero distance
            return -(query[:, :, None] - protos[:, None]).pow(2).sum(-1)
        return self.scale * F.normalize(query, dim=-1) @ F.normalize(protos, dim=-1).transpose(1, 2)

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        n_support = batch.support.shape[1]
        features = self.backbone(torch.cat([batch.support, batch.query], 1))
        return self.logits(features[:, :n_support], features[:, n_support:], batch.ways)

    @override
    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        return EpisodeOutput(*query_loss(self.query_logits(batch), batch.query_labels))

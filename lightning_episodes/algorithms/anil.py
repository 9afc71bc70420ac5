"""Almost No Inner Loop: MAML that adapts only the head, on features computed once per episode."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor
from torch.func import functional_call
from typing_extensions import override

from lightning_episodes.algorithms.base import EvalBatchNorm, default_optimizer
from lightning_episodes.algorithms.maml import MAML, adapt
from lightning_episodes.data.episode import Episode


class ANIL(MAML):
    """ANIL (Raghu et al., ICLR 2020): MAML whose inner loop adapts only the linear head.

    The backbone embeds each episode's support and query sets once (separately, with per-episode
    batch-norm statistics), then a copy of the head takes ``adaptation_steps`` SGD steps on the support
    features. The backbone is never changed in the inner loop; it learns from the outer gradient of the
    query loss, which flows through both the query features and (second order) the adapted head.

    Args:
        backbone: registered backbone name (``conv4``, ``resnet12``, ``resnet12-wide``).
        backbone_options: extra backbone arguments (``track_running_stats`` defaults to False here).
        in_channels: image channels (linked from ``data.channels`` by the CLI).
        image_size: image height and width (linked from ``data.image_size`` by the CLI).
        ways: classes per episode, the head's outputs (linked from ``data.ways`` by the CLI).
        adaptation_steps: inner SGD steps on the head in training (default 5).
        adaptation_lr: inner step size (default 0.1).
        eval_adaptation_steps: inner steps at validation/test (default: ``adaptation_steps``).
        first_order: ignore second derivatives.
        optimizer: outer optimiser factory (default Adam, lr 1e-3, the paper's).
        lr_scheduler: optional scheduler factory.
        eval_batch_norm: ``episode`` (default; the only mode without running statistics).
        channels_last: run the convolutions ``channels_last`` (see :class:`EpisodicModule`; default False).
        compile_backbone: compile the backbone (see :class:`EpisodicModule`; default False).

    Raises:
        ValueError: as :class:`MAML`.
    """

    adapts_backbone: ClassVar[bool] = False  # the backbone runs once per batch: it may be compiled

    def __init__(
        self,
        backbone: str = "conv4",
        backbone_options: dict[str, Any] | None = None,
        in_channels: int = 1,
        image_size: int = 28,
        ways: int = 5,
        adaptation_steps: int = 5,
        adaptation_lr: float = 0.1,
        eval_adaptation_steps: int | None = None,
        first_order: bool = False,
        optimizer: OptimizerCallable = default_optimizer,
        lr_scheduler: LRSchedulerCallable | None = None,
        eval_batch_norm: EvalBatchNorm = "episode",
        channels_last: bool = False,
        compile_backbone: bool = False,
    ) -> None:
        super().__init__(
            backbone,
            backbone_options,
            in_channels,
            image_size,
            ways,
            adaptation_steps,
            adaptation_lr,
            eval_adaptation_steps,
            first_order,
            optimizer,
            lr_scheduler,
            eval_batch_norm,
            channels_last,
            compile_backbone,
        )

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        """Query logits under the head adapted to each episode's support features (``episode_losses``: MAML's)."""
        self._check_ways(batch.ways)
        steps, create_graph = self._inner_loop()
        with self._outer_grad():
            support, query = self.backbone(batch.support), self.backbone(batch.query)  # once per episode
        params = dict(self.head.named_parameters())
        logits = []
        for i in range(len(batch)):
            fast = adapt(
                self.head, params, support[i], batch.support_labels[i], steps, self.adaptation_lr, create_graph
            )
            with self._outer_grad():
                logits.append(functional_call(self.head, fast, (query[i],)))
        return torch.stack(logits)

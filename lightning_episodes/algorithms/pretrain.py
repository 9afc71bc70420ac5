"""Plain classification pre-training of a backbone on all training classes (FEAT's initialisation)."""

from __future__ import annotations

from typing import Any

import torch
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor, nn
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodeOutput, EpisodicModule, check_min
from lightning_episodes.algorithms.functional import negative_squared_distances, prototypes, query_loss
from lightning_episodes.data.episode import Episode


def pretrain_optimizer(params: Any) -> torch.optim.Optimizer:
    """FEAT's ResNet-12 pre-training optimiser: SGD, lr 0.1, Nesterov momentum 0.9, weight decay 5e-4."""
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)


class Pretrain(EpisodicModule):
    """A backbone trained as a ``num_classes``-way classifier over the training classes.

    FEAT (Ye et al., CVPR 2020) and most recent few-shot methods start meta-training from such a
    backbone (Chen et al., ICLR 2019). Training reuses the episodic data module: every image of a training
    batch (support and query alike) is classified among all training classes by a linear layer, so an
    "episode" of ``ways`` = all training classes with ``shots + queries`` = 2 is a class-balanced
    mini-batch. Validation and test score the backbone as FEAT's pre-training does, by nearest Euclidean
    prototype on the evaluation episodes, so ``ModelCheckpoint(monitor="val/acc")`` selects the
    backbone that transfers best. Pass the best checkpoint to ``FEAT(backbone_checkpoint=...)``.

    Example (the protocol in ``configs/feat/pretrain_resnet12.yaml``)::

        lightning-episodes fit --config configs/feat/pretrain_resnet12.yaml --data.dataset mini-imagenet

    Args:
        num_classes: number of training classes; default: read from the data module's training split
            when fitting starts (it is then saved, so the checkpoint reloads without it).
        backbone: a registered backbone name (default ``resnet12-wide``, FEAT's ResNet-12) or a module (see
            :class:`EpisodicModule`).
        optimizer: optimiser factory (default SGD, lr 0.1, Nesterov momentum 0.9, weight decay 5e-4).
        **kwargs: the other backbone, optimiser and evaluation arguments of :class:`EpisodicModule`.

    Raises:
        ValueError: on a non-positive ``num_classes``, an unknown backbone or an image too small for it;
            when fitting, if ``num_classes`` disagrees with the training split.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        backbone: nn.Module | str | dict[str, Any] = "resnet12-wide",
        optimizer: OptimizerCallable = pretrain_optimizer,
        **kwargs: Any,
    ) -> None:
        if num_classes is not None:
            check_min("num_classes", num_classes, 0, inclusive=False)
        super().__init__(backbone=backbone, optimizer=optimizer, **kwargs)
        self.feature_dim = self.feature_size()
        self.classifier: nn.Linear | None = None if num_classes is None else nn.Linear(self.feature_dim, num_classes)
        # global class id -> classifier row; rebuilt from the data module when fitting
        self.class_rows: Tensor
        self.register_buffer("class_rows", torch.empty(0, dtype=torch.long), persistent=False)

    @override
    def setup(self, stage: str) -> None:
        super().setup(stage)
        datamodule = getattr(self.trainer, "datamodule", None)
        data = getattr(datamodule, "data", None)
        if stage != "fit" or data is None:
            return
        # the classes the training episodes draw from: the split's, or those `data.train_classes` keeps
        sampler = getattr(datamodule, "samplers", {}).get("train")
        classes = torch.as_tensor(data.splits["train"] if sampler is None else sampler.classes, dtype=torch.long)
        if self.classifier is None:
            self.classifier = nn.Linear(self.feature_dim, len(classes))
            self.hparams["num_classes"] = len(classes)  # saved with the checkpoint
        elif self.classifier.out_features != len(classes):
            raise ValueError(
                f"model.num_classes={self.classifier.out_features} but the training episodes draw from {len(classes)} "
                "classes"
            )
        rows = torch.full((int(classes.max()) + 1,), -1, dtype=torch.long)
        rows[classes] = torch.arange(len(classes))
        self.class_rows = rows.to(self.class_rows.device)

    def classification(self, features: Tensor, classes: Tensor) -> tuple[Tensor, Tensor]:
        """Per-episode cross-entropy and accuracy of ``features`` ``[B, N, D]`` of global ``classes`` ``[B, N]``."""
        if self.classifier is None or len(self.class_rows) == 0:
            raise RuntimeError("Pretrain learns the training classes of the data module: fit it with a Trainer")
        return query_loss(self.classifier(features), self.class_rows[classes])

    @override
    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        if not self.training:
            return super().episode_losses(batch)  # the prototypes' query cross-entropy
        features = self.backbone(torch.cat([batch.support, batch.query], 1))
        labels = torch.cat([batch.support_labels, batch.query_labels], 1)
        return EpisodeOutput(*self.classification(features, batch.identity.classes.gather(1, labels)))

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        """Queries scored by squared Euclidean distance to the class prototypes (how it is evaluated)."""
        n_support = batch.support.shape[1]
        features = self.backbone(torch.cat([batch.support, batch.query], 1))
        return negative_squared_distances(features[:, n_support:], prototypes(features[:, :n_support], batch.ways))

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        # a checkpoint saved after the classifier was built lazily: build it before the weights load
        if self.classifier is None and "classifier.weight" in checkpoint.get("state_dict", {}):
            self.classifier = nn.Linear(self.feature_dim, checkpoint["state_dict"]["classifier.weight"].shape[0])

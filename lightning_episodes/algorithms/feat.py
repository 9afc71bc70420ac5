"""FEAT: prototypes adapted to their episode by a Transformer set-to-set function."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor, nn
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodeOutput, EpisodicModule, check_min
from lightning_episodes.algorithms.functional import negative_squared_distances, prototypes, query_loss
from lightning_episodes.data.episode import Episode, episode_labels


def feat_optimizer(params: Any) -> torch.optim.Optimizer:
    """FEAT's ResNet optimiser: SGD, lr 2e-4, Nesterov momentum 0.9, weight decay 5e-4."""
    return torch.optim.SGD(params, lr=2e-4, momentum=0.9, nesterov=True, weight_decay=5e-4)


class SetAttention(nn.Module):
    """FEAT's set-to-set function: single-head scaled dot-product self-attention over a set, with an output
    projection, dropout, a residual connection and layer norm (Vaswani et al., NeurIPS 2017).

    Initialised as FEAT's ``MultiHeadAttention(1, dim, dim, dim)``: projections N(0, 2 / (dim + dim)),
    output layer Xavier-normal.

    Args:
        dim: feature dimension ``D``.
        dropout: dropout of the projected output (FEAT: 0.5).
        attention_dropout: dropout of the attention weights (FEAT: 0.1).
    """

    def __init__(self, dim: int, dropout: float = 0.5, attention_dropout: float = 0.1) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        for projection in (self.query, self.key, self.value):
            nn.init.normal_(projection.weight, std=math.sqrt(2.0 / (dim + dim)))
        self.output = nn.Linear(dim, dim)
        nn.init.xavier_normal_(self.output.weight)
        self.norm = nn.LayerNorm(dim)
        self.dropout, self.attention_dropout = nn.Dropout(dropout), nn.Dropout(attention_dropout)
        self.temperature = math.sqrt(dim)

    def forward(self, x: Tensor) -> Tensor:
        """Adapt every set of ``x`` ``[..., N, D]`` (elements attend to all elements of their set)."""
        scores = self.query(x) @ self.key(x).transpose(-1, -2) / self.temperature
        attended = self.attention_dropout(scores.softmax(-1)) @ self.value(x)
        return self.norm(self.dropout(self.output(attended)) + x)


class FEAT(EpisodicModule):
    """Few-shot Embedding Adaptation with Transformer (Ye et al., CVPR 2020), with Euclidean distance.

    The class prototypes (support means) of an episode are adapted jointly by :class:`SetAttention`, and
    queries are classified by ``-‖q − p‖² / temperature``. In training, FEAT's contrastive regulariser
    (the official code's "auxiliary task") adds ``balance`` times the cross-entropy of classifying every
    support and query embedding by ``-‖x − c‖² / temperature2`` against the centres ``c`` of each class's
    adapted set of support + query embeddings. The episode's difficulty (Arnold et al., NeurIPS 2021) is
    the main cross-entropy; its loss, which the importance weight multiplies, is cross-entropy + balance ·
    regulariser. Evaluation uses the main cross-entropy only.

    FEAT starts from a backbone pre-trained by classification on the training classes: train one with
    :class:`~lightning_episodes.algorithms.Pretrain` (``lightning-episodes fit --config
    configs/feat/pretrain_resnet12.yaml``), then pass its checkpoint as ``backbone_checkpoint``.

    Args:
        temperature: divides the main logits (FEAT: 64).
        temperature2: divides the regulariser's logits (FEAT: 64 for 1-shot, 32 for 5-shot Mini-ImageNet).
        balance: weight of the regulariser (FEAT: 0.01 for 1-shot, 0.1 for 5-shot Mini-ImageNet).
        dropout: dropout of the attention's output (FEAT: 0.5).
        lr_multiplier: the set function's learning rate is the backbone's times this (FEAT's ``lr_mul``, 10).
        backbone_checkpoint: a checkpoint of this library (``Pretrain`` or any module with a ``backbone``)
            or a plain state dict of the backbone, loaded when fitting starts (``setup("fit")``, before a
            resumed checkpoint is restored), so that a saved FEAT reloads without it. ``load_backbone``
            loads one at any time.
        backbone: a registered backbone name (default ``resnet12-wide``, FEAT's ResNet-12) or a module (see
            :class:`EpisodicModule`).
        optimizer: optimiser factory (default FEAT's SGD, lr 2e-4, Nesterov momentum 0.9, weight decay 5e-4).
        **kwargs: the other backbone, optimiser and evaluation arguments of :class:`EpisodicModule`.

    Raises:
        ValueError: on a non-positive temperature or ``lr_multiplier``, a negative ``balance``, a dropout
            outside [0, 1), an unknown backbone or an image too small for it.
    """

    def __init__(
        self,
        temperature: float = 64.0,
        temperature2: float = 64.0,
        balance: float = 0.01,
        dropout: float = 0.5,
        lr_multiplier: float = 10.0,
        backbone_checkpoint: str | None = None,
        backbone: nn.Module | str | dict[str, Any] = "resnet12-wide",
        optimizer: OptimizerCallable = feat_optimizer,
        **kwargs: Any,
    ) -> None:
        check_min("temperature", temperature, 0, inclusive=False)
        check_min("temperature2", temperature2, 0, inclusive=False)
        check_min("lr_multiplier", lr_multiplier, 0, inclusive=False)
        check_min("balance", balance, 0)
        if not 0 <= dropout < 1:
            raise ValueError(f"model.dropout must be in [0, 1), got {dropout}")
        super().__init__(backbone=backbone, optimizer=optimizer, **kwargs)
        self.attention = SetAttention(self.feature_size(), dropout)
        self.temperature, self.temperature2, self.balance = temperature, temperature2, balance
        self.lr_multiplier, self.backbone_checkpoint = lr_multiplier, backbone_checkpoint
        self.backbone_loaded = False

    def regulariser(self, support: Tensor, query: Tensor, ways: int) -> Tensor:
        """FEAT's contrastive regulariser ``[B]`` of class-major support/query features ``[B, ·, D]``."""
        sets = torch.cat([support.unflatten(1, (ways, -1)), query.unflatten(1, (ways, -1))], 2)  # [B, ways, n, D]
        centres = self.attention(sets).mean(2)  # each class's set is adapted on its own
        logits = negative_squared_distances(sets.flatten(1, 2), centres) / self.temperature2
        labels = episode_labels(len(sets), ways, sets.shape[2], device=sets.device)
        return F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").mean(1)

    def _embed(self, batch: Episode) -> tuple[Tensor, Tensor, Tensor]:
        """Support and query features and the query logits against the adapted prototypes."""
        n_support = batch.support.shape[1]
        features = self.backbone(torch.cat([batch.support, batch.query], 1))
        support, query = features[:, :n_support], features[:, n_support:]
        adapted = self.attention(prototypes(support, batch.ways))
        return support, query, negative_squared_distances(query, adapted) / self.temperature

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        return self._embed(batch)[2]

    @override
    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        support, query, logits = self._embed(batch)
        cross_entropy, accuracies = query_loss(logits, batch.query_labels)
        if not self.training:
            return EpisodeOutput(cross_entropy, accuracies)
        main = (
            query_loss(logits, batch.query_labels, self.label_smoothing)[0] if self.label_smoothing else cross_entropy
        )
        losses = main + self.balance * self.regulariser(support, query, batch.ways)
        return EpisodeOutput(losses, accuracies, difficulty=cross_entropy)

    # -- pre-trained backbone ---------------------------------------------------------------------------
    def load_backbone(self, path: str | Path) -> None:
        """Load the backbone from a checkpoint of this library or a plain backbone state dict.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            ValueError: if its weights do not fit the backbone.
        """
        if not Path(path).is_file():
            raise FileNotFoundError(f"model.backbone_checkpoint={str(path)!r} does not exist")
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = state.get("state_dict", state)
        prefixed = {key.removeprefix("backbone."): v for key, v in state.items() if key.startswith("backbone.")}
        problem = f"model.backbone_checkpoint={str(path)!r} does not fit the {self.hparams['backbone']!r} backbone"
        try:
            missing, unexpected = self.backbone.load_state_dict(prefixed or state, strict=False)
        except RuntimeError as error:  # shape mismatches
            raise ValueError(f"{problem}: {error}") from None
        # DropBlock's schedule counter (extra state) is absent from plain state dicts: it then starts at 0
        missing = [key for key in missing if not key.endswith("_extra_state")]
        if missing or unexpected:
            raise ValueError(f"{problem}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.backbone_loaded = True

    @override
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit" and self.backbone_checkpoint is not None and not self.backbone_loaded:
            self.load_backbone(self.backbone_checkpoint)

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)  # the class and training data (load_episodic_module reads them)
        checkpoint["backbone_loaded"] = self.backbone_loaded  # a later fit must not reload the pre-trained one

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self.backbone_loaded = bool(checkpoint.get("backbone_loaded", False))

    # -- optimisation -------------------------------------------------------------------------------------
    @override
    def build_optimizer(self) -> torch.optim.Optimizer:
        """The set function learns ``lr_multiplier`` times faster than the backbone, as in FEAT."""
        head = [p for name, p in self.named_parameters() if not name.startswith("backbone.")]
        optimizer = self.optimizer([{"params": list(self.backbone.parameters())}, {"params": head}])
        optimizer.param_groups[1]["lr"] *= self.lr_multiplier
        return optimizer

r"""
Task-sampler feedback
^^^^^^^^^^^^^^^^^^^^^

Feeds an adaptive :class:`~lightning_episodes.data.TaskSampler` (``data.task_sampler``) what the model did on each
step's training episodes: their classes, losses and (for samplers that need it) soft confusions, gathered over every
rank in rank order so that every rank updates the same state; and, when a sampler asks for them (the DPP samplers),
the mean features of every training class, rank 0's given to all. The data module checkpoints that state. Every
command-line run has one (a default callback); it is idle without an adaptive sampler.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from torch import Tensor
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.callbacks.reference import check_reference, load_reference, module_dtype
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.data.episode import Episode
from lightning_episodes.data.task_samplers import TaskSampler

__all__ = ["TaskSamplerFeedback", "class_features", "soft_confusion"]


def soft_confusion(query_logits: Tensor, query_labels: Tensor, ways: int) -> Tensor:
    """``[B, ways, ways]``: entry ``(e, i, j)`` is the mean softmax probability of class ``j`` over episode ``e``'s
    queries of class ``i`` (each row sums to 1; a class without queries has a zero row).

    Example::

        >>> logits = torch.tensor([[[2.0, 0.0], [0.0, 0.0], [0.0, 2.0]]])  # three queries of a 2-way episode
        >>> soft_confusion(logits, torch.tensor([[0, 0, 1]]), 2).round(decimals=3).tolist()
        [[[0.69, 0.31], [0.119, 0.881]]]
    """
    probabilities = torch.softmax(query_logits.detach().double(), dim=-1)  # [B, Q, ways]
    one_hot = torch.nn.functional.one_hot(query_labels.long(), ways).double()  # [B, Q, ways]
    totals = one_hot.transpose(1, 2) @ probabilities  # [B, ways(true), ways(predicted)]
    counts = one_hot.sum(1)[..., None]
    return totals / counts.clamp(min=1.0)


class TaskSamplerFeedback(Callback):
    """Updates the data module's adaptive task sampler after every training step (see the module's docstring).

    The command line adds it to every run; a Trainer built in Python needs it in its callbacks beside an adaptive
    ``data.task_sampler`` (the data module refuses to fit one without it). Without an adaptive sampler it does
    nothing.

    Raises:
        ValueError: at ``setup("fit")``, for a sampler that needs the model's confusions with a model that gives no
            query logits.
    """

    #: what the data module looks for on the Trainer's callbacks
    feeds_task_sampler = True

    def __init__(self) -> None:
        #: whether this fit has an adaptive sampler to feed (set at ``setup``)
        self.active = False

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        sampler = datamodule.task_sampler if isinstance(datamodule, EpisodicDataModule) else None
        self.active = stage == "fit" and sampler is not None and sampler.adaptive
        if not self.active or sampler is None or datamodule is None:
            return
        if sampler.needs_confusion and not _gives_query_logits(pl_module):
            raise ValueError(
                f"data.task_sampler={sampler!r} learns from the model's confusions, which "
                f"{type(pl_module).__name__} does not give (its training loss does not come from query_logits)"
            )
        if sampler.needs_class_features:
            _check_class_features(sampler, pl_module, datamodule.ways)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        sampler = trainer.datamodule.task_sampler if self.active else None  # type: ignore[attr-defined]
        # a new fit's first features (a resumed fit restored the ones its checkpoint holds)
        fresh = trainer.global_step == 0
        if fresh and sampler is not None and sampler.needs_class_features and sampler.class_features_due(-1):
            _feed_class_features(trainer, pl_module, sampler)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        datamodule = trainer.datamodule  # type: ignore[attr-defined]
        if not self.active or not isinstance(outputs, dict) or not isinstance(batch, Episode):
            return
        sampler = datamodule.task_sampler
        classes = batch.identity.classes
        confusion = None
        if sampler.needs_confusion:
            confusion = soft_confusion(outputs["query_logits"], batch.query_labels, classes.shape[1])
        # one collective a step: classes (exact in float64), losses and confusions side by side, per episode
        ways = classes.shape[1]
        parts = [classes.double(), outputs["difficulties"].detach().double()[:, None]]
        parts += [] if confusion is None else [confusion.to(classes.device).flatten(1)]
        everything = trainer.strategy.all_gather(torch.cat(parts, dim=1))  # (W, B_local, ...) under DDP: rank order
        everything = everything.reshape(-1, everything.shape[-1])
        global_classes, losses = everything[:, :ways].long(), everything[:, ways]
        global_confusion = None if confusion is None else everything[:, ways + 1 :].reshape(-1, ways, ways)
        step = int(batch.identity.episode_ids[0]) // datamodule.episodes_per_batch
        datamodule.task_feedback(step, global_classes, losses, global_confusion)
        if sampler.needs_class_features and sampler.class_features_due(step):
            _feed_class_features(trainer, pl_module, sampler)


def class_features(module: torch.nn.Module, images: Tensor, chunk: int = 64) -> Tensor:
    """float64 ``[N, D]``: the mean backbone feature of each class's images (``[N, m, C, H, W]``), the module in
    eval mode (its evaluation batch-norm statistics) without gradients, ``chunk`` classes a forward.

    Example::

        >>> from lightning_episodes import ProtoNet
        >>> class_features(ProtoNet(image_size=16), torch.zeros(3, 2, 1, 16, 16)).shape
        torch.Size([3, 64])
    """
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            parts = [module.backbone(part.flatten(0, 1)[None])[0] for part in images.split(chunk)]  # type: ignore[operator]
    finally:
        module.train(training)
    return torch.cat(parts).view(images.shape[0], images.shape[1], -1).double().mean(1)


def _check_class_features(sampler: TaskSampler, module: pl.LightningModule, ways: int) -> None:
    """Refuses, before training, a sampler whose class features cannot come out: no backbone, features of fewer
    dimensions than ``ways`` (no set of ``ways`` classes would have a positive determinant), a bad reference."""
    if not isinstance(module, EpisodicModule):
        raise ValueError(f"data.task_sampler={sampler!r} reads the class features of an EpisodicModule's backbone")
    if sampler.class_features_from is not None:
        try:
            check_reference(sampler.class_features_from, ways)
        except (FileNotFoundError, ValueError) as error:  # name the option it came from
            raise type(error)(f"data.task_sampler.{error}") from None
        return
    dimensions = module.feature_size()
    if dimensions < ways:
        raise ValueError(
            f"data.task_sampler={sampler!r} needs class features of at least data.ways={ways} dimensions; "
            f"{type(module).__name__}'s backbone gives {dimensions}"
        )


def _feed_class_features(trainer: pl.Trainer, module: pl.LightningModule, sampler: TaskSampler) -> None:
    """Computes the class features the sampler asked for (its reference's, or the trained module's) and gives it
    rank 0's, so that every rank samples from the same kernel."""
    datamodule: EpisodicDataModule = trainer.datamodule  # type: ignore[attr-defined]
    dtype = module_dtype(module)
    images = datamodule.class_images(sampler.images_per_class, module.device, dtype)
    if sampler.class_features_from is None:
        features = class_features(module, images)
    else:
        reference = load_reference(sampler.class_features_from, module.device, dtype)
        features = class_features(reference, images)
        del reference
    sampler.set_class_features(trainer.strategy.broadcast(features.cpu(), src=0))


def _gives_query_logits(module: pl.LightningModule) -> bool:
    """Whether the module's training losses come from ``query_logits`` (the default ``episode_losses``), which then
    reach the training step's outputs (not from a replayed CUDA graph, which returns the losses alone)."""
    if not isinstance(module, EpisodicModule) or getattr(module, "cuda_graphs", False):
        return False
    kind = type(module)
    return kind.query_logits is not EpisodicModule.query_logits and kind.episode_losses is EpisodicModule.episode_losses

"""EpisodicModule: the base LightningModule of every algorithm (what it exchanges with them: ``interface.py``).

An algorithm implements ``query_logits`` (or ``episode_losses`` when its loss is not the query cross-entropy): see
``ProtoNet`` for a complete one. This module turns it into the (importance-weighted) training loss."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor, nn
from typing_extensions import override

from lightning_episodes._lightning import given_hyperparameters, logger_writes, record_hyperparameter
from lightning_episodes.algorithms.evaluate import EpisodicEvaluation
from lightning_episodes.algorithms.functional import query_loss
from lightning_episodes.algorithms.graphs import GraphedLosses, check_cuda_graphs
from lightning_episodes.algorithms.interface import (
    EpisodeOutput,
    EpisodeSelector,
    WeightingStrategy,
    check_choice,
    check_min,
    check_weighting,
)
from lightning_episodes.algorithms.record import load_record, save_record
from lightning_episodes.algorithms.schedules import check_schedule, default_optimizer
from lightning_episodes.algorithms.speed import configure_speed, use_channels_last
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import (
    EvalBatchNorm,
    build_episodic_backbone,
    feature_size,
    load_backbone_weights,
)
from lightning_episodes.weighting import EpisodeWeights, weighted_loss

__all__ = [
    "EpisodeOutput",
    "EpisodeSelector",
    "EpisodicModule",
    "WeightingStrategy",
    "check_choice",
    "check_learning_rate",
    "check_min",
    "default_optimizer",
    "logger_writes",
]


def check_learning_rate(optimizer: OptimizerCallable) -> None:
    """Refuse an optimiser factory whose learning rate is not > 0, built on a probe parameter: at lr 0 the model never
    changes, and a test after the fit would record an untrained model's accuracy as the run's.

    Raises:
        ValueError: ``model.optimizer.lr must be > 0, got 0.0``.
    """
    try:
        built = optimizer([nn.Parameter(torch.zeros(1))])
    except Exception:  # another fault (lr -1, a wrong argument) is reported where it is built, by its option
        return
    for group in built.param_groups:
        if "lr" in group:
            check_min("optimizer.lr", float(group["lr"]), 0, inclusive=False)


class EpisodicModule(EpisodicEvaluation):
    """Base class of every episodic algorithm.

    It builds ``self.backbone`` and saves the hyper-parameters (every constructor argument, the subclasses'
    too, but the optimiser and scheduler). A subclass implements :meth:`query_logits` (its
    :meth:`episode_losses` is then the query cross-entropy and accuracy) or :meth:`episode_losses`; this class
    turns it into the training loss (the ESS-normalised importance-weighted estimator of docs/method.md, exact
    under DDP), logging, evaluation (mean accuracy ± 95% CI over episodes, synchronised across devices) and
    the optimiser. A subclass takes its own arguments and passes the rest on with ``**kwargs``, so that
    LightningCLI lists these too; it re-declares one only to change its default.

    Evaluation (:mod:`~lightning_episodes.algorithms.evaluate`) refuses a model with NaN or inf parameters, buffers or
    outputs. The module adds no callback to its Trainer: the command line adds a
    :class:`~lightning_episodes.callbacks.NonFiniteGuard` and a :class:`~lightning_episodes.callbacks.TestResultsWriter`
    to every Trainer without its own; in Python, :func:`~lightning_episodes.callbacks.default_callbacks` gives them.

    Args:
        backbone: a registered backbone name (``conv4``, ``resnet12``, ``resnet12-wide``) or an ``nn.Module``: in
            YAML ``{class_path: torchvision.models.ResNet, init_args: {...}}`` (any importable ``nn.Module`` class,
            yours too), on the command line ``--model.backbone CLASS --model.backbone.init_args.NAME VALUE``; in
            Python the same dict (which checkpoints record), or a module (then pass it again to
            ``load_from_checkpoint``). A module mapping ``[M, C, H, W]`` to ``[M, ...]`` runs per episode
            (:class:`~lightning_episodes.models.EpisodeAdapter`); docs/guides/own-backbone.md.
        backbone_options: extra keyword arguments for a registered backbone.
        in_channels: image channels (linked from ``data.channels`` by the CLI).
        image_size: image height and width (linked from ``data.image_size`` by the CLI).
        optimizer: the optimiser factory, e.g. ``torch.optim.SGD`` from YAML (default: Adam, lr 1e-3).
        lr_scheduler: an optional scheduler factory, stepped every optimiser step (``configs/schedules/``: constant,
            step, cosine, linear; :mod:`~lightning_episodes.algorithms.schedules` anneals to ``trainer.max_steps``).
        eval_batch_norm: batch-norm statistics at evaluation: ``running`` (the running buffers) or
            ``episode`` (each episode's own inputs). Evaluation never changes the model in either mode.
        channels_last: run the convolutions in the ``channels_last`` (NHWC) memory layout
            (:mod:`~lightning_episodes.algorithms.speed`), for GPUs with tensor cores, above all in ``bf16-mixed`` or
            ``16-mixed`` precision: the same numbers up to float rounding (speed: docs/benchmarks.md). Default: False.
        compile_backbone: compile the backbone in place with ``torch.compile`` when a Trainer sets the model up: the
            same numbers up to float rounding, faster steps after a one-off compilation (docs/benchmarks.md), again
            for evaluation and each new episode shape. For long runs; MAML refuses it. Default: False.
        cuda_graphs: in ``fit`` on one CUDA device, replay each training batch's episode losses (the backbone's
            forward and backward) as a CUDA graph (:mod:`lightning_episodes.algorithms.graphs`): the same numbers up
            to float rounding, without the host's kernel launches that bound small models' steps. Refused (one line,
            when fitting starts) off CUDA, under DDP or mixed precision, with ``compile_backbone``, and by MAML and
            ANIL. Default: False.
        drop_head: the backbone's classification head, replaced by ``nn.Identity`` so that it returns features: a
            submodule's name (``fc`` for torchvision's ResNets: 512 features for ResNet-18 instead of 1,000 logits;
            ``classifier`` for its VGG, DenseNet, MobileNet, EfficientNet). Default: None (keep the module whole).
        backbone_weights: a file of pre-trained backbone weights, ``torch.save(module.state_dict(), path)`` of the
            module as its class builds it (the head's weights may be in it), loaded when fitting starts with
            ``weights_only=True`` after a check of every key and shape (a checkpoint reloads without the file).
            Default: None.
        label_smoothing: the training loss's label smoothing ``ε`` (Szegedy et al., CVPR 2016): the query
            cross-entropy against ``(1 − ε)`` on the true class plus ``ε / ways`` on every class, in ``[0, 1)``. The
            episode's difficulty and every evaluation loss stay the plain cross-entropy, so a weighting aims at the
            same quantity with or without it. Default: 0 (none, as in the paper).

    Raises:
        ValueError: on an unknown ``eval_batch_norm``, backbone or ``drop_head``, a ``label_smoothing`` outside
            ``[0, 1)``, an ``optimizer`` whose learning rate is not > 0, a class path that is not an ``nn.Module``
            class, or an image too small for the backbone; when fitting starts, on ``cuda_graphs`` where the step
            cannot be captured, or ``backbone_weights`` that do not fit the backbone.
    """

    #: whether ``episode_losses`` can be captured in a CUDA graph (MAML's inner loop differentiates its gradients)
    supports_cuda_graphs: ClassVar[bool] = True
    #: backbone options of the algorithm, under the user's ``backbone_options`` (MAML: no running statistics)
    backbone_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        backbone: nn.Module | str | dict[str, Any] = "conv4",
        backbone_options: dict[str, Any] | None = None,
        in_channels: int = 1,
        image_size: int = 28,
        optimizer: OptimizerCallable = default_optimizer,
        lr_scheduler: LRSchedulerCallable | None = None,
        eval_batch_norm: EvalBatchNorm = "running",
        channels_last: bool = False,
        compile_backbone: bool = False,
        cuda_graphs: bool = False,
        drop_head: str | None = None,
        backbone_weights: str | None = None,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        check_choice("eval_batch_norm", eval_batch_norm, ("running", "episode"))
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"model.label_smoothing must be in [0, 1), got {label_smoothing}")
        # every __init__ argument of the subclasses too (Lightning reads their frames); a module is recorded below
        ignore = ["optimizer", "lr_scheduler", *(["backbone"] if isinstance(backbone, nn.Module) else [])]
        self.save_hyperparameters(ignore=ignore)
        check_learning_rate(optimizer)
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        self.eval_batch_norm, self.label_smoothing = eval_batch_norm, label_smoothing
        self.channels_last, self.compile_backbone, self.cuda_graphs = channels_last, compile_backbone, cuda_graphs
        self._graphed: GraphedLosses | None = None
        self._weighting: WeightingStrategy[EpisodicModule] | None = None
        #: dataset and episode shape of the training run this model comes from (restored from checkpoints)
        self.trained_on: dict[str, Any] | None = None
        #: per-channel ``{"mean": [...], "std": [...]}`` of the training images' normalisation (restored from
        #: checkpoints): what prediction on new images applies
        self.input_normalization: dict[str, list[float]] | None = None
        #: the backbone's options: the algorithm's :attr:`backbone_defaults` under the user's ``backbone_options``
        self.backbone_options = self.backbone_defaults | (backbone_options or {})
        self._image_shape = (in_channels, image_size)
        self.drop_head, self.backbone_weights, self.backbone_weights_loaded = drop_head, backbone_weights, False
        self.backbone, record = build_episodic_backbone(
            backbone, in_channels, image_size, self.backbone_options, drop_head, backbone_options
        )
        if record is not None:  # the CLI's record of a module is its config (class path and init_args)
            record_hyperparameter(self, "backbone", given_hyperparameters().get("backbone", record))

    def feature_size(self) -> int:
        """The backbone's feature dimension ``D`` for the configured images (a dry run; changes nothing)."""
        return feature_size(self.backbone, *self._image_shape)

    @property
    def weighting(self) -> WeightingStrategy[EpisodicModule] | None:
        """The :class:`WeightingStrategy` of the training loss (``None``: every weight is 1); assigning an object
        without ``episode_weights`` raises ``TypeError``."""
        return self._weighting

    @weighting.setter
    def weighting(self, strategy: WeightingStrategy[EpisodicModule] | None) -> None:
        check_weighting(self, strategy)
        self._weighting = strategy

    # -- what an algorithm implements ----------------------------------------------------------------------
    def query_logits(self, batch: Episode) -> Tensor:
        """Class scores ``[B, Q, ways]`` of each episode's queries given its labelled support set, as the model
        evaluates them (their softmax is the predicted class probabilities).

        What :func:`lightning_episodes.predict` uses. It reads ``support``, ``support_labels``, ``query`` and ``ways``
        only: the queries may be unlabelled and of any number.

        Raises:
            NotImplementedError: if the algorithm does not implement it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} implements neither query_logits(batch) nor episode_losses(batch)"
        )

    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        """Per-episode losses and accuracies of ``batch``: by default the query cross-entropy and accuracy of
        :meth:`query_logits`. Override it for another training loss (FEAT's regulariser, Pretrain's classifier).
        """
        logits = self.query_logits(batch)
        losses, accuracies = query_loss(logits, batch.query_labels)
        if self.training and self.label_smoothing > 0:
            smoothed, _ = query_loss(logits, batch.query_labels, self.label_smoothing)
            return EpisodeOutput(smoothed, accuracies, difficulty=losses, query_logits=logits)
        return EpisodeOutput(losses, accuracies, query_logits=logits)

    @override
    def _output(self, batch: Episode) -> EpisodeOutput:
        out = self.episode_losses(batch)
        if not isinstance(out, EpisodeOutput):
            raise TypeError(
                f"{type(self).__name__}.episode_losses must return an EpisodeOutput, got {type(out).__name__}"
            )
        return out

    # -- memory layout and compilation ---------------------------------------------------------------------
    @override
    def configure_model(self) -> None:
        if self.cuda_graphs and self.trainer.state.fn == "fit":
            cls = type(self)
            check_cuda_graphs(self.trainer, cls.__name__, cls.supports_cuda_graphs, self.compile_backbone)
        configure_speed(self, self.channels_last, self.compile_backbone)

    def use_channels_last(self) -> None:
        """Run the convolutions in the ``channels_last`` layout, weights and the backbone's images
        (:func:`~lightning_episodes.algorithms.speed.use_channels_last`). Idempotent; the Trainer calls it when
        ``channels_last=True``."""
        use_channels_last(self)

    # -- training ------------------------------------------------------------------------------------------
    @override
    def training_step(self, batch: Episode, batch_idx: int) -> dict[str, Any]:
        trainer = self.trainer
        # resampling: an EpisodeSelector strategy chooses the step's episodes (an attribute lookup: a runtime
        # Protocol isinstance check walks the protocol's members on every step)
        select = getattr(self.weighting, "select_episodes", None)
        if select is not None:
            batch = select(self, batch)
        if self.cuda_graphs:
            self._graphed = self._graphed or GraphedLosses(self, self.episode_losses)
            out = self._graphed(batch)
        else:
            out = self._output(batch)
        difficulties = out.difficulty
        if self.weighting is None:
            step = EpisodeWeights(torch.ones_like(difficulties))
        else:
            step = self.weighting.episode_weights(self, batch, difficulties)
        result = weighted_loss(
            out.losses,
            step.weights,
            divisor=step.divisor,
            # a collective: called on every rank (DDPStrategy.reduce defaults to "mean", hence reduce_op)
            reduce=lambda x: trainer.strategy.reduce(x, reduce_op="sum"),
            world_size=trainer.world_size,
            denominator=step.denominator,
        )
        # what the loggers write, and the last step (callback_metrics end with it); no host sync in between
        if logger_writes(trainer) or 0 < trainer.max_steps <= trainer.global_step + 1:
            self._log_training(out)
        outputs: dict[str, Any] = {"loss": result.loss, "difficulties": difficulties, "weights": step.weights.detach()}
        outputs["weighted"] = result
        if out.query_logits is not None:  # what an adaptive task sampler learns the model's confusions from
            outputs["query_logits"] = out.query_logits.detach()
        return outputs

    def _log_training(self, out: EpisodeOutput) -> None:
        """``train/loss`` (the mean of the finite episode losses; in the progress bar), ``train/acc`` and ``train/lr``
        (the first parameter group's, this step's), where the loggers write and at the last of ``max_steps``."""
        finite = torch.isfinite(out.losses.detach())
        mean_loss = out.losses.detach()[finite].mean() if finite.any() else out.losses.new_tensor(float("nan"))
        self.log("train/loss", mean_loss, prog_bar=True, sync_dist=True, batch_size=len(out.losses))
        self.log("train/acc", out.accuracies.float().mean(), sync_dist=True, batch_size=len(out.losses))
        optimizers = self.trainer.optimizers
        if optimizers:  # the same on every rank: a Python number, no collective
            self.log("train/lr", float(optimizers[0].param_groups[0]["lr"]), batch_size=len(out.losses))

    @override
    def teardown(self, stage: str) -> None:
        self._graphed = None  # the graphs' memory, and their hold on the model's tensors

    # -- evaluation: EpisodicEvaluation's hooks ---------------------------------------------------------------
    @override
    def setup(self, stage: str) -> None:
        super().setup(stage)
        data = getattr(getattr(self.trainer, "datamodule", None), "data", None)
        if stage == "fit" and data is not None:  # the data module is set up first
            self.input_normalization = {"mean": [float(m) for m in data.mean], "std": [float(s) for s in data.std]}
        if stage == "fit" and self.backbone_weights is not None and not self.backbone_weights_loaded:
            # before a resumed checkpoint's weights replace them; once (checkpoints record it)
            load_backbone_weights(self.backbone, self.backbone_weights, skip=self.drop_head)
            self.backbone_weights_loaded = True

    # -- checkpoints: what they carry besides the weights (record.py) -----------------------------------------
    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        fitting = self._trainer is not None and self.trainer.state.fn == "fit"
        save_record(self, checkpoint, getattr(self.trainer, "datamodule", None) if fitting else None)

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        load_record(self, checkpoint)
        saved = (checkpoint.get(self.CHECKPOINT_HYPER_PARAMS_KEY) or {}).get("backbone")
        if isinstance(saved, dict):  # a class path: keep its record, not the object that was rebuilt from it
            record_hyperparameter(self, "backbone", saved)

    # -- optimisation ---------------------------------------------------------------------------------------
    def build_optimizer(self) -> torch.optim.Optimizer:
        """The optimiser over the parameters (override it for parameter groups, as FEAT does)."""
        return self.optimizer(self.parameters())

    @override
    def configure_optimizers(self) -> Any:
        """The optimiser and, if there is one, its scheduler, stepped every optimiser step."""
        optimizer = self.build_optimizer()
        if self.lr_scheduler is None:
            return optimizer
        scheduler = self.lr_scheduler(optimizer)
        check_schedule(scheduler, self._trainer.max_steps if self._trainer is not None else None)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

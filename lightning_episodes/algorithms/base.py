"""EpisodicModule: the base LightningModule of every algorithm (what it exchanges with them: ``interface.py``).

It builds the backbone and the optimiser, turns per-episode losses into the (importance-weighted) training loss,
and evaluates (mean accuracy ± 95% CI over episodes). An algorithm implements ``query_logits`` (or
``episode_losses`` when its loss is not the query cross-entropy): see ``ProtoNet`` for a complete one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, cast

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor
from typing_extensions import override

from lightning_episodes._lightning import logger_writes
from lightning_episodes.algorithms.functional import query_loss
from lightning_episodes.algorithms.graphs import GraphedLosses
from lightning_episodes.algorithms.interface import (
    EpisodeOutput,
    EpisodeSelector,
    WeightingStrategy,
    check_choice,
    check_min,
)
from lightning_episodes.algorithms.metrics import EpisodeMeanCI, EpisodeScores, ScoredEpisodes
from lightning_episodes.algorithms.nonfinite import EvaluationGuard
from lightning_episodes.algorithms.schedules import check_schedule
from lightning_episodes.algorithms.speed import configure_speed, use_channels_last
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import EvalBatchNorm, build_backbone, feature_size, set_eval_batch_norm
from lightning_episodes.weighting import EpisodeWeights, WeightedLoss, weighted_loss

__all__ = [
    "EpisodeOutput",
    "EpisodeSelector",
    "EpisodicModule",
    "WeightingStrategy",
    "check_choice",
    "check_min",
    "default_optimizer",
    "logger_writes",
]


def default_optimizer(params: Any) -> torch.optim.Optimizer:
    """Adam with learning rate 1e-3, the paper's optimiser; on CUDA its fused kernel (the same update in one launch,
    which :class:`~lightning_episodes.callbacks.NonFiniteGuard` can skip without a host read, and CUDA graphs can
    capture)."""
    params = list(params)
    tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
    on_cuda = bool(tensors) and all(t.is_cuda for t in tensors)
    return torch.optim.Adam(params, lr=1e-3, fused=True if on_cuda else None)


class EpisodicModule(pl.LightningModule):
    """Base class of every episodic algorithm.

    It builds ``self.backbone`` and saves the hyper-parameters (every constructor argument, the subclasses'
    too, but the optimiser and scheduler). A subclass implements :meth:`query_logits` (its
    :meth:`episode_losses` is then the query cross-entropy and accuracy) or :meth:`episode_losses`; this class
    turns it into the training loss (the ESS-normalised importance-weighted estimator of docs/method.md, exact
    under DDP), logging, evaluation (mean accuracy ± 95% CI over episodes, synchronised across devices) and
    the optimiser. A subclass takes its own arguments and passes the rest on with ``**kwargs``, so that
    LightningCLI lists these too; it re-declares one only to change its default.

    Evaluating a model with NaN or inf parameters, buffers or outputs raises
    :class:`~lightning_episodes.algorithms.nonfinite.NonFiniteError` instead of reporting a number. The module adds no
    callback to its Trainer: the command line adds a :class:`~lightning_episodes.callbacks.NonFiniteGuard`
    (non-finite training steps are skipped, and training stops after a few in a row) and a
    :class:`~lightning_episodes.callbacks.TestResultsWriter` (``test_results.json``) to every Trainer without its own;
    in Python, ``pl.Trainer(callbacks=default_callbacks())`` does the same
    (:func:`~lightning_episodes.callbacks.default_callbacks`).

    Args:
        backbone: registered backbone name (``conv4``, ``resnet12``, ``resnet12-wide``).
        backbone_options: extra keyword arguments for the backbone.
        in_channels: image channels (linked from ``data.channels`` by the CLI).
        image_size: image height and width (linked from ``data.image_size`` by the CLI).
        optimizer: the optimiser factory, e.g. ``torch.optim.SGD`` from YAML (default: Adam, lr 1e-3).
        lr_scheduler: an optional scheduler factory, stepped every optimiser step (``configs/schedules/``: constant,
            step, cosine, linear; :mod:`~lightning_episodes.algorithms.schedules` anneals to ``trainer.max_steps``).
        eval_batch_norm: batch-norm statistics at evaluation: ``running`` (the running buffers) or
            ``episode`` (each episode's own inputs). Evaluation never changes the model in either mode.
        channels_last: run the convolutions in the ``channels_last`` (NHWC) memory layout, the one PyTorch
            recommends on GPUs with tensor cores (above all with ``trainer.precision`` ``bf16-mixed`` or
            ``16-mixed``): weights and images are converted when a Trainer sets the model up
            (:mod:`~lightning_episodes.algorithms.speed`). The same numbers up to float rounding; its speed is
            measured in docs/benchmarks.md. Default: False.
        compile_backbone: compile the backbone in place with ``torch.compile`` (inductor's default mode) when a
            Trainer sets the model up: the same numbers up to float rounding, faster steps after a one-off
            compilation (docs/benchmarks.md); evaluation compiles its own graph, and new episode shapes compile
            again. Worth it for long runs; MAML refuses it (its inner loop recompiles). Default: False.
        cuda_graphs: in ``fit`` on one CUDA device, replay each training batch's episode losses (the backbone's
            forward and backward) as a CUDA graph captured on the first batch of its shape
            (:mod:`lightning_episodes.algorithms.graphs`): the same numbers up to float rounding, without the
            host's kernel launches that bound small models' steps. The weights, the weighted loss and the
            optimiser step stay eager, and so does evaluation. Refused (one line, when fitting starts) off CUDA,
            under DDP or mixed precision, with ``compile_backbone``, and by MAML and ANIL. Default: False.

    Raises:
        ValueError: on an unknown ``eval_batch_norm`` or backbone, or an image too small for the backbone; when
            fitting starts, on ``cuda_graphs`` where the step cannot be captured.
    """

    #: algorithms that adapt with gradients during evaluation (MAML, ANIL) set this to True
    requires_grad_in_evaluation: ClassVar[bool] = False
    #: whether ``episode_losses`` can be captured in a CUDA graph (MAML's inner loop differentiates its gradients)
    supports_cuda_graphs: ClassVar[bool] = True
    #: backbone options of the algorithm, under the user's ``backbone_options`` (MAML: no running statistics)
    backbone_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        backbone: str = "conv4",
        backbone_options: dict[str, Any] | None = None,
        in_channels: int = 1,
        image_size: int = 28,
        optimizer: OptimizerCallable = default_optimizer,
        lr_scheduler: LRSchedulerCallable | None = None,
        eval_batch_norm: EvalBatchNorm = "running",
        channels_last: bool = False,
        compile_backbone: bool = False,
        cuda_graphs: bool = False,
    ) -> None:
        super().__init__()
        check_choice("eval_batch_norm", eval_batch_norm, ("running", "episode"))
        # every __init__ argument of the subclasses too (Lightning reads their frames)
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        self.eval_batch_norm = eval_batch_norm
        self.channels_last, self.compile_backbone = channels_last, compile_backbone
        self.cuda_graphs = cuda_graphs
        self._graphed: GraphedLosses | None = None
        self._weighting: WeightingStrategy | None = None
        #: dataset and episode shape of the training run this model comes from (restored from checkpoints)
        self.trained_on: dict[str, Any] | None = None
        #: per-channel ``{"mean": [...], "std": [...]}`` of the training images' normalisation (restored from
        #: checkpoints): what prediction on new images applies
        self.input_normalization: dict[str, list[float]] | None = None
        self.val_accuracy, self.test_accuracy = EpisodeMeanCI(), EpisodeMeanCI()
        self.val_loss, self.test_loss = EpisodeMeanCI(), EpisodeMeanCI()
        #: the ``test/*`` values of the last test (:class:`~lightning_episodes.callbacks.TestResultsWriter` writes them)
        self.test_results: dict[str, float] | None = None
        #: each test episode's id, difficulty and accuracy in the last test, over every process (the writer saves
        #: them as ``test_episodes.csv``, which ``lightning-episodes compare`` reads)
        self.test_episode_scores: ScoredEpisodes | None = None
        self._test_scores = EpisodeScores()
        self._guard = EvaluationGuard()  # no accuracy of a model with NaN or inf parameters or outputs
        #: the backbone's options: the algorithm's :attr:`backbone_defaults` under the user's ``backbone_options``
        self.backbone_options = self.backbone_defaults | (backbone_options or {})
        self._image_shape = (in_channels, image_size)
        try:
            self.backbone = build_backbone(backbone, in_channels, image_size, **self.backbone_options)
        except ValueError as error:
            raise ValueError(f"model.backbone: {error}") from None

    def feature_size(self) -> int:
        """The backbone's feature dimension ``D`` for the configured images (a dry run; changes nothing)."""
        return feature_size(self.backbone, *self._image_shape)

    @property
    def weighting(self) -> WeightingStrategy | None:
        """The :class:`WeightingStrategy` of the training loss (``None``: every weight is 1).

        Raises:
            TypeError: on assigning an object without ``episode_weights``.
        """
        return self._weighting

    @weighting.setter
    def weighting(self, strategy: WeightingStrategy | None) -> None:
        if strategy is not None and not isinstance(strategy, WeightingStrategy):
            raise TypeError(
                f"{type(self).__name__}.weighting must be a WeightingStrategy (with an episode_weights(module, batch, "
                f"difficulties) method) or None, got {type(strategy).__name__}"
            )
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
        return EpisodeOutput(*query_loss(self.query_logits(batch), batch.query_labels))

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
        configure_speed(self)  # channels_last, compile_backbone, the check of cuda_graphs

    def use_channels_last(self) -> None:
        """Run the convolutions in the ``channels_last`` layout, weights and the backbone's images
        (:func:`~lightning_episodes.algorithms.speed.use_channels_last`). Idempotent; the Trainer calls it when
        ``channels_last=True``."""
        use_channels_last(self)

    # -- training ------------------------------------------------------------------------------------------
    def _sum_over_ranks(self, x: Tensor) -> Tensor:
        # a collective: called on every rank (DDPStrategy.reduce defaults to "mean", hence reduce_op)
        return self.trainer.strategy.reduce(x, reduce_op="sum")

    @override
    def training_step(self, batch: Episode, batch_idx: int) -> dict[str, Any]:
        trainer = self.trainer
        # resampling: an EpisodeSelector strategy chooses the step's episodes (an attribute lookup: a runtime
        # Protocol isinstance check walks the protocol's members on every step)
        select = getattr(self.weighting, "select_episodes", None)
        if select is not None:
            batch = select(self, batch)
        if self.cuda_graphs:
            self._graphed = self._graphed or GraphedLosses(self)
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
            normalization=step.normalization,
            reduce=self._sum_over_ranks,
            world_size=trainer.world_size,
            denominator=step.denominator,
        )
        # what the loggers write, and the last step (callback_metrics end with it); no host sync in between
        if logger_writes(trainer) or 0 < trainer.max_steps <= trainer.global_step + 1:
            self._log_training(out, result)
        return {
            "loss": result.loss,
            "difficulties": difficulties,
            "weights": step.weights.detach(),
            "weighted": result,
        }

    def _log_training(self, out: EpisodeOutput, result: WeightedLoss) -> None:
        """``train/loss`` (the mean of the finite episode losses; shown in the progress bar), ``train/acc`` and
        ``train/lr`` (the first parameter group's learning rate, this step's), on the steps where the loggers write
        and the last of ``max_steps`` (so the progress bar's ``train/loss`` and ``trainer.callback_metrics`` hold the
        last logged one)."""
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

    # -- evaluation ----------------------------------------------------------------------------------------
    @override
    def setup(self, stage: str) -> None:
        if self.requires_grad_in_evaluation:
            # adaptation needs autograd: evaluate under no_grad + enable_grad instead of inference_mode,
            # so users need no Trainer flag
            for loop in (self.trainer.validate_loop, self.trainer.test_loop):
                loop.inference_mode = False
        data = getattr(getattr(self.trainer, "datamodule", None), "data", None)
        if stage == "fit" and data is not None:  # the data module is set up first
            self.input_normalization = {"mean": [float(m) for m in data.mean], "std": [float(s) for s in data.std]}

    def _evaluate(self, batch: Episode, accuracy: EpisodeMeanCI, loss: EpisodeMeanCI) -> EpisodeOutput:
        with torch.enable_grad() if self.requires_grad_in_evaluation else torch.no_grad():
            out = self._output(batch)
        accuracy.update(out.accuracies)
        loss.update(out.losses.detach())
        self._guard.update(out.losses, out.accuracies)
        return out

    @override
    def on_validation_start(self) -> None:
        self._guard.start(self, "validation")

    @override
    def on_test_start(self) -> None:
        self._test_scores.reset()
        self.test_episode_scores = None
        self._guard.start(self, "test")

    @override
    def on_validation_model_eval(self) -> None:
        super().on_validation_model_eval()
        set_eval_batch_norm(self, self.eval_batch_norm)

    @override
    def on_test_model_eval(self) -> None:
        super().on_test_model_eval()
        set_eval_batch_norm(self, self.eval_batch_norm)

    @override
    def validation_step(self, batch: Episode, batch_idx: int) -> None:
        self._evaluate(batch, self.val_accuracy, self.val_loss)

    @override
    def test_step(self, batch: Episode, batch_idx: int) -> None:
        out = self._evaluate(batch, self.test_accuracy, self.test_loss)
        self._test_scores.update(batch.identity.episode_ids, out.difficulty, out.accuracies)

    def _log_evaluation(self, stage: str, accuracy: EpisodeMeanCI, loss: EpisodeMeanCI) -> dict[str, float]:
        self._guard.finish(self, "validation" if stage == "val" else stage)
        mean, ci, count = accuracy.compute()  # sums over ranks: identical everywhere
        results = {
            f"{stage}/acc": float(mean),
            f"{stage}/acc_ci95": float(ci),
            f"{stage}/loss": float(loss.compute()[0]),
            f"{stage}/episodes": float(count),
        }
        # already the same on every rank: the max over ranks keeps them exact (a mean over 3 ranks might round)
        # and tells Lightning they are synchronised (it warns about epoch-level values logged without sync_dist)
        self.log_dict(results, prog_bar=stage == "val", sync_dist=True, reduce_fx="max")
        # states re-created under inference mode would be read-only in a later no-grad evaluation
        with torch.inference_mode(False):
            accuracy.reset()
            loss.reset()
        return results

    @override
    def on_validation_epoch_end(self) -> None:
        self._log_evaluation("val", self.val_accuracy, self.val_loss)

    @override
    def on_test_epoch_end(self) -> None:
        self.test_results = self._log_evaluation("test", self.test_accuracy, self.test_loss)
        gather = cast(Callable[[Tensor], Tensor], self.all_gather)
        self.test_episode_scores = self._test_scores.compute(gather, self.trainer.world_size, self.device)
        self._test_scores.reset()

    # -- checkpoints ----------------------------------------------------------------------------------------
    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # what a later run needs without the config: the concrete class, and the data the model was trained
        # on (an offline reference must match the number of ways; reports name the training dataset)
        cls = type(self)
        info: dict[str, Any] = {"class_path": f"{cls.__module__}.{cls.__qualname__}", **(self.trained_on or {})}
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is not None and self.trainer.state.fn == "fit":
            for key in ("dataset", "ways", "shots", "queries"):
                value = getattr(datamodule, key if key != "dataset" else "dataset_name", None)
                if isinstance(value, int | str):
                    info[key] = value
        checkpoint["lightning_episodes"] = info
        if self.input_normalization is not None:
            checkpoint["input_normalization"] = self.input_normalization

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        info = checkpoint.get("lightning_episodes") or {}
        self.trained_on = {k: v for k, v in info.items() if k != "class_path"} or None
        self.input_normalization = checkpoint.get("input_normalization")

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

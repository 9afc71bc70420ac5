"""Validation and test of an :class:`~lightning_episodes.algorithms.base.EpisodicModule`: the mean accuracy and loss
± 95% CI over episodes (synchronised across devices), each test episode's scores, the batch-norm statistics of
evaluation, and the refusal to report a number for a model with NaN or inf parameters, buffers or outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, cast

import pytorch_lightning as pl
import torch
from torch import Tensor
from typing_extensions import override

from lightning_episodes.algorithms.interface import EpisodeOutput
from lightning_episodes.algorithms.metrics import EpisodeMeanCI, EpisodeScores, ScoredEpisodes
from lightning_episodes.algorithms.nonfinite import EvaluationGuard
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import EvalBatchNorm, set_eval_batch_norm

__all__ = ["EpisodicEvaluation"]


class EpisodicEvaluation(pl.LightningModule):
    """The evaluation hooks that :class:`~lightning_episodes.algorithms.base.EpisodicModule` inherits; an algorithm
    changes none of them. Each batch's episodes are scored by the algorithm's ``episode_losses``."""

    #: algorithms that adapt with gradients during evaluation (MAML, ANIL) set this to True
    requires_grad_in_evaluation: ClassVar[bool] = False
    #: batch-norm statistics at evaluation (``EpisodicModule``'s ``eval_batch_norm`` argument)
    eval_batch_norm: EvalBatchNorm

    def __init__(self) -> None:
        super().__init__()
        self.val_accuracy, self.test_accuracy = EpisodeMeanCI(), EpisodeMeanCI()
        self.val_loss, self.test_loss = EpisodeMeanCI(), EpisodeMeanCI()
        #: the ``test/*`` values of the last test (:class:`~lightning_episodes.callbacks.TestResultsWriter` writes them)
        self.test_results: dict[str, float] | None = None
        #: each test episode's id, difficulty and accuracy in the last test, over every process (the writer saves
        #: them as ``test_episodes.csv``, which ``lightning-episodes compare`` reads)
        self.test_episode_scores: ScoredEpisodes | None = None
        self._test_scores = EpisodeScores()
        self._guard = EvaluationGuard()  # no accuracy of a model with NaN or inf parameters or outputs

    def _output(self, batch: Episode) -> EpisodeOutput:
        """The algorithm's checked ``episode_losses`` (``EpisodicModule`` implements it)."""
        raise NotImplementedError

    @override
    def setup(self, stage: str) -> None:
        if self.requires_grad_in_evaluation:
            # adaptation needs autograd: evaluate under no_grad + enable_grad instead of inference_mode,
            # so users need no Trainer flag
            for loop in (self.trainer.validate_loop, self.trainer.test_loop):
                loop.inference_mode = False

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

"""What an algorithm exchanges with :class:`~lightning_episodes.algorithms.base.EpisodicModule` and the callbacks:
the per-episode output, the weighting seam, and the argument checks that name ``model.<argument>``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, TypeVar, runtime_checkable

import pytorch_lightning as pl
from torch import Tensor

from lightning_episodes.data.episode import Episode
from lightning_episodes.weighting import EpisodeWeights

#: the module a strategy is given, the one being trained: ``EpisodicModule`` declares its ``weighting`` a
#: ``WeightingStrategy[EpisodicModule]`` (this file cannot name it: ``base.py`` imports this file, never the reverse)
ModuleT = TypeVar("ModuleT", bound=pl.LightningModule, contravariant=True)


class EpisodeOutput:
    """What ``episode_losses`` returns for a batch of ``B`` episodes.

    Args:
        losses: ``[B]`` each episode's training loss: the mean query cross-entropy (plus any regulariser);
            the importance weights multiply it.
        accuracies: ``[B]`` each episode's query accuracy.
        difficulty: ``[B]`` each episode's difficulty Ω; by default its loss (read when :attr:`difficulty` is, so
            it follows a later change of ``losses``). FEAT, for instance, gives its main cross-entropy without the
            regulariser.
        query_logits: ``[B, Q, ways]`` the query scores the losses come from, where they do (the default
            ``episode_losses``); an adaptive task sampler learns the model's confusions from them. Default: ``None``.
    """

    __slots__ = ("_difficulty", "accuracies", "losses", "query_logits")

    def __init__(
        self, losses: Tensor, accuracies: Tensor, difficulty: Tensor | None = None, query_logits: Tensor | None = None
    ) -> None:
        self.losses, self.accuracies, self._difficulty = losses, accuracies, difficulty
        self.query_logits = query_logits

    @property
    def difficulty(self) -> Tensor:
        """``[B]`` each episode's difficulty, detached: the one given, else the losses."""
        return (self.losses if self._difficulty is None else self._difficulty).detach()

    @difficulty.setter
    def difficulty(self, value: Tensor | None) -> None:
        self._difficulty = value

    def __repr__(self) -> str:
        return f"EpisodeOutput(losses={self.losses}, accuracies={self.accuracies}, difficulty={self.difficulty})"


@runtime_checkable
class WeightingStrategy(Protocol[ModuleT]):
    """The seam through which importance weights reach the loss: assign one to
    :attr:`EpisodicModule.weighting` (``DifficultyWeightingCallback`` installs itself there); without one, every
    weight is 1 and the loss is the plain mean. Its methods are given the module being trained."""

    def episode_weights(self, module: ModuleT, batch: Episode, difficulties: Tensor) -> EpisodeWeights:
        """This rank's ``[B]`` detached, finite, non-negative weights of the step and what the loss divides by
        (:class:`~lightning_episodes.weighting.EpisodeWeights`: ``"ess"``, ``"sum_weights"`` or a global
        ``"denominator"``), passed on to :func:`~lightning_episodes.weighting.weighted_loss`."""
        ...


@runtime_checkable
class EpisodeSelector(Protocol[ModuleT]):
    """A weighting strategy that also chooses the step's episodes (``DifficultyWeightingCallback(mode="resample")``):
    :meth:`EpisodicModule.training_step` trains on what :meth:`select_episodes` returns instead of the loader's batch.
    """

    def select_episodes(self, module: ModuleT, batch: Episode) -> Episode:
        """This rank's episodes of the step, given the loader's ``batch`` (return it to train on it)."""
        ...


def check_min(name: str, value: float, minimum: float, inclusive: bool = True) -> None:
    """Raise ``ValueError("model.<name> must be >= minimum, got value")`` (``>`` unless ``inclusive``)."""
    if value < minimum or (not inclusive and value == minimum):
        raise ValueError(f"model.{name} must be {'>=' if inclusive else '>'} {minimum}, got {value}")


def check_choice(name: str, value: object, choices: Collection[str]) -> None:
    """Raise ``ValueError("model.<name> must be 'a' or 'b', got value")`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        allowed = " or ".join(f"{choice!r}" for choice in choices)
        raise ValueError(f"model.{name} must be {allowed}, got {value!r}")


def check_weighting(owner: object, strategy: object) -> None:
    """Raise ``TypeError`` naming ``owner``'s class unless ``strategy`` is a :class:`WeightingStrategy` or ``None``."""
    if strategy is not None and not isinstance(strategy, WeightingStrategy):
        raise TypeError(
            f"{type(owner).__name__}.weighting must be a WeightingStrategy (with an episode_weights(module, batch, "
            f"difficulties) method) or None, got {type(strategy).__name__}"
        )

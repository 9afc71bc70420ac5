r"""
Difficulty tracking
^^^^^^^^^^^^^^^^^^^

Does an episode's difficulty change during training? ("Uniform Sampling over Episode Difficulty", Arnold
et al., NeurIPS 2021, §4.2 and Figure 4). This callback re-scores one fixed set of episodes with the model
being trained every few steps and keeps every score; afterwards
:func:`~lightning_episodes.analysis.extreme_episodes` of the final scores and
:func:`~lightning_episodes.analysis.lines_cross` tell whether the easiest and hardest episodes ever swap.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.data.episode import EpisodeIdentity
from lightning_episodes.evaluation.scoring import (
    Split,
    evaluation_mode,
    score_batches,
    scoring_episodes,
    scoring_identities,
)
from lightning_episodes.evaluation.tables import DifficultyTable
from lightning_episodes.weighting.loss import stat_dtype

__all__ = ["DifficultyTrackingCallback"]

#: File written in the log folder when ``output`` is not given.
DEFAULT_OUTPUT = "difficulty_tracking.npz"


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"DifficultyTrackingCallback: {name} must be a positive integer, got {value!r}")


def fingerprint(identity: EpisodeIdentity) -> str:
    """A short digest of a set of episodes (their classes, support and query indices, in order)."""
    digest = hashlib.sha1()
    for tensor in (identity.classes, identity.support_indices, identity.query_indices):
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.to(torch.int64).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


class DifficultyTrackingCallback(Callback):
    """Re-scores a fixed set of episodes every ``every_n_steps`` optimizer steps and keeps every score.

    The set is ``episodes`` episodes of ``split`` fixed by the data seed (see
    :func:`~lightning_episodes.evaluation.scoring_episodes`; ``train``: training classes and sizes,
    never the episodes of the training stream). Scoring is as at evaluation (eval mode with the module's
    ``eval_batch_norm``, no gradient, MAML/ANIL still adapt) and changes neither the model nor any random
    state, so training is the same with or without this callback. It scores at step 0 (before the first
    update), at every multiple of ``every_n_steps``, at ``trainer.max_steps`` and when training ends.
    Under DDP every rank scores a share and the scores are gathered in episode order.

    After each scoring it logs ``difficulty_tracking/mean`` and ``accuracy`` and (rank 0) writes a ``.npz``
    file with ``steps [T]``, ``scores [T, E]`` (difficulties), ``accuracies [T, E]``, the episodes'
    ``episode_ids [E]``, ``classes``, ``support_indices`` and ``query_indices``, ``split`` and ``seed``; read
    it with ``numpy.load``. The scores are also in the checkpoint (plain tensors and lists), so a resumed run
    keeps them (with the extra step at which the interrupted run ended).

    Args:
        episodes: size of the fixed set (1,000 as in the paper).
        every_n_steps: optimizer steps between two scorings.
        split: ``"train"`` (default), ``"validation"`` or ``"test"``.
        output: the ``.npz`` file; a relative path is under the trainer's ``log_dir`` (default
            ``difficulty_tracking.npz`` there).
        batch_size: episodes per forward pass (default: the data module's ``eval_episodes_per_batch``).
        name: distinguishes the checkpointed state of several instances.

    Raises:
        ValueError: for a non-positive ``episodes``, ``every_n_steps`` or ``batch_size``, or an unknown split.
        TypeError: at ``setup``, without an :class:`~lightning_episodes.EpisodicModule`.

    Example::

        >>> callback = DifficultyTrackingCallback(episodes=1000, every_n_steps=500)
        >>> callback.state_key
        'DifficultyTrackingCallback[]'
        >>> # pl.Trainer(max_steps=10_000, callbacks=[callback]).fit(ProtoNet(), datamodule)
        >>> # easy, hard = extreme_episodes(callback.scores[-1], 50)
        >>> # lines_cross(callback.scores, easy, hard, callback.steps).crossed
    """

    def __init__(
        self,
        episodes: int = 1000,
        every_n_steps: int = 100,
        split: Split = "train",
        output: str | Path | None = None,
        batch_size: int | None = None,
        name: str = "",
    ) -> None:
        _positive_int("episodes", episodes)
        _positive_int("every_n_steps", every_n_steps)
        if batch_size is not None:
            _positive_int("batch_size", batch_size)
        if split not in ("train", "validation", "test"):
            raise ValueError(
                f"DifficultyTrackingCallback: split must be 'train', 'validation' or 'test', got {split!r}"
            )
        self.episodes, self.every_n_steps, self.split = episodes, every_n_steps, split
        self.output, self.batch_size, self.name = output, batch_size, name
        #: global steps at which the set was scored, in order
        self.steps: list[int] = []
        self._scores: list[Tensor] = []
        self._accuracies: list[Tensor] = []
        #: the tracked episodes (known after the first scoring)
        self.identity: EpisodeIdentity | None = None
        self.seed: int | None = None
        self._fingerprint: str | None = None
        self._path: Path | None = None

    @property
    @override
    def state_key(self) -> str:
        # fixed prefix, not the class name: subclasses restore checkpoints written with the base class
        return f"DifficultyTrackingCallback[{self.name}]"

    @property
    def scores(self) -> Tensor:
        """``[T, E]`` float64: the difficulty of tracked episode ``e`` at ``steps[t]``."""
        return torch.stack(self._scores) if self._scores else torch.zeros(0, self.episodes, dtype=torch.float64)

    @property
    def accuracies(self) -> Tensor:
        """``[T, E]`` float64: the accuracy of tracked episode ``e`` at ``steps[t]``."""
        return torch.stack(self._accuracies) if self._accuracies else torch.zeros(0, self.episodes, dtype=torch.float64)

    def table(self, t: int = -1) -> DifficultyTable:
        """The scores at ``steps[t]`` (default: the last) as a :class:`~lightning_episodes.analysis.DifficultyTable`.

        Raises:
            RuntimeError: before the first scoring.
        """
        if self.identity is None or not self._scores:
            raise RuntimeError("no scores yet: the callback scores during trainer.fit")
        i = self.identity
        return DifficultyTable.from_arrays(
            i.episode_ids, i.classes, i.support_indices, i.query_indices, self._scores[t], self._accuracies[t]
        )

    # -- hooks -------------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, EpisodicModule):
            raise TypeError(f"DifficultyTrackingCallback needs an EpisodicModule, got {type(pl_module).__name__}")

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # trainer.log_dir is a collective under DDP: resolve it here, on every rank
        path = Path(self.output if self.output is not None else DEFAULT_OUTPUT)
        if not path.is_absolute():
            path = Path(trainer.log_dir or trainer.default_root_dir) / path
        self._path = path

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.steps and trainer.global_step == 0:
            self._score(trainer, pl_module, 0)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step % self.every_n_steps == 0 or (trainer.max_steps > 0 and step >= trainer.max_steps):
            self._score(trainer, pl_module, step, log=True)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._score(trainer, pl_module, trainer.global_step)  # when training stopped early or by epochs

    # -- scoring -----------------------------------------------------------------------------------------------
    def _datamodule(self, trainer: pl.Trainer) -> EpisodicDataModule:
        datamodule = getattr(trainer, "datamodule", None)
        if not isinstance(datamodule, EpisodicDataModule):
            raise TypeError("DifficultyTrackingCallback needs the trainer's datamodule to be an EpisodicDataModule")
        return datamodule

    def _score(self, trainer: pl.Trainer, pl_module: pl.LightningModule, step: int, log: bool = False) -> None:
        if self.steps and self.steps[-1] == step:
            return
        assert isinstance(pl_module, EpisodicModule)  # checked in setup
        datamodule = self._datamodule(trainer)
        if self.identity is None:
            self._start(datamodule)
        episodes = scoring_episodes(
            datamodule, self.split, self.episodes, self.batch_size, trainer.global_rank, trainer.world_size
        )
        with trainer.precision_plugin.forward_context(), evaluation_mode(pl_module):
            identity, difficulty, accuracy = score_batches(pl_module, datamodule, episodes)
        difficulty, accuracy = self._gather(trainer, pl_module.device, identity.episode_ids, difficulty, accuracy)
        self.steps.append(int(step))
        self._scores.append(difficulty)
        self._accuracies.append(accuracy)
        if log:
            finite = difficulty[torch.isfinite(difficulty)]
            values = {"mean": float(finite.mean()) if len(finite) else math.nan, "accuracy": float(accuracy.mean())}
            for key, value in values.items():
                # identical on every rank already (gathered): no sync
                pl_module.log(f"difficulty_tracking/{key}", value, on_step=True, on_epoch=False, sync_dist=False)
        if trainer.is_global_zero:
            self.save(self._path or Path(trainer.default_root_dir) / DEFAULT_OUTPUT)

    def _start(self, datamodule: EpisodicDataModule) -> None:
        """Fix the tracked set; forget restored scores if they are of other episodes."""
        self.identity = scoring_identities(datamodule, self.split, self.episodes)
        self.seed = datamodule.seed
        current = fingerprint(self.identity)
        if self._fingerprint is not None and self._fingerprint != current and self.steps:
            rank_zero_warn(
                "DifficultyTrackingCallback: the restored scores are of other episodes (the data settings "
                "changed); tracking starts afresh"
            )
            self.steps, self._scores, self._accuracies = [], [], []
        self._fingerprint = current

    def _gather(
        self, trainer: pl.Trainer, device: torch.device, ids: Tensor, difficulty: Tensor, accuracy: Tensor
    ) -> tuple[Tensor, Tensor]:
        """All ranks' scores in episode order (rank ``r`` scored the episodes ``i ≡ r (mod W)``)."""
        world = trainer.world_size
        width = -(-self.episodes // world)  # ranks hold at most one episode less than others: pad
        dtype = stat_dtype(device)
        local = torch.full((width, 3), math.nan, dtype=dtype, device=device)
        local[: len(ids)] = torch.stack([ids.to(torch.float64), difficulty, accuracy], 1).to(device, dtype)
        gathered = trainer.strategy.all_gather(local).reshape(world, width, 3)
        # [W, width] -> [width, W] -> flat index position * W + rank = episode id
        ordered = gathered.transpose(0, 1).reshape(-1, 3)[: self.episodes].to("cpu", torch.float64)
        expected = torch.arange(self.episodes, dtype=torch.float64)
        if not torch.equal(ordered[:, 0], expected):
            raise RuntimeError("DifficultyTrackingCallback: the gathered scores are not in episode order")
        return ordered[:, 1].clone(), ordered[:, 2].clone()

    # -- output --------------------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write every score so far to ``path`` as ``.npz`` (atomically; see the class docstring for the keys)."""
        if self.identity is None:
            raise RuntimeError("no scores yet: the callback scores during trainer.fit")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {
            "steps": np.asarray(self.steps, dtype=np.int64),
            "scores": self.scores.numpy(),
            "accuracies": self.accuracies.numpy(),
            "episode_ids": self.identity.episode_ids.numpy(),
            "classes": self.identity.classes.numpy(),
            "support_indices": self.identity.support_indices.numpy(),
            "query_indices": self.identity.query_indices.numpy(),
            "split": np.asarray(self.split),
            "seed": np.asarray(-1 if self.seed is None else self.seed, dtype=np.int64),
        }
        temporary = path.with_name(f".{path.name}.tmp")
        with open(temporary, "wb") as handle:
            np.savez(handle, **arrays)  # type: ignore[arg-type]
        os.replace(temporary, path)

    # -- checkpointed state -----------------------------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": [int(s) for s in self.steps],
            "scores": self.scores.clone(),
            "accuracies": self.accuracies.clone(),
            "split": self.split,
            "episodes": int(self.episodes),
            "fingerprint": self._fingerprint,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        steps = [int(s) for s in state_dict.get("steps", [])]
        scores, accuracies = state_dict.get("scores"), state_dict.get("accuracies")
        same_set = state_dict.get("split") == self.split and state_dict.get("episodes") == self.episodes
        expected = (len(steps), self.episodes)
        if not (
            same_set
            and isinstance(scores, Tensor)
            and isinstance(accuracies, Tensor)
            and tuple(scores.shape) == tuple(accuracies.shape) == expected
        ):
            if steps:
                rank_zero_warn(
                    "DifficultyTrackingCallback: the checkpoint tracked another set of episodes "
                    f"({state_dict.get('episodes')} of {state_dict.get('split')!r}); tracking starts afresh"
                )
            return
        self.steps = steps
        self._scores = [row.to("cpu", torch.float64) for row in scores]
        self._accuracies = [row.to("cpu", torch.float64) for row in accuracies]
        self._fingerprint = state_dict.get("fingerprint")
        self.identity = None  # rebuilt (and checked against the fingerprint) at the next scoring

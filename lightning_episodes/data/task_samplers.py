"""Task samplers: which classes each training episode holds, from the literature's ways of choosing episodes.

Plain episodic training draws each episode's classes uniformly (:class:`~lightning_episodes.data.EpisodeSampler`). A
:class:`TaskSampler` chooses them instead, as a pure function of ``(seed, step, episode index, its state)``; the
data module keeps the owner of episode identity (the images of the chosen classes are still drawn from the
episode's own generator). Adaptive samplers learn their state from the model's outputs on the training episodes
(:meth:`TaskSampler.update`, fed the global batch identically on every rank by
:class:`~lightning_episodes.callbacks.TaskSamplerFeedback`) and checkpoint it with the data module, so a killed run
resumes bit for bit. Built in (``docs/method.md``, "Task samplers"):

- :class:`NoDiversityTask`, :class:`NoDiversityBatch`, :class:`NoDiversityTasksPerBatch`: the no-diversity controls
  of Kumar et al. (AAAI 2023);
- :class:`HardTaskMining`: online hard-task mining (Kumar et al.'s OHTM, after Sun et al.'s hard-task meta-batch,
  CVPR 2019);
- :class:`AdaptiveTaskSampler`: adaptive task sampling with class-pair potentials (Liu et al., ECCV 2020).

Class choices are positions ``0..N-1`` in the training split's class list; every random number comes from a
``torch.Generator`` seeded by ``mix_seed(seed, 6, step, j)`` (stream 6: never a stream of the episodes' images).
A sampler remembers its constructor's arguments: records name it by :meth:`TaskSampler.config`, its ``class_path``
and ``init_args``, as a YAML config does. :func:`~lightning_episodes.testing.check_task_sampler` checks the contract.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any, ClassVar, Final, NamedTuple

import torch
from torch import Tensor

from lightning_episodes._arguments import RemembersArguments, class_path
from lightning_episodes.data.sampler import mix_seed

__all__ = [
    "AdaptiveTaskSampler",
    "HardTaskMining",
    "NoDiversityBatch",
    "NoDiversityTask",
    "NoDiversityTasksPerBatch",
    "TaskFeedback",
    "TaskSampler",
    "describe_task_sampler",
]

#: the stream id of the task samplers' random numbers (sampler.py's STREAMS use 0-5)
_TASK_STREAM: Final[int] = 6
#: step index of draws made once per run (no training step is negative)
_ONCE: Final[int] = -1


def _generator(seed: int, step: int, episode: int) -> torch.Generator:
    return torch.Generator().manual_seed(mix_seed(seed, _TASK_STREAM, step, episode))


def _random_subset(generator: torch.Generator, size: int, count: int) -> Tensor:
    """``count`` of ``0..size-1`` in random order: the positions of the ``count`` smallest of ``size`` keys."""
    return torch.rand(size, generator=generator, dtype=torch.float64).argsort()[:count]


def _shuffled(classes: Tensor, generator: torch.Generator) -> Tensor:
    """``classes`` in a random order (the episode's labels follow the order of its classes)."""
    return classes[_random_subset(generator, len(classes), len(classes))]


class TaskFeedback(NamedTuple):
    """What the model did on a step's global batch of training episodes (every rank, in rank order).

    Attributes:
        step: the global step of the episodes.
        classes: int64 ``[B, ways]``: each episode's classes, as positions in the training split's class list.
        losses: float64 ``[B]``: each episode's training loss (non-finite: the episode taught nothing).
        confusion: float64 ``[B, ways, ways]``: ``confusion[e, i, j]`` the mean predicted probability of class ``j``
            over episode ``e``'s queries of class ``i`` (rows sum to 1); ``None`` if the model gives no query logits.
    """

    step: int
    classes: Tensor
    losses: Tensor
    confusion: Tensor | None = None


class TaskSampler(RemembersArguments, ABC):
    """Chooses the classes of each training episode (see the module's docstring).

    Subclasses implement :meth:`classes`; adaptive ones (``adaptive = True``) also :meth:`update`,
    :meth:`state_dict` and :meth:`load_state_dict`. :meth:`bind` gives the split's size once the data is loaded.
    """

    #: ``True`` when the sampler learns from the model (the Trainer then needs a ``TaskSamplerFeedback`` callback)
    adaptive: ClassVar[bool] = False
    #: ``True`` when :meth:`update` reads :attr:`TaskFeedback.confusion` (the algorithm must give query logits)
    needs_confusion: ClassVar[bool] = False
    #: ``True`` when the sampler reads the mean features of every training class (:meth:`set_class_features`)
    needs_class_features: ClassVar[bool] = False
    #: training images per class whose features are averaged (with ``needs_class_features``)
    images_per_class: int = 0
    #: the checkpoint of a frozen model that gives the class features (``None``: the model being trained)
    class_features_from: str | None = None

    num_classes: int = 0
    ways: int = 0
    episodes_per_batch: int = 0

    def config(self) -> dict[str, Any]:
        """``{"class_path": ..., "init_args": ...}``: the sampler as a YAML config names it, in plain values (a path
        as its text): what the data module's hyper-parameters, its checkpoints and the test records keep."""
        init_args = {k: str(v) if isinstance(v, PurePath) else v for k, v in self.init_args.items()}
        return {"class_path": class_path(type(self)), "init_args": init_args}

    def bind(self, num_classes: int, ways: int, episodes_per_batch: int) -> None:
        """Called by the data module's ``setup``: ``num_classes`` training classes, ``ways`` per episode, and
        ``episodes_per_batch`` episodes a step (the global batch).

        Raises:
            ValueError: if the sampler cannot serve these sizes (naming its argument).
        """
        self.num_classes, self.ways, self.episodes_per_batch = num_classes, ways, episodes_per_batch

    @abstractmethod
    def classes(self, seed: int, step: int, episodes: Sequence[int]) -> Tensor:
        """int64 ``[len(episodes), ways]``: the classes (positions in the split's class list, distinct within an
        episode) of the training episodes ``episodes`` of global step ``step``; a pure function of the arguments and
        the sampler's state."""

    def update(self, feedback: TaskFeedback) -> None:  # noqa: B027 (samplers that learn nothing keep nothing)
        """Learns from a step's global batch (called identically on every rank, after the step)."""

    def class_features_due(self, step: int) -> bool:
        """Whether the class features should be computed after global step ``step`` (``-1``: before the first step
        of a new fit), with ``needs_class_features``."""
        return False

    def set_class_features(self, features: Tensor) -> None:
        """Receives float64 ``[N, D]``: the mean feature of ``images_per_class`` training images of each class (the
        same on every rank), when :meth:`class_features_due` asks for them."""
        raise NotImplementedError(f"{type(self).__name__} reads no class features")

    def state_dict(self) -> dict[str, Any]:
        """The state, as plain numbers and CPU tensors."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: B027 (samplers that learn nothing)
        """Restores :meth:`state_dict`'s output exactly."""

    def _uniform(self, seed: int, step: int, episode: int) -> Tensor:
        return _random_subset(_generator(seed, step, episode), self.num_classes, self.ways)

    def __repr__(self) -> str:
        return describe_task_sampler(self.config())


class NoDiversityTask(TaskSampler):
    """Every training episode holds the same ``ways`` classes, drawn once from the seed (in a new order and with new
    images each time): Kumar et al. (AAAI 2023)'s "no diversity task" control, the least diverse stream."""

    def classes(self, seed: int, step: int, episodes: Sequence[int]) -> Tensor:
        task = self._uniform(seed, _ONCE, 0)
        return torch.stack([_shuffled(task, _generator(seed, step, j)) for j in episodes])


class NoDiversityBatch(TaskSampler):
    """Every step repeats the ``B`` class sets of one batch, drawn once from the seed, in a new order and with new
    images: Kumar et al.'s "no diversity batch" control (the batch's tasks are diverse, the stream is not)."""

    def classes(self, seed: int, step: int, episodes: Sequence[int]) -> Tensor:
        order = _random_subset(_generator(seed, step, _ONCE), self.episodes_per_batch, self.episodes_per_batch)
        tasks = [self._uniform(seed, _ONCE, int(order[j])) for j in episodes]  # the once-drawn batch, reordered
        shuffled = [_shuffled(task, _generator(seed, step, j)) for task, j in zip(tasks, episodes, strict=True)]
        return torch.stack(shuffled)


class NoDiversityTasksPerBatch(TaskSampler):
    """All ``B`` episodes of a step hold one class set, new each step (in a new order and with new images per
    episode): Kumar et al.'s "no diversity tasks per batch" control (the stream is diverse, a batch is not)."""

    def classes(self, seed: int, step: int, episodes: Sequence[int]) -> Tensor:
        task = self._uniform(seed, step, _ONCE)
        return torch.stack([_shuffled(task, _generator(seed, step, j)) for j in episodes])


class HardTaskMining(TaskSampler):
    """Online hard-task mining (Kumar et al., AAAI 2023, after Sun et al., CVPR 2019): a buffer keeps the
    ``buffer_size`` class sets with the highest training loss seen (each with the loss of its latest episode);
    from ``warmup_steps`` on, the first ``round(hard_fraction B)`` episodes of each step hold the buffer's hardest
    class sets (hardest first, in a new order of classes and with new images), the others uniform classes.

    Args:
        hard_fraction: share of each step's episodes drawn from the buffer, in ``(0, 1]`` (Kumar et al.: 0.5).
        buffer_size: class sets kept, ``>= 1`` (Kumar et al.: 50).
        warmup_steps: steps of uniform sampling first, ``>= 0`` (Kumar et al.: 32).

    Raises:
        ValueError: for an argument out of its range.
    """

    adaptive = True

    def __init__(self, hard_fraction: float = 0.5, buffer_size: int = 50, warmup_steps: int = 32) -> None:
        if not (isinstance(hard_fraction, int | float) and 0.0 < hard_fraction <= 1.0):
            raise ValueError(f"task_sampler.hard_fraction must be in (0, 1], got {hard_fraction!r}")
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise ValueError(f"task_sampler.buffer_size must be an integer >= 1, got {buffer_size!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"task_sampler.warmup_steps must be an integer >= 0, got {warmup_steps!r}")
        self.hard_fraction, self.buffer_size, self.warmup_steps = float(hard_fraction), buffer_size, warmup_steps
        #: class set (sorted positions) -> the training loss of its latest episode, at most ``buffer_size``
        self.buffer: dict[tuple[int, ...], float] = {}

    def hardest(self) -> list[tuple[int, ...]]:
        """The buffer's class sets, hardest first (ties: the smaller class positions first)."""
        return sorted(self.buffer, key=lambda task: (-self.buffer[task], task))

    def classes(self, seed: int, step: int, episodes: Sequence[int]) -> Tensor:
        hard = self.hardest() if step >= self.warmup_steps else []
        count = min(round(self.hard_fraction * self.episodes_per_batch), len(hard))
        chosen = []
        for j in episodes:
            if j < count:
                chosen.append(_shuffled(torch.tensor(hard[j], dtype=torch.long), _generator(seed, step, j)))
            else:
                chosen.append(self._uniform(seed, step, j))
        return torch.stack(chosen)

    def update(self, feedback: TaskFeedback) -> None:
        for classes, loss in zip(feedback.classes.tolist(), feedback.losses.tolist(), strict=True):
            if math.isfinite(loss):
                self.buffer[tuple(sorted(classes))] = float(loss)
        self.buffer = {task: self.buffer[task] for task in self.hardest()[: self.buffer_size]}

    def state_dict(self) -> dict[str, Any]:
        tasks = self.hardest()
        return {
            # [tasks, ways]; an empty buffer (before the first step) is [0, 0]
            "tasks": torch.tensor(tasks, dtype=torch.long).reshape(len(tasks), len(tasks[0]) if tasks else 0),
            "losses": torch.tensor([self.buffer[task] for task in tasks], dtype=torch.float64),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        tasks, losses = state.get("tasks"), state.get("losses")
        if tasks is None or losses is None:
            self.buffer = {}
            return
        self.buffer = {tuple(t): float(v) for t, v in zip(tasks.tolist(), losses.tolist(), strict=True)}


class AdaptiveTaskSampler(TaskSampler):
    """Adaptive task sampling (Liu et al., ECCV 2020): class-pair potentials learnt from the model's confusions, and
    a greedy class-pair choice of each episode's classes.

    The potential ``C(i, j) > 0`` of two classes grows where the model confuses them. After each step,
    ``C <- C^decay * exp(hardness * sum_e (S_e + S_e^T))``, ``S_e`` the episode's soft confusion among its classes
    (``S_e(i, j)``: the mean probability the model gives class ``j`` on the queries of class ``i``, ``i != j``);
    pairs no episode held only decay towards 1. An episode's first class is drawn with probability proportional to
    ``sum_j C(i, j)``, each next one proportional to the product of its potentials with the classes chosen so far.
    With every potential 1 (the start) this is uniform sampling. Kept as ``log C``.

    Args:
        decay: the exponent ``decay`` that forgets old confusions, in ``(0, 1]``.
        hardness: the weight ``hardness`` of a step's confusions, ``>= 0`` (0: uniform sampling).

    Raises:
        ValueError: for an argument out of its range.
    """

    adaptive = True
    needs_confusion = True

    def __init__(self, decay: float = 0.5, hardness: float = 1.0) -> None:
        if not (isinstance(decay, int | float) and 0.0 < decay <= 1.0):
            raise ValueError(f"task_sampler.decay must be in (0, 1], got {decay!r}")
        if not (isinstance(hardness, int | float) and math.isfinite(hardness) and hardness >= 0.0):
            raise ValueError(f"task_sampler.hardness must be a finite number >= 0, got {hardness!r}")
        self.decay, self.hardness = float(decay), float(hardness)
        #: ``log C`` ``[N, N]`` (float64; the diagonal is never read)
        self.log_potential = torch.zeros(0, 0, dtype=torch.float64)

    def bind(self, num_classes: int, ways: int, episodes_per_batch: int) -> None:
        super().bind(num_classes, ways, episodes_per_batch)
        if self.log_potential.shape != (num_classes, num_classes):
            self.log_potential = torch.zeros(num_classes, num_classes, dtype=torch.float64)

    def _scores(self) -> Tensor:
        scores = self.log_potential.clone()
        scores.fill_diagonal_(-math.inf)  # a class is never paired with itself
        return scores

    def classes(self, seed: int, step: int, episodes: Sequence[int]) -> Tensor:
        scores = self._scores()
        first = torch.logsumexp(scores, dim=1)  # log sum_j C(i, j)
        chosen = []
        for j in episodes:
            uniforms = torch.rand(self.ways, generator=_generator(seed, step, j), dtype=torch.float64)
            picked = [_draw(first, float(uniforms[0]))]
            total = scores[picked[0]].clone()
            for u in uniforms[1:].tolist():
                picked.append(_draw(total, u))
                total += scores[picked[-1]]
            chosen.append(torch.tensor(picked, dtype=torch.long))
        return torch.stack(chosen)

    def update(self, feedback: TaskFeedback) -> None:
        if feedback.confusion is None:
            raise ValueError("AdaptiveTaskSampler learns from the model's confusions: the model gave no query logits")
        ways = feedback.classes.shape[1]
        off_diagonal = ~torch.eye(ways, dtype=torch.bool)
        confusion = feedback.confusion.to(torch.float64) * off_diagonal
        pair = confusion + confusion.transpose(1, 2)  # S_e + S_e^T
        steps = torch.zeros_like(self.log_potential)
        rows = feedback.classes[:, :, None].expand(-1, ways, ways)
        cols = feedback.classes[:, None, :].expand(-1, ways, ways)
        finite = torch.isfinite(pair)
        steps.index_put_((rows[finite], cols[finite]), pair[finite], accumulate=True)
        self.log_potential = self.decay * self.log_potential + self.hardness * steps

    def state_dict(self) -> dict[str, Any]:
        return {"log_potential": self.log_potential.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("log_potential") is not None:
            self.log_potential = torch.as_tensor(state["log_potential"], dtype=torch.float64).clone()


def describe_task_sampler(recorded: str | Mapping[str, Any]) -> str:
    """A task sampler as text, from what a record keeps of it: its ``class_path`` and ``init_args``
    (``HardTaskMining(hard_fraction=0.5, buffer_size=50, warmup_steps=32)``), or an older record's text, as it is
    (those records kept the sampler's ``repr``, which reads the same).

    Example:
        >>> describe_task_sampler({"class_path": "mylab.RoundRobin", "init_args": {"groups": 2}})
        'RoundRobin(groups=2)'
    """
    if not isinstance(recorded, Mapping):
        return str(recorded)
    name = str(recorded.get("class_path", "?")).rpartition(".")[2]
    arguments = recorded.get("init_args") or {}
    return f"{name}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})"


def _draw(log_weights: Tensor, u: float) -> int:
    """The index ``i`` with probability ``exp(log_weights[i]) / sum``, by inverting the distribution at ``u``."""
    weights = torch.exp(log_weights - log_weights.max())
    cumulative = torch.cumsum(weights, 0)
    index = int(torch.searchsorted(cumulative, u * float(cumulative[-1]), right=True))
    return min(index, len(weights) - 1)

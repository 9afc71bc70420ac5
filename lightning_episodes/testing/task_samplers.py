"""The contract every task sampler keeps, checked for one of them by :func:`check_task_sampler`.

A :class:`TaskSamplerSpec` is a sampler class with the arguments that bring its adaptive part within a few steps (a
short warm-up). The checks play the data module and the ``TaskSamplerFeedback`` callback by hand: they bind the
sampler to a split, ask for each step's classes, and feed it fixed losses, soft confusions and class features (every
feedback a function of the step and the classes chosen), so they need no Trainer; ``trains_through_the_trainer``
alone fits a tiny model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor

from lightning_episodes.data import EpisodicDataModule, TaskFeedback, TaskSampler, describe_task_sampler, rank_slice
from lightning_episodes.evaluation.record import results_record
from lightning_episodes.testing._checks import Check, roundtrip, run_checks, same_state
from lightning_episodes.weighting.registry import import_object

#: the data seed of the checks' runs, and another one
SEEDS = (3, 4)
#: the step of the one episode whose loss is not finite (an episode that taught nothing)
NON_FINITE_STEP = 2


@dataclass(frozen=True)
class TaskSamplerSpec:
    """One task sampler and the split its contract is checked on.

    Args:
        cls: the sampler, a subclass of :class:`~lightning_episodes.data.TaskSampler` importable by its class path.
        options: its constructor's arguments (short warm-ups, so that a few steps reach what it learns).
        random: whether its choice changes from step to step (``False`` for a fixed cycle of class sets).
        num_classes: classes of the training split, ``N``.
        ways: classes of an episode.
        episodes_per_batch: episodes of a step, ``B`` (divisible by 2 and 4: the ranks of the slice check).
        steps: training steps of each run.
        name: its name in messages and test ids (default: the class's).
    """

    cls: type[TaskSampler]
    options: dict[str, Any] = field(default_factory=dict)
    random: bool = True
    num_classes: int = 12
    ways: int = 3
    episodes_per_batch: int = 4
    steps: int = 8
    name: str = ""

    def make(self) -> TaskSampler:
        """A fresh sampler with the spec's options, bound to its split."""
        sampler = self.cls(**self.options)
        sampler.bind(self.num_classes, self.ways, self.episodes_per_batch)
        return sampler

    def __str__(self) -> str:
        return self.name or self.cls.__name__


def feedback(step: int, classes: Tensor) -> TaskFeedback:
    """What the checks tell a sampler the model did on step ``step``'s global batch (``classes`` ``[B, ways]``): each
    episode's loss a function of its classes and the step (episode 0 of :data:`NON_FINITE_STEP` not finite), and soft
    confusions that grow as two classes' positions get closer."""
    losses = 0.5 + ((7 * classes.sum(1) + step) % 11).to(torch.float64) / 10
    if step == NON_FINITE_STEP:
        losses[0] = float("nan")
    distance = (classes[:, :, None] - classes[:, None, :]).abs().to(torch.float64)
    return TaskFeedback(step, classes.clone(), losses, torch.softmax(-distance / 3, dim=-1))


def class_features(spec: TaskSamplerSpec, step: int) -> Tensor:
    """The class features the checks give after step ``step`` (``-1``: before the first): float64
    ``[N, 2 ways]``, new at each step."""
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(spec.num_classes, 2 * spec.ways, generator=generator, dtype=torch.float64)


def _learn(spec: TaskSamplerSpec, sampler: TaskSampler, step: int, classes: Tensor) -> None:
    """The callback's part after step ``step`` whose global batch held ``classes``."""
    if sampler.adaptive:
        sampler.update(feedback(step, classes))
        if sampler.needs_class_features and sampler.class_features_due(step):
            sampler.set_class_features(class_features(spec, step))


def _start(spec: TaskSamplerSpec, sampler: TaskSampler) -> TaskSampler:
    """The callback's part before the first step of a new fit."""
    if sampler.adaptive and sampler.needs_class_features and sampler.class_features_due(-1):
        sampler.set_class_features(class_features(spec, -1))
    return sampler


def _run(spec: TaskSamplerSpec, sampler: TaskSampler, steps: Iterable[int], seed: int = SEEDS[0]) -> list[Tensor]:
    """Each step's global batch of classes, the sampler learning after each."""
    chosen = []
    for step in steps:
        classes = sampler.classes(seed, step, range(spec.episodes_per_batch))
        _learn(spec, sampler, step, classes)
        chosen.append(classes)
    return chosen


def _restored(spec: TaskSamplerSpec, sampler: TaskSampler) -> TaskSampler:
    """A fresh sampler given ``sampler``'s state through a checkpoint's save and ``weights_only`` load."""
    fresh = spec.make()
    fresh.load_state_dict(roundtrip(sampler.state_dict()))
    return fresh


def _chooses_distinct_classes_of_the_split(spec: TaskSamplerSpec) -> None:
    for step, classes in enumerate(_run(spec, _start(spec, spec.make()), range(spec.steps))):
        shape = (spec.episodes_per_batch, spec.ways)
        assert classes.dtype == torch.long, f"step {step}: {classes.dtype}, not int64"
        assert tuple(classes.shape) == shape, f"step {step}: shape {tuple(classes.shape)}, not {shape}"
        rows = classes.tolist()
        assert all(len(set(row)) == spec.ways for row in rows), f"step {step}: a class twice in an episode: {rows}"
        assert all(0 <= c < spec.num_classes for row in rows for c in row), f"step {step}: outside 0..N-1: {rows}"


def _is_a_pure_function_of_seed_step_and_position(spec: TaskSamplerSpec) -> None:
    sampler, seed, everything = _start(spec, spec.make()), SEEDS[0], range(spec.episodes_per_batch)
    chosen, others = [], []
    for step in range(spec.steps):
        whole = sampler.classes(seed, step, everything)
        assert torch.equal(sampler.classes(seed, step, everything), whole), f"step {step}: asked twice, two answers"
        backwards = sampler.classes(seed, step, list(reversed(everything)))
        assert torch.equal(backwards, whole.flip(0)), f"step {step}: a position's classes depend on the others asked"
        for j in everything:
            assert torch.equal(sampler.classes(seed, step, [j]), whole[j : j + 1]), f"step {step}: position {j} alone"
        copy = _restored(spec, sampler)
        assert torch.equal(copy.classes(seed, step, everything), whole), f"step {step}: the same state, other classes"
        chosen.append(whole)
        others.append(sampler.classes(SEEDS[1], step, everything))
        _learn(spec, sampler, step, whole)
    if spec.random:
        assert any(not torch.equal(c, chosen[0]) for c in chosen[1:]), "every step chose the same classes"
        assert any(not torch.equal(a, b) for a, b in zip(chosen, others, strict=True)), "another seed, the same classes"


def _a_rank_draws_its_slice_of_one_process(spec: TaskSamplerSpec) -> None:
    single = _run(spec, _start(spec, spec.make()), range(spec.steps))
    for world_size in (2, 4):
        ranks = [_start(spec, spec.make()) for _ in range(world_size)]  # one sampler a process
        for step in range(spec.steps):
            local = [
                sampler.classes(SEEDS[0], step, rank_slice(spec.episodes_per_batch, rank, world_size))
                for rank, sampler in enumerate(ranks)
            ]
            gathered = torch.cat(local)  # the all-gather, in rank order
            assert torch.equal(gathered, single[step]), f"{world_size} processes, step {step}: {gathered.tolist()}"
            for sampler in ranks:  # every rank learns from the global batch
                _learn(spec, sampler, step, gathered)


def _state_survives_a_checkpoint(spec: TaskSamplerSpec) -> None:
    sampler = _start(spec, spec.make())
    for step in range(spec.steps):
        copy = _restored(spec, sampler)
        assert same_state(copy.state_dict(), sampler.state_dict()), f"after step {step - 1}: the state loads otherwise"
        everything = range(spec.episodes_per_batch)
        classes = sampler.classes(SEEDS[0], step, everything)
        assert torch.equal(copy.classes(SEEDS[0], step, everything), classes), f"step {step}: restored, other classes"
        _learn(spec, sampler, step, classes)


def _a_resumed_run_continues_exactly(spec: TaskSamplerSpec) -> None:
    uninterrupted = _start(spec, spec.make())
    expected = _run(spec, uninterrupted, range(spec.steps))
    stop = spec.steps // 2
    first = _start(spec, spec.make())
    _run(spec, first, range(stop))
    resumed = _restored(spec, first)  # a resumed fit gets no first features: its checkpoint holds them
    for step, classes in zip(range(stop, spec.steps), _run(spec, resumed, range(stop, spec.steps)), strict=True):
        assert torch.equal(classes, expected[step]), f"resumed at step {stop}, step {step}: other classes"
    assert same_state(resumed.state_dict(), uninterrupted.state_dict()), "the state at the end of the resumed run"


def _learns_deterministically_from_feedback(spec: TaskSamplerSpec) -> None:
    a, b = _start(spec, spec.make()), _start(spec, spec.make())
    initial = spec.make().state_dict()
    for step in range(spec.steps):
        classes = a.classes(SEEDS[0], step, range(spec.episodes_per_batch))
        told = feedback(step, classes)
        kept = [told.classes.clone(), told.losses.clone(), None if told.confusion is None else told.confusion.clone()]
        if a.adaptive:
            a.update(told)
            for before, after in zip(kept, told[1:], strict=True):
                same = after is None or torch.allclose(after, before, rtol=0.0, atol=0.0, equal_nan=True)  # type: ignore[arg-type]
                assert same, f"step {step}: update changed the feedback it was given"
            if a.needs_class_features and a.class_features_due(step):
                a.set_class_features(class_features(spec, step))
        _learn(spec, b, step, classes)
        state = a.state_dict()
        assert same_state(state, b.state_dict()), f"step {step}: the same feedback, two states"
        assert same_state(_restored(spec, a).state_dict(), state), f"step {step}: the state after a round trip"
        for key, value in state.items():
            if isinstance(value, Tensor) and value.is_floating_point():
                assert bool(torch.isfinite(value).all()), f"step {step}: state[{key!r}] is not finite"
    assert not same_state(a.state_dict(), initial), f"{spec.steps} steps of feedback left the state as it started"


def _a_plain_sampler_keeps_no_state(spec: TaskSamplerSpec) -> None:
    sampler = spec.make()
    assert sampler.state_dict() == {}, f"state {sampler.state_dict()} without adaptive = True (never checkpointed)"


def _is_recorded_as_class_path_and_init_args(spec: TaskSamplerSpec) -> None:
    sampler = spec.make()
    config = sampler.config()
    path = f"{spec.cls.__module__}.{spec.cls.__qualname__}"
    assert config.get("class_path") == path, f"config() names {config.get('class_path')!r}, not {path!r}"
    init_args = config.get("init_args")
    assert isinstance(init_args, dict), f"config()'s init_args {init_args!r}"
    for name, value in spec.options.items():
        assert name in init_args, f"config()'s init_args lack {name!r}"
        assert init_args[name] == value or str(value) == init_args[name], f"init_args[{name!r}] = {init_args[name]!r}"
    assert json.loads(json.dumps(config)) == config, f"config() is not plain JSON: {config!r}"
    rebuilt = import_object(config["class_path"])(**init_args)  # what a config or a record names, built again
    assert type(rebuilt) is spec.cls, f"{config['class_path']} builds a {type(rebuilt).__name__}"
    rebuilt.bind(spec.num_classes, spec.ways, spec.episodes_per_batch)
    assert rebuilt.config() == config, "built again from its config, it names other arguments"
    every = range(spec.episodes_per_batch)
    assert torch.equal(rebuilt.classes(SEEDS[0], 0, every), sampler.classes(SEEDS[0], 0, every)), "rebuilt differs"
    data = EpisodicDataModule(task_sampler=spec.make()).hparams
    assert data["task_sampler"] == config, f"the data module's hyper-parameters keep {data['task_sampler']!r}"
    results = {"test/acc": 0.5, "test/acc_ci95": 0.01, "test/loss": 1.0, "test/episodes": 1}
    record = results_record(
        results, "ProtoNet", {}, dict(data), eval_batch_norm=None, global_step=0, ckpt_path=None, seed=0,
        sampling=None, sampling_defaults=None, trained_on=None, validation=[], made_with={},
    )  # fmt: skip
    assert record["data"].get("task_sampler") == config, f"a test record keeps {record['data'].get('task_sampler')!r}"
    assert repr(sampler) == describe_task_sampler(config), f"its repr {sampler!r} is not what a report shows"


class _Served(pl.Callback):
    """Each step's classes (global ids) as the model saw them, and as the sampler chose them at that step."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, Tensor, Tensor]] = []

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        datamodule: EpisodicDataModule = trainer.datamodule  # type: ignore[attr-defined]
        sampler, step = datamodule.task_sampler, trainer.global_step
        assert sampler is not None
        positions = sampler.classes(datamodule.train_seed, step, range(datamodule.episodes_per_batch))
        self.seen.append((step, batch.identity.classes.cpu(), datamodule.samplers["train"].classes[positions]))


def _trains_through_the_trainer(spec: TaskSamplerSpec) -> None:
    from lightning_episodes.algorithms import ProtoNet
    from lightning_episodes.callbacks import TaskSamplerFeedback
    from lightning_episodes.testing.tiny import tiny_datamodule, tiny_trainer

    pl.seed_everything(0)
    served = _Served()
    trainer = tiny_trainer(max_steps=4, limit_val_batches=0, callbacks=[served, TaskSamplerFeedback()])
    datamodule = tiny_datamodule(task_sampler=spec.make(), ways=spec.ways, episodes_per_batch=spec.episodes_per_batch)
    trainer.fit(ProtoNet(image_size=16), datamodule)
    assert [step for step, _, _ in served.seen] == list(range(4)), "the fit did not train 4 steps"
    for step, trained, chosen in served.seen:
        assert torch.equal(trained, chosen), f"step {step}: trained on {trained.tolist()}, chose {chosen.tolist()}"
    sampler = datamodule.task_sampler
    assert sampler is not None
    state = roundtrip(datamodule.state_dict()).get("task_sampler", {})
    assert same_state(state, sampler.state_dict()), "the data module's checkpointed state is not the sampler's"


#: the properties of the task-sampler contract, by name, in the order :func:`check_task_sampler` checks them
TASK_SAMPLER_CHECKS: dict[str, Check[TaskSamplerSpec]] = {
    "chooses_distinct_classes_of_the_split": Check(_chooses_distinct_classes_of_the_split),
    "is_a_pure_function_of_seed_step_and_position": Check(_is_a_pure_function_of_seed_step_and_position),
    "a_rank_draws_its_slice_of_one_process": Check(_a_rank_draws_its_slice_of_one_process),
    "state_survives_a_checkpoint": Check(_state_survives_a_checkpoint),
    "a_resumed_run_continues_exactly": Check(_a_resumed_run_continues_exactly),
    "learns_deterministically_from_feedback": Check(
        _learns_deterministically_from_feedback, applies=lambda spec: spec.cls.adaptive
    ),
    "a_plain_sampler_keeps_no_state": Check(
        _a_plain_sampler_keeps_no_state, applies=lambda spec: not spec.cls.adaptive
    ),
    "is_recorded_as_class_path_and_init_args": Check(_is_recorded_as_class_path_and_init_args),
    # a reference checkpoint's features need a trained model: the other checks give them by hand
    "trains_through_the_trainer": Check(
        _trains_through_the_trainer, applies=lambda spec: spec.make().class_features_from is None
    ),
}


def check_task_sampler(spec: TaskSamplerSpec, checks: Sequence[str] | None = None) -> None:
    """Check that a task sampler keeps the contract of every task sampler (a second on a CPU, and a few for the fit):

    - ``chooses_distinct_classes_of_the_split``: int64 ``[B, ways]`` positions in ``0..N-1``, distinct in an episode;
    - ``is_a_pure_function_of_seed_step_and_position``: the same ``(seed, step, positions)`` and state give the same
      classes, a position's classes whichever others are asked with it, and a sampler given the same state the same;
      with ``random``, steps and seeds differ;
    - ``a_rank_draws_its_slice_of_one_process``: under 2 and 4 processes, each rank's draw of its slice of the step
      (:func:`~lightning_episodes.data.rank_slice`), gathered in rank order, is the one process's global batch;
    - ``state_survives_a_checkpoint``: ``state_dict`` through ``torch.save`` and a ``weights_only`` load, into a fresh
      sampler, gives the same state and the same next classes;
    - ``a_resumed_run_continues_exactly``: a run stopped halfway and resumed from its state chooses and learns what
      the uninterrupted run does, bit for bit;
    - ``learns_deterministically_from_feedback`` (adaptive samplers): the same feedback gives the same state (finite,
      kept through a round trip), leaves the feedback as it was, and changes the state;
    - ``a_plain_sampler_keeps_no_state`` (the others): an empty ``state_dict``;
    - ``is_recorded_as_class_path_and_init_args``: :meth:`~lightning_episodes.data.TaskSampler.config` is its class
      path and JSON ``init_args``, which build it again; the data module's hyper-parameters and a test record keep it;
    - ``trains_through_the_trainer`` (not for a reference checkpoint's features): a 4-step fit with
      ``TaskSamplerFeedback`` trains on the sampler's classes and checkpoints its state.

    Args:
        spec: the sampler and its split.
        checks: names of :data:`TASK_SAMPLER_CHECKS` to run (default: all).

    Raises:
        AssertionError: naming the sampler and the first property it breaks.

    Example:
        >>> from lightning_episodes.data import HardTaskMining
        >>> spec = TaskSamplerSpec(HardTaskMining, {"warmup_steps": 1})
        >>> check_task_sampler(spec, ["a_resumed_run_continues_exactly"])
    """
    run_checks(TASK_SAMPLER_CHECKS, spec, checks)

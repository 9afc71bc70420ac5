"""Task samplers against hand-computed cases and exact laws: what each chooses, what it learns, and its state."""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np
import pytest
import torch
from scipy import stats

from lightning_episodes.data import EpisodeSampler, TaskFeedback, TaskSampler
from lightning_episodes.data.task_samplers import (
    AdaptiveTaskSampler,
    HardTaskMining,
    NoDiversityBatch,
    NoDiversityTask,
    NoDiversityTasksPerBatch,
)
from tests.helpers import roundtrip

N, WAYS, B = 8, 3, 6
SAMPLERS = {
    "no_diversity_task": NoDiversityTask,
    "no_diversity_batch": NoDiversityBatch,
    "no_diversity_tasks_per_batch": NoDiversityTasksPerBatch,
    "hard_task_mining": lambda: HardTaskMining(warmup_steps=0),
    "adaptive": AdaptiveTaskSampler,
}


def _bound(make: object, num_classes: int = N, ways: int = WAYS, batch: int = B) -> TaskSampler:
    sampler = make()  # type: ignore[operator]
    sampler.bind(num_classes, ways, batch)
    return sampler


def _sets(classes: torch.Tensor) -> list[tuple[int, ...]]:
    return [tuple(sorted(row)) for row in classes.tolist()]


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_choice_is_a_pure_function_of_seed_step_and_position(name: str) -> None:
    """The same (seed, step, j) gives the same classes whichever other positions are asked with it (a rank's slice
    is the global batch's), distinct classes of the split in each episode."""
    sampler = _bound(SAMPLERS[name])
    whole = sampler.classes(3, 5, range(B))
    assert whole.dtype == torch.long
    assert whole.shape == (B, WAYS)
    assert torch.equal(sampler.classes(3, 5, [4, 5]), whole[4:])
    assert torch.equal(sampler.classes(3, 5, range(B)), whole)
    assert all(len(set(row)) == WAYS and min(row) >= 0 and max(row) < N for row in whole.tolist())
    assert not torch.equal(sampler.classes(4, 5, range(B)), whole)  # another seed, another stream


def test_no_diversity_task_repeats_one_class_set_in_new_orders() -> None:
    sampler = _bound(NoDiversityTask)
    chosen = torch.cat([sampler.classes(0, step, range(B)) for step in range(20)])
    assert len(set(_sets(chosen))) == 1
    assert len({tuple(row) for row in chosen.tolist()}) > 1  # the labels' order changes


def test_no_diversity_batch_repeats_one_batch_of_class_sets() -> None:
    sampler = _bound(NoDiversityBatch)
    batches = [sorted(_sets(sampler.classes(0, step, range(B)))) for step in range(20)]
    assert all(batch == batches[0] for batch in batches)
    assert len(set(batches[0])) > 1  # the batch itself is diverse
    orders = {tuple(_sets(sampler.classes(0, step, range(B)))) for step in range(20)}
    assert len(orders) > 1  # in a new order each step


def test_no_diversity_tasks_per_batch_shares_one_class_set_per_step() -> None:
    sampler = _bound(NoDiversityTasksPerBatch)
    per_step = []
    for step in range(20):
        sets = set(_sets(sampler.classes(0, step, range(B))))
        assert len(sets) == 1
        per_step.append(sets.pop())
    assert len(set(per_step)) > 1


def test_hard_task_mining_keeps_the_hardest_class_sets_and_serves_them_first() -> None:
    sampler = _bound(lambda: HardTaskMining(hard_fraction=0.5, buffer_size=3, warmup_steps=2))
    classes = torch.tensor([[0, 1, 2], [3, 4, 5], [2, 1, 0], [5, 6, 7], [1, 2, 3], [0, 6, 7]])
    losses = torch.tensor([1.0, 3.0, 2.0, math.nan, 2.5, 0.5], dtype=torch.float64)
    sampler.update(TaskFeedback(0, classes, losses))
    # (0, 1, 2) was seen twice: its latest loss (2.0) counts; the NaN episode is left out; 3 kept
    assert sampler.buffer == {(3, 4, 5): 3.0, (1, 2, 3): 2.5, (0, 1, 2): 2.0}
    assert sampler.hardest() == [(3, 4, 5), (1, 2, 3), (0, 1, 2)]
    empty = _bound(lambda: HardTaskMining(hard_fraction=0.5, buffer_size=3, warmup_steps=2))
    assert torch.equal(sampler.classes(0, 1, range(B)), empty.classes(0, 1, range(B)))  # the warm-up: uniform
    served = sampler.classes(0, 2, range(B))  # after it: round(0.5 * 6) = 3 hard episodes, hardest first
    assert _sets(served[:3]) == [(3, 4, 5), (1, 2, 3), (0, 1, 2)]
    assert torch.equal(served[3:], empty.classes(0, 2, range(3, B)))  # the others: uniform classes
    restored = _bound(lambda: HardTaskMining(hard_fraction=0.5, buffer_size=3, warmup_steps=2))
    restored.load_state_dict(roundtrip(sampler.state_dict()))
    assert restored.buffer == sampler.buffer
    assert torch.equal(restored.classes(0, 7, range(B)), sampler.classes(0, 7, range(B)))


def test_hard_task_mining_serves_uniform_classes_during_its_warm_up() -> None:
    mining = _bound(lambda: HardTaskMining(warmup_steps=5))
    mining.update(TaskFeedback(0, torch.tensor([[0, 1, 2]]), torch.tensor([9.0], dtype=torch.float64)))
    fresh = _bound(lambda: HardTaskMining(warmup_steps=5))
    assert torch.equal(mining.classes(0, 4, range(B)), fresh.classes(0, 4, range(B)))
    assert (0, 1, 2) in _sets(mining.classes(0, 5, range(B)))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hard_fraction": 0.0}, r"hard_fraction must be in \(0, 1\]"),
        ({"buffer_size": 0}, "buffer_size must be an integer >= 1"),
        ({"warmup_steps": -1}, "warmup_steps must be an integer >= 0"),
    ],
)
def test_hard_task_mining_arguments_are_named(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HardTaskMining(**options)  # type: ignore[arg-type]


def test_adaptive_sampling_learns_the_class_pair_potentials_by_hand() -> None:
    """One 2-way episode of classes (0, 1) with soft confusion S = [[.8, .2], [.4, .6]]: log C(0, 1) = log C(1, 0)
    = hardness (0.2 + 0.4); then a step without them decays it by the exponent."""
    sampler = _bound(lambda: AdaptiveTaskSampler(decay=0.5, hardness=2.0), num_classes=4, ways=2, batch=1)
    confusion = torch.tensor([[[0.8, 0.2], [0.4, 0.6]]], dtype=torch.float64)
    sampler.update(TaskFeedback(0, torch.tensor([[0, 1]]), torch.tensor([1.0]), confusion))
    expected = torch.zeros(4, 4, dtype=torch.float64)
    expected[0, 1] = expected[1, 0] = 2.0 * 0.6
    torch.testing.assert_close(sampler.log_potential, expected, rtol=0, atol=1e-15)
    other = torch.tensor([[[0.9, 0.1], [0.3, 0.7]]], dtype=torch.float64)
    sampler.update(TaskFeedback(1, torch.tensor([[3, 2]]), torch.tensor([1.0]), other))
    expected = 0.5 * expected
    expected[3, 2] = expected[2, 3] = 2.0 * 0.4
    torch.testing.assert_close(sampler.log_potential, expected, rtol=0, atol=1e-15)
    restored = _bound(AdaptiveTaskSampler, num_classes=4, ways=2, batch=1)
    restored.load_state_dict(roundtrip(sampler.state_dict()))
    assert torch.equal(restored.log_potential, sampler.log_potential)


def _counts(sampler: TaskSampler, draws: int) -> dict[tuple[int, ...], int]:
    found: dict[tuple[int, ...], int] = {}
    for step in range(draws // 50):
        for row in sampler.classes(0, step, range(50)).tolist():
            found[tuple(row)] = found.get(tuple(row), 0) + 1
    return found


def test_adaptive_sampling_draws_ordered_classes_with_the_greedy_class_pair_law() -> None:
    """With ways = 3 of N = 4 and potentials C: P(i, j, k) = [sum_l C(i, l) / Z] [C(i, j) / sum_l C(i, l)]
    [C(i, k) C(j, k) / sum_m C(i, m) C(j, m)] over the classes not chosen yet; the draws pass a chi-square test
    against it, and with every potential 1 the law is uniform over the 24 ordered triples."""
    sampler = _bound(AdaptiveTaskSampler, num_classes=4, ways=3, batch=50)
    log_c = torch.tensor(
        [[0.0, 1.0, 0.2, -0.5], [1.0, 0.0, 0.7, 0.1], [0.2, 0.7, 0.0, 1.5], [-0.5, 0.1, 1.5, 0.0]], dtype=torch.float64
    )
    for potentials in (torch.zeros(4, 4, dtype=torch.float64), log_c):
        sampler.log_potential = potentials.clone()
        c = potentials.exp().numpy()
        np.fill_diagonal(c, 0.0)
        z = c.sum()
        law = {}
        for i, j, k in permutations(range(4), 3):
            rest = [m for m in range(4) if m not in (i, j)]
            law[(i, j, k)] = (
                c[i].sum() / z * c[i, j] / c[i].sum() * c[i, k] * c[j, k] / sum(c[i, m] * c[j, m] for m in rest)
            )
        assert sum(law.values()) == pytest.approx(1.0)
        counts = _counts(sampler, 12_000)
        keys = sorted(law)
        observed = np.array([counts.get(key, 0) for key in keys])
        expected = np.array([law[key] for key in keys]) * observed.sum()
        assert stats.chisquare(observed, expected).pvalue > 1e-3


@pytest.mark.parametrize(("options", "message"), [({"decay": 0.0}, "decay"), ({"hardness": -1.0}, "hardness")])
def test_adaptive_sampling_arguments_are_named(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=f"task_sampler.{message}"):
        AdaptiveTaskSampler(**options)


def test_adaptive_sampling_needs_the_confusions() -> None:
    sampler = _bound(AdaptiveTaskSampler)
    with pytest.raises(ValueError, match="confusions"):
        sampler.update(TaskFeedback(0, torch.tensor([[0, 1, 2]]), torch.tensor([1.0])))


def test_given_classes_draw_the_images_the_uniform_choice_would() -> None:
    """The episode sampler's own choice, handed back as ``classes``, gives the same episode: the images of each class
    come from the episode's random numbers whoever chose the classes."""
    labels = torch.arange(10).repeat_interleave(7)
    sampler = EpisodeSampler(labels, classes=range(2, 10), ways=3, shots=2, queries=2)
    plain = sampler.sample(1, "train", 4, range(5), first_id=20)
    positions = (plain.classes[..., None] == sampler.classes).long().argmax(-1)
    given = sampler.sample(1, "train", 4, range(5), first_id=20, classes=positions)
    for field in ("classes", "support_indices", "query_indices", "episode_ids"):
        assert torch.equal(getattr(given, field), getattr(plain, field)), field
    chosen = sampler.sample(1, "train", 4, range(2), classes=torch.tensor([[0, 1, 2], [7, 6, 5]]))
    assert chosen.classes.tolist() == [[2, 3, 4], [9, 8, 7]]
    assert (labels[chosen.support_indices] == chosen.classes[..., None]).all()
    with pytest.raises(ValueError, match=r"classes must have shape \(2, 3\)"):
        sampler.sample(1, "train", 4, range(2), classes=torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"positions in 0..7"):
        sampler.sample(1, "train", 4, range(1), classes=torch.tensor([[0, 1, 8]]))

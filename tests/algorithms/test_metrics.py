"""The evaluation metrics: EpisodeMeanCI against numpy's mean and standard deviation, and EpisodeScores, which
returns every episode exactly once in id order whatever the batches and however the episodes were split among
processes (ranks simulated by threads meeting in a fake all_gather, uneven and empty shares included)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from lightning_episodes.algorithms.metrics import EpisodeMeanCI, EpisodeScores, ScoredEpisodes

values = st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=60)


@given(values)
def test_mean_ci_is_numpys_mean_and_196_population_sd_over_root_n(data: list[float]) -> None:
    metric = EpisodeMeanCI()
    metric.update(torch.tensor(data, dtype=torch.float64))
    mean, ci, count = metric.compute()
    assert int(count) == len(data)
    assert float(mean) == pytest.approx(np.mean(data), abs=1e-12)
    assert float(ci) == pytest.approx(1.96 * np.std(data) / np.sqrt(len(data)), abs=1e-7)


def _episodes(count: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """``count`` episodes: ids 0..count-1 in a shuffled order, with float32 difficulties and accuracies."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randperm(count, generator=generator)
    return ids, torch.rand(count, generator=generator) * 3, torch.randint(0, 16, (count,), generator=generator) / 15


def _check(scored: ScoredEpisodes, ids: Tensor, difficulty: Tensor, accuracy: Tensor) -> None:
    order = torch.argsort(ids)
    assert scored.episode_ids.dtype == torch.int64
    assert scored.difficulty.dtype == torch.float64
    assert scored.episode_ids.tolist() == list(range(len(ids)))
    assert scored.difficulty.tolist() == difficulty[order].double().tolist()  # float32 values, exactly
    assert scored.accuracy.tolist() == accuracy[order].double().tolist()


@given(st.integers(0, 40), st.lists(st.integers(1, 7), min_size=1, max_size=12), st.integers(0, 2**16))
def test_one_process_returns_each_episode_once_in_id_order(count: int, sizes: list[int], seed: int) -> None:
    ids, difficulty, accuracy = _episodes(count, seed)
    scores = EpisodeScores()
    start = 0
    for size in sizes:  # batches of any sizes (the last takes the rest)
        stop = count if size is sizes[-1] else min(start + size, count)
        scores.update(ids[start:stop], difficulty[start:stop], accuracy[start:stop])
        start = stop
    _check(scores.compute(), ids, difficulty, accuracy)
    scores.reset()
    assert len(scores.compute().episode_ids) == 0


def _fake_all_gathers(world_size: int) -> list[Callable[[Tensor], Tensor]]:
    """One all_gather per simulated rank: each call waits for every rank's tensor and returns them stacked."""
    barrier, slots = threading.Barrier(world_size), [torch.zeros(0)] * world_size

    def gather_for(rank: int) -> Callable[[Tensor], Tensor]:
        def all_gather(tensor: Tensor) -> Tensor:
            slots[rank] = tensor.clone()
            barrier.wait()
            shapes = {tuple(t.shape) for t in slots}
            assert len(shapes) == 1, f"all_gather needs one shape on every rank, got {shapes}"
            stacked = torch.stack(list(slots))
            barrier.wait()
            return stacked

        return all_gather

    return [gather_for(rank) for rank in range(world_size)]


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 30), st.integers(2, 4), st.integers(1, 5), st.integers(0, 2**16))
def test_ranks_gather_every_episode_once_in_id_order(count: int, world_size: int, batch: int, seed: int) -> None:
    ids, difficulty, accuracy = _episodes(count, seed)
    # rank r holds the episodes i = r (mod world size), in batches: as the evaluation sets split them (a rank may
    # hold one more episode than another, or none)
    shares = [torch.arange(count)[rank::world_size] for rank in range(world_size)]
    gathers, results = _fake_all_gathers(world_size), [None] * world_size

    def rank_main(rank: int) -> None:
        scores = EpisodeScores()
        mine = shares[rank]
        for start in range(0, len(mine), batch):
            part = mine[start : start + batch]
            scores.update(ids[part], difficulty[part], accuracy[part])
        results[rank] = scores.compute(gathers[rank], world_size)  # type: ignore[call-overload]

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for scored in results:  # every rank ends with the whole, ordered set
        assert isinstance(scored, ScoredEpisodes)
        _check(scored, ids, difficulty, accuracy)

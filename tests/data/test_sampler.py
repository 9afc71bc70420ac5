"""The episode sampler: invariants over many seeds and shapes, determinism, rank/worker invariance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from torch.utils.data import DataLoader

from lightning_episodes.data import EpisodeAssembler, EpisodeSampler, EvaluationEpisodes, TrainingEpisodes
from lightning_episodes.testing import decode_rows, tiny_dataset


def _sampler(ways: int = 5, shots: int = 2, queries: int = 3, uneven: bool = False) -> EpisodeSampler:
    data = tiny_dataset(uneven=uneven)
    return EpisodeSampler(data.labels, data.splits["train"], ways, shots, queries)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**62),
    step=st.integers(0, 10**9),
    ways=st.integers(1, 12),
    shots=st.integers(1, 5),
    queries=st.integers(1, 5),
    uneven=st.booleans(),
)
def test_episodes_are_valid(seed: int, step: int, ways: int, shots: int, queries: int, uneven: bool) -> None:
    data = tiny_dataset(uneven=uneven)
    sampler = EpisodeSampler(data.labels, data.splits["train"], ways, shots, queries)
    ident = sampler.sample(seed, "train", step, range(4), first_id=step * 4)
    assert ident.classes.shape == (4, ways)
    assert ident.support_indices.shape == (4, ways, shots)
    assert ident.query_indices.shape == (4, ways, queries)
    assert ident.episode_ids.tolist() == [step * 4 + j for j in range(4)]
    for b in range(4):
        classes = ident.classes[b].tolist()
        assert len(set(classes)) == ways, "classes are drawn without replacement"
        assert set(classes) <= set(data.splits["train"])
        rows = torch.cat([ident.support_indices[b], ident.query_indices[b]], 1)  # [ways, k+q]
        assert len(set(rows.flatten().tolist())) == ways * (shots + queries), "no sample twice"
        # label j's samples all belong to class classes[j]
        assert torch.equal(data.labels[rows], torch.tensor(classes)[:, None].expand_as(rows))


def test_identities_rebuild_the_same_tensors_and_labels() -> None:
    data = tiny_dataset()
    sampler = EpisodeSampler(data.labels, data.splits["train"], 4, 2, 3)
    assembler = EpisodeAssembler(data.images, data.mean, data.std)
    ident = sampler.sample(7, "train", 3, range(5))
    episode = assembler.gather(ident)
    # pixels encode their dataset row: support position j*shots+s is support_indices[:, j, s]
    assert torch.equal(decode_rows(episode.support), ident.support_indices.flatten(1))
    assert torch.equal(decode_rows(episode.query), ident.query_indices.flatten(1))
    assert episode.support_labels[0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert episode.query_labels[0].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    # labels agree with the class list: label j <-> classes[:, j]
    assert torch.equal(data.labels[ident.support_indices.flatten(1)], ident.classes.gather(1, episode.support_labels))
    # normalisation is (x / 255 - mean) / std
    expected = (episode.support.float() / 255 - 0.5) / 0.25
    torch.testing.assert_close(assembler.normalize(episode).support, expected)
    # rebuilding from a sliced identity gives the same episode
    again = assembler.gather(ident[2])
    assert torch.equal(again.support, episode.support[2:3])


def test_deterministic_and_distinct_across_steps_and_streams() -> None:
    sampler = _sampler()
    a = sampler.sample(1, "train", 10, range(8))
    b = sampler.sample(1, "train", 10, range(8))
    assert torch.equal(a.support_indices, b.support_indices)
    assert torch.equal(a.classes, b.classes)
    other_step = sampler.sample(1, "train", 11, range(8))
    other_seed = sampler.sample(2, "train", 10, range(8))
    other_stream = sampler.sample(1, "test", 10, range(8))
    for other in (other_step, other_seed, other_stream):
        assert not torch.equal(a.query_indices, other.query_indices)
    # episode j does not depend on which other episodes are drawn with it
    assert torch.equal(sampler.sample(1, "train", 10, [5]).query_indices[0], a.query_indices[5])


def test_classes_and_samples_are_uniform() -> None:
    """Chi-square goodness of fit: every class and every sample of a class is equally likely."""
    sampler = _sampler(ways=3, shots=1, queries=1)
    ident = sampler.sample(0, "train", 0, range(4000))
    class_counts = torch.bincount(ident.classes.flatten(), minlength=12)[:12]
    assert stats.chisquare(class_counts.numpy()).pvalue > 1e-3
    # position within the class of the support sample (rows are class-major: class*10 + position)
    positions = ident.support_indices.flatten() % 10
    assert stats.chisquare(torch.bincount(positions, minlength=10).numpy()).pvalue > 1e-3
    # ordered choice: the first class is uniform too
    assert stats.chisquare(torch.bincount(ident.classes[:, 0], minlength=12).numpy()).pvalue > 1e-3


def _stream_steps(dataset: TrainingEpisodes, steps: int, workers: int = 0) -> list:
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    out = []
    for identity in loader:
        out.append(identity)
        if len(out) == steps:
            break
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_global_batch_is_the_same_for_any_ranks_and_workers(workers: int) -> None:
    sampler = _sampler()
    single = _stream_steps(TrainingEpisodes(sampler, seed=3, batch_size=8), 4)
    ranks = [_stream_steps(TrainingEpisodes(sampler, 3, 8, rank=r, world_size=2), 4, workers=workers) for r in range(2)]
    for step in range(4):
        joined = torch.cat([ranks[0][step].support_indices, ranks[1][step].support_indices])
        assert torch.equal(joined, single[step].support_indices)
        assert single[step].episode_ids.tolist() == list(range(8 * step, 8 * step + 8))


def test_resumed_stream_continues_exactly() -> None:
    sampler = _sampler()
    full = _stream_steps(TrainingEpisodes(sampler, 0, 4), 8)
    resumed = _stream_steps(TrainingEpisodes(sampler, 0, 4, start_step=5), 3)
    for a, b in zip(full[5:], resumed, strict=True):
        assert torch.equal(a.query_indices, b.query_indices)


def test_epoch_ends_at_the_epoch_boundary() -> None:
    sampler = _sampler()
    steps = list(TrainingEpisodes(sampler, 0, 4, start_step=5, steps_per_epoch=4))
    assert [int(s.episode_ids[0]) // 4 for s in steps] == [5, 6, 7]


def test_fixed_evaluation_set_is_split_across_ranks_without_padding() -> None:
    sampler = _sampler()
    single = list(EvaluationEpisodes(sampler, 0, "validation", count=11, batch_size=4))
    assert [len(b) for b in single] == [4, 4, 3]
    by_id = {int(i): q for b in single for i, q in zip(b.episode_ids, b.query_indices, strict=True)}
    assert sorted(by_id) == list(range(11))
    seen = []
    for rank in range(2):
        for batch in EvaluationEpisodes(sampler, 0, "validation", 11, 4, rank=rank, world_size=2):
            for i, q in zip(batch.episode_ids.tolist(), batch.query_indices, strict=True):
                assert torch.equal(q, by_id[i])
                seen.append(i)
    assert sorted(seen) == list(range(11)), "every episode exactly once over the ranks"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ways": 13}, "ways=13 exceeds the 12 classes"),
        ({"shots": 6, "queries": 5}, r"shots \+ queries = 11 exceeds the smallest class of this split \(10"),
        ({"ways": 0}, "ways must be >= 1"),
        ({"shots": -1}, "shots must be >= 1"),
        ({"queries": 0}, "queries must be >= 1"),
    ],
)
def test_impossible_requests_fail_clearly(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _sampler(**kwargs)


def test_batch_must_divide_by_world_size() -> None:
    with pytest.raises(ValueError, match=r"episodes_per_batch=6 must be divisible by the number of devices \(4\)"):
        TrainingEpisodes(_sampler(), 0, 6, rank=0, world_size=4)

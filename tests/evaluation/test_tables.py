"""Tests for per-episode difficulty tables: CSV round trip, validation and joining two models' scores."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_episodes.analysis import rank_correlation
from lightning_episodes.evaluation import DifficultyTable, EpisodeRecord, JoinedDifficulties, join_on_episode


def make_table(n: int = 6, seed: int = 0, with_accuracy: bool = True) -> DifficultyTable:
    rng = np.random.default_rng(seed)
    ways, shots, queries = 3, 2, 4
    classes = np.stack([rng.choice(50, size=ways, replace=False) for _ in range(n)])
    rows = np.stack([rng.choice(1000, size=ways * (shots + queries), replace=False) for _ in range(n)])
    rows = rows.reshape(n, ways, shots + queries)
    return DifficultyTable.from_arrays(
        episode_ids=torch.arange(100, 100 + n),
        classes=torch.from_numpy(classes),
        support_indices=torch.from_numpy(rows[:, :, :shots].copy()),
        query_indices=torch.from_numpy(rows[:, :, shots:].copy()),
        difficulty=torch.from_numpy(rng.exponential(size=n)),
        accuracy=torch.from_numpy(rng.uniform(size=n)) if with_accuracy else None,
    )


def test_from_arrays_keeps_every_field() -> None:
    table = DifficultyTable.from_arrays(
        episode_ids=np.array([7]),
        classes=np.array([[4, 2]]),
        support_indices=np.array([[[10, 11], [20, 21]]]),
        query_indices=np.array([[[12], [22]]]),
        difficulty=np.array([0.25]),
    )
    (record,) = table.records
    assert record == EpisodeRecord(7, (4, 2), ((10, 11), (20, 21)), ((12,), (22,)), 0.25, None)
    assert type(record.episode_id) is int
    assert type(record.classes[0]) is int
    assert math.isnan(table.accuracy[0])


@pytest.mark.parametrize("with_accuracy", [True, False])
def test_csv_round_trip_is_exact(tmp_path: Path, with_accuracy: bool) -> None:
    table = make_table(with_accuracy=with_accuracy)
    path = tmp_path / "difficulty.csv"
    table.write(path)
    assert path.read_text().splitlines()[0] == ("episode_id,classes,support_indices,query_indices,difficulty,accuracy")
    again = DifficultyTable.read(path)
    assert again == table
    np.testing.assert_array_equal(again.difficulty, table.difficulty)  # repr round-trips floats exactly
    np.testing.assert_array_equal(again.episode_ids, np.arange(100, 106))


def test_awkward_floats_and_numpy_scalars_round_trip(tmp_path: Path) -> None:
    records = (
        EpisodeRecord(np.int64(0), [1], [[2]], [[3]], np.float64(0.1 + 0.2), np.float32(0.5)),
        EpisodeRecord(1, (1,), ((4,),), ((5,),), 1e-300, math.inf),
        EpisodeRecord(2, (1,), ((6,),), ((7,),), math.inf),
    )
    table = DifficultyTable(records)
    table.write(tmp_path / "t.csv")
    again = DifficultyTable.read(tmp_path / "t.csv")
    assert again == table
    assert again.records[0].difficulty == 0.1 + 0.2


def test_read_ignores_extra_columns_and_accepts_missing_accuracy(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        'note,episode_id,classes,support_indices,query_indices,difficulty\nx,3,"[1, 2]","[[5], [6]]","[[7], [8]]",0.5\n'
    )
    (record,) = DifficultyTable.read(path)
    assert record == EpisodeRecord(3, (1, 2), ((5,), (6,)), ((7,), (8,)), 0.5, None)


def test_read_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("episode_id,classes,difficulty\n0,[1],0.5\n")
    with pytest.raises(ValueError, match="support_indices"):
        DifficultyTable.read(path)
    path.write_text(
        "episode_id,classes,support_indices,query_indices,difficulty,accuracy\n"
        '0,"[1]","[[2]]","[[3]]",0.5,1.0\n'
        '1,"[1]","[[2]","[[3]]",0.5,1.0\n'
    )
    with pytest.raises(ValueError, match="line 3"):
        DifficultyTable.read(path)


def test_duplicate_ids_are_rejected() -> None:
    record = EpisodeRecord(1, (0,), ((1,),), ((2,),), 0.5)
    with pytest.raises(ValueError, match="unique.*\\[1\\]"):
        DifficultyTable((record, record))


def test_from_arrays_length_mismatch() -> None:
    with pytest.raises(ValueError, match="difficulty"):
        DifficultyTable.from_arrays([0, 1], [[1], [2]], [[[3]], [[4]]], [[[5]], [[6]]], [0.5])


def scored_again(table: DifficultyTable, difficulty: np.ndarray, order: list[int]) -> DifficultyTable:
    """The same episodes scored by another model, listed in another order."""
    return DifficultyTable(
        tuple(
            EpisodeRecord(
                table.records[i].episode_id,
                table.records[i].classes,
                table.records[i].support_indices,
                table.records[i].query_indices,
                float(difficulty[i]),
                0.5,
            )
            for i in order
        )
    )


def test_join_aligns_by_episode_id() -> None:
    table_a = make_table(n=8)
    other = 3 * table_a.difficulty + 1
    table_b = scored_again(table_a, other, order=[5, 2, 7, 0, 1, 6, 3, 4])
    joined = join_on_episode(table_a, table_b)
    assert isinstance(joined, JoinedDifficulties)
    assert len(joined) == 8
    np.testing.assert_array_equal(joined.episode_ids, table_a.episode_ids)
    np.testing.assert_array_equal(joined.difficulty_a, table_a.difficulty)
    np.testing.assert_array_equal(joined.difficulty_b, other)
    np.testing.assert_array_equal(joined.accuracy_a, table_a.accuracy)
    np.testing.assert_array_equal(joined.accuracy_b, np.full(8, 0.5))
    # aligned scores of a monotone transform are perfectly rank-correlated; misaligned ones are not
    assert rank_correlation(joined.difficulty_a, joined.difficulty_b).rho == pytest.approx(1.0)
    assert rank_correlation(table_a.difficulty, table_b.difficulty).rho < 0.99


def test_join_rejects_a_different_episode_under_the_same_id() -> None:
    table_a = make_table(n=4)
    records = list(table_a.records)
    first = records[0]
    records[0] = EpisodeRecord(
        first.episode_id, first.classes, first.support_indices, first.query_indices[::-1], first.difficulty
    )
    with pytest.raises(ValueError, match=f"episode id {first.episode_id} is a different episode"):
        join_on_episode(table_a, DifficultyTable(tuple(records)))


def test_join_with_different_id_sets() -> None:
    table_a = make_table(n=6)
    table_b = DifficultyTable(table_a.records[2:])
    with pytest.raises(ValueError, match="2 id\\(s\\) only in table_a \\[100, 101\\]"):
        join_on_episode(table_a, table_b)
    joined = join_on_episode(table_a, table_b, require_same_episodes=False)
    np.testing.assert_array_equal(joined.episode_ids, [102, 103, 104, 105])
    far = DifficultyTable((EpisodeRecord(999, (0,), ((1,),), ((2,),), 0.5),))
    with pytest.raises(ValueError, match="share no episode"):
        join_on_episode(table_a, far, require_same_episodes=False)

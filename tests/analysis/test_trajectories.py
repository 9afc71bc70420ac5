"""Tests for difficulty over training (§4.2): extreme episodes and whether their lines cross."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lightning_episodes.analysis import CrossingReport, extreme_episodes, lines_cross


def test_extreme_episodes_by_hand() -> None:
    scores = [0.9, 0.1, 2.5, 0.4, 1.7, 3.0, 0.2]
    easiest, hardest = extreme_episodes(scores, count=3)
    np.testing.assert_array_equal(easiest, [1, 6, 3])
    np.testing.assert_array_equal(hardest, [5, 2, 4])
    assert easiest.dtype == hardest.dtype == np.int64


def test_extreme_episodes_match_sorting_and_break_ties_by_index() -> None:
    scores = np.random.default_rng(0).integers(0, 20, size=500).astype(float)  # many ties
    easiest, hardest = extreme_episodes(torch.tensor(scores), count=50)
    by_easy = sorted(range(500), key=lambda i: (scores[i], i))
    by_hard = sorted(range(500), key=lambda i: (-scores[i], i))
    np.testing.assert_array_equal(easiest, by_easy[:50])
    np.testing.assert_array_equal(hardest, by_hard[:50])
    assert not set(easiest) & set(hardest)


@pytest.mark.parametrize(
    ("scores", "count", "match"),
    [
        (np.arange(99.0), 50, "2 \\* count"),
        (np.arange(10.0), 0, "count"),
        (np.arange(10.0), 1.5, "count"),
        (np.array([1.0, np.nan, 2.0]), 1, "non-finite"),
        (np.ones((3, 3)), 1, "1-dimensional"),
    ],
)
def test_extreme_episodes_validation(scores: np.ndarray, count, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        extreme_episodes(scores, count=count)


# columns 0, 1 easy; 2, 3 hard; 4 unused
SEPARATED = np.array(
    [
        [1.0, 1.5, 2.0, 3.0, 9.0],
        [0.8, 1.2, 1.6, 2.4, -5.0],
        [0.5, 0.7, 1.0, 1.9, 0.0],
    ]
)


def test_separated_lines_do_not_cross() -> None:
    report = lines_cross(SEPARATED, [0, 1], [2, 3])
    assert isinstance(report, CrossingReport)
    assert not report.crossed
    assert report.crossing_steps == report.touching_steps == ()
    assert report.margins == pytest.approx((0.5, 0.4, 0.3))
    assert report.margin == pytest.approx(0.3)
    assert report.tightest_step == 2
    assert (report.crossing_pairs, report.pairs) == (0, 4)


def test_crossing_lines_report_their_steps() -> None:
    scores = SEPARATED.copy()
    scores[1, 1] = 2.0  # easy episode 1 rises above hard episode 2 (1.6) at checkpoint 1 only
    scores[2, 0] = 2.0  # easy episode 0 rises above both hard episodes at checkpoint 2
    report = lines_cross(scores, np.array([0, 1]), np.array([2, 3]), steps=[0, 500, 1000])
    assert report.crossed
    assert report.crossing_steps == (500, 1000)
    assert isinstance(report.crossing_steps[0], int)
    assert report.margins == pytest.approx((0.5, -0.4, -1.0))
    assert report.margin == pytest.approx(-1.0)
    assert report.tightest_step == 1000
    assert report.crossing_pairs == 3  # (1, 2), (0, 2), (0, 3)


def test_touching_at_equality_is_not_crossing() -> None:
    scores = SEPARATED.copy()
    scores[1, 1] = 1.6  # equal to the easiest hard episode at checkpoint 1
    report = lines_cross(scores, [0, 1], [2, 3], steps=np.array([10.0, 20.0, 30.0]))
    assert not report.crossed
    assert report.crossing_steps == ()
    assert report.touching_steps == (20.0,)
    assert report.margin == 0.0
    assert report.tightest_step == 20.0
    assert report.crossing_pairs == 0


def test_torch_matrix_and_index_tensors() -> None:
    report = lines_cross(torch.tensor(SEPARATED), torch.tensor([0, 1]), torch.tensor([2, 3]))
    assert report == lines_cross(SEPARATED, [0, 1], [2, 3])


@pytest.mark.parametrize(
    ("scores", "easy", "hard", "steps", "match"),
    [
        (SEPARATED, [0, 2], [2, 3], None, "disjoint"),
        (SEPARATED, [], [2, 3], None, "easy_idx"),
        (SEPARATED, [0, 0], [2, 3], None, "repeat"),
        (SEPARATED, [0, 5], [2, 3], None, "easy_idx.*\\[0, 5\\)"),
        (SEPARATED, [0, -1], [2, 3], None, "easy_idx"),
        (SEPARATED, [0, 1], [2.0, 3.0], None, "hard_idx.*integers"),
        (SEPARATED, [0, 1], [2, 3], [0, 1], "steps"),
        (SEPARATED, [0, 1], [2, 3], [0, 1, np.nan], "steps"),
        (SEPARATED[0], [0, 1], [2, 3], None, "scores"),
        (np.where(SEPARATED > 2, np.inf, SEPARATED), [0, 1], [2, 3], None, "non-finite"),
    ],
)
def test_lines_cross_validation(scores, easy, hard, steps, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        lines_cross(scores, easy, hard, steps=steps)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 5), st.just(6)), elements=st.integers(0, 5).map(float)),
    st.integers(1, 3),
)
def test_lines_cross_equals_brute_force(scores: np.ndarray, split: int) -> None:
    easy, hard = list(range(split)), list(range(split, 6))
    report = lines_cross(scores, easy, hard)
    crossing_at = [
        any(scores[t, i] > scores[t, j] for i, j in itertools.product(easy, hard)) for t in range(len(scores))
    ]
    assert report.crossed == any(crossing_at)
    assert report.crossing_steps == tuple(t for t, c in enumerate(crossing_at) if c)
    pairs = sum(any(scores[t, i] > scores[t, j] for t in range(len(scores))) for i, j in itertools.product(easy, hard))
    assert report.crossing_pairs == pairs
    assert report.margin == min(min(scores[t, hard]) - max(scores[t, easy]) for t in range(len(scores)))

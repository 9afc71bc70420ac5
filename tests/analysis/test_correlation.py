"""Tests for the transfer analysis (§4.2): Spearman rank correlation against hand-computed ranks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.analysis import RankCorrelation, rank_correlation


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n by hand; tied values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = np.empty(len(values))
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def hand_spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(average_ranks(a), average_ranks(b))[0, 1])


def test_average_ranks_helper() -> None:
    np.testing.assert_array_equal(average_ranks(np.array([10.0, 30.0, 20.0, 20.0])), [1, 4, 2.5, 2.5])


def test_matches_hand_computed_rank_correlation() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=300)
    b = 0.6 * a + rng.normal(size=300)
    rho, pvalue = rank_correlation(a, b)
    assert rho == pytest.approx(hand_spearman(a, b), abs=1e-12)
    # p-value of the t approximation: t = rho sqrt((n - 2) / (1 - rho^2)) with n - 2 dof
    t = rho * math.sqrt((300 - 2) / (1 - rho**2))
    assert pvalue == pytest.approx(2 * stats.t.sf(abs(t), 298), rel=1e-9)


def test_ties_use_average_ranks() -> None:
    a = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0, 0.5])
    b = np.array([2.0, 1.0, 4.0, 4.0, 3.0, 6.0, 7.0, 0.0])
    assert rank_correlation(a, b).rho == pytest.approx(hand_spearman(a, b), abs=1e-12)


@pytest.mark.parametrize(
    ("transform", "expected"),
    [(np.exp, 1.0), (lambda x: x**3 + 7, 1.0), (lambda x: -2 * x, -1.0), (lambda x: np.exp(-x), -1.0)],
)
def test_monotone_transforms(transform, expected: float) -> None:
    a = np.random.default_rng(1).normal(size=50)
    assert rank_correlation(a, transform(a)).rho == pytest.approx(expected, abs=1e-12)


def test_torch_inputs_and_result_type() -> None:
    a = np.random.default_rng(2).normal(size=40)
    b = a + np.random.default_rng(3).normal(size=40)
    result = rank_correlation(torch.tensor(a, requires_grad=True), torch.tensor(b, dtype=torch.float32))
    assert isinstance(result, RankCorrelation)
    assert result.rho == pytest.approx(rank_correlation(a, b.astype(np.float32)).rho, abs=1e-12)


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0], "same episodes"),
        ([1.0, 2.0], [1.0], "same episodes"),
        ([1.0, 2.0], [1.0, 2.0], "at least 3"),
        ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], "`a` is constant"),
        ([1.0, 2.0, 3.0], [4.0, 4.0, 4.0], "`b` is constant"),
        ([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], "`a` holds 1 non-finite"),
        ([1.0, 2.0, 3.0], [[1.0, 2.0, 3.0]], "`b` must be 1-dimensional"),
    ],
)
def test_validation_errors(a, b, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rank_correlation(a, b)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-20, 20), st.integers(-20, 20)), min_size=3, max_size=30))
def test_symmetric_bounded_and_equal_to_hand_reference(pairs: list[tuple[int, int]]) -> None:
    a = np.array([p[0] for p in pairs], dtype=float)
    b = np.array([p[1] for p in pairs], dtype=float)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return
    rho = rank_correlation(a, b).rho
    assert -1.0 - 1e-12 <= rho <= 1.0 + 1e-12
    assert rho == pytest.approx(rank_correlation(b, a).rho, abs=1e-12)
    assert rho == pytest.approx(hand_spearman(a, b), abs=1e-9)

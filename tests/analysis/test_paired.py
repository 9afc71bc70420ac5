"""The paired per-episode difference of two sampling schemes: hand-computed, against scipy, and its properties (the
scores it pairs: tests/evaluation/test_scoring.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.analysis import DifficultyTable, EpisodeRecord, paired_difference


def table(accuracies: Sequence[float | None], ids: Sequence[int] | None = None, data_seed: int = 0) -> DifficultyTable:
    """Episodes whose identity is a function of (data seed, id): equal ids of equal seeds are the same episode."""
    ids = range(len(accuracies)) if ids is None else ids
    records = (
        EpisodeRecord(i, (i + data_seed, i + 1), ((2 * i,), (2 * i + 1,)), ((3 * i,), (3 * i + 1,)), 1.0, accuracy)
        for i, accuracy in zip(ids, accuracies, strict=True)
    )
    return DifficultyTable(tuple(records))


def reversed_table(t: DifficultyTable) -> DifficultyTable:
    return DifficultyTable(tuple(reversed(t.records)))


# -- the statistics -------------------------------------------------------------------------------------------


def test_hand_computed_two_seeds_per_arm() -> None:
    baseline = [table([0.5, 0.4, 0.8, 0.6]), table([0.7, 0.6, 0.8, 0.4])]  # per-episode mean 0.6 0.5 0.8 0.5
    treatment = [table([0.8, 0.6, 0.8, 0.6]), table([0.6, 0.6, 1.0, 0.4])]  # per-episode mean 0.7 0.6 0.9 0.5
    # d = 0.1 0.1 0.1 0.0: mean 0.075, sd = sqrt((3 * 0.025^2 + 0.075^2) / 3) = 0.05, se = 0.025, t = 3
    result = paired_difference(baseline, [reversed_table(t) for t in treatment])  # aligned by id, not by row
    assert result.mean == pytest.approx(0.075, abs=1e-12)
    assert result.std == pytest.approx(0.05, abs=1e-12)
    assert result.statistic == pytest.approx(3.0, abs=1e-9)
    assert result.ci95 == pytest.approx(3.182446305284263 * 0.025, abs=1e-12)  # t_{0.975, 3}, from a t table
    # Student's t with 3 degrees of freedom in closed form: F(t) = 1/2 + (t / (√3 (1 + t²/3)) + atan(t / √3)) / π
    cdf = 0.5 + (3 / (math.sqrt(3) * 4) + math.atan(3 / math.sqrt(3))) / math.pi
    assert result.pvalue == pytest.approx(2 * (1 - cdf), abs=1e-12)
    assert (result.episodes, result.seeds) == (4, (2, 2))
    # seed pairs: (0.3 + 0.2 + 0 + 0) / 4 and (-0.1 + 0 + 0.2 + 0) / 4
    assert result.seed_differences == pytest.approx((0.125, 0.025), abs=1e-12)
    assert result.seed_sd == pytest.approx(0.1 / math.sqrt(2), abs=1e-12)
    # over the 2 seed pairs: t_{0.975, 1} = 12.7062 (a t table) times sd / √2 = 0.05; t = 0.075 / 0.05 = 1.5, and
    # Student's t with 1 degree of freedom is Cauchy: p = 1 - 2 atan(1.5) / π
    assert result.seed_ci95 == pytest.approx(12.706204736174705 * 0.05, abs=1e-12)
    assert result.seed_pvalue == pytest.approx(1 - 2 * math.atan(1.5) / math.pi, abs=1e-12)


def test_the_interval_over_seed_pairs_is_scipys_one_sample_t_test() -> None:
    rng = np.random.default_rng(1)
    baseline = [table((rng.integers(0, 16, size=50) / 15).tolist()) for _ in range(4)]
    treatment = [table(np.clip(t.accuracy + rng.integers(-3, 5, size=50) / 15, 0, 1).tolist()) for t in baseline]
    result = paired_difference(baseline, treatment)
    per_seed = [float(np.mean(t.accuracy - b.accuracy)) for b, t in zip(baseline, treatment, strict=True)]
    assert result.seed_differences == pytest.approx(per_seed, abs=1e-12)
    reference = stats.ttest_1samp(per_seed, 0.0)
    low, high = reference.confidence_interval(0.95)
    assert result.seed_ci95 is not None
    assert (result.mean - result.seed_ci95, result.mean + result.seed_ci95) == pytest.approx((low, high), rel=1e-10)
    assert result.seed_pvalue == pytest.approx(reference.pvalue, rel=1e-10)


def test_seed_pairs_that_differ_alike_have_no_spread_and_an_undefined_p() -> None:
    result = paired_difference([table([0.2, 0.4]), table([0.4, 0.2])], [table([0.3, 0.5]), table([0.5, 0.3])])
    assert result.seed_differences == pytest.approx((0.1, 0.1), abs=1e-12)
    assert result.seed_ci95 == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(result.seed_pvalue or 0.0)


def test_one_seed_per_arm_equals_scipys_paired_t_test() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 16, size=300) / 15  # accuracies of 15 queries
    b = np.clip(a + rng.integers(-2, 4, size=300) / 15, 0, 1)
    result = paired_difference(table(a.tolist()), table(b.tolist()))
    reference = stats.ttest_rel(b, a)
    assert result.statistic == pytest.approx(reference.statistic, rel=1e-10)
    assert result.pvalue == pytest.approx(reference.pvalue, rel=1e-8)
    d = b - a
    half_width = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)  # the t interval by hand
    assert result.ci95 == pytest.approx(half_width, rel=1e-12)
    low, high = reference.confidence_interval(0.95)
    assert (result.mean - result.ci95, result.mean + result.ci95) == pytest.approx((low, high), rel=1e-10)
    assert result.seed_differences == pytest.approx((d.mean(),), rel=1e-12)
    assert (result.seed_sd, result.seed_ci95, result.seed_pvalue) == (None, None, None)


def test_unequal_seed_counts_average_each_arm_and_pair_no_seeds() -> None:
    baseline = [table([0.2, 0.4, 0.6]), table([0.4, 0.4, 0.2]), table([0.6, 0.1, 0.4])]  # mean 0.4 0.3 0.4
    result = paired_difference(baseline, table([0.5, 0.5, 0.3]))
    assert result.mean == pytest.approx(np.mean([0.1, 0.2, -0.1]), abs=1e-12)
    assert result.seeds == (3, 1)
    assert result.seed_differences is None
    assert (result.seed_sd, result.seed_ci95, result.seed_pvalue) == (None, None, None)


def test_identical_arms_have_no_difference_and_an_undefined_t() -> None:
    result = paired_difference(table([0.2, 0.4, 0.6]), table([0.2, 0.4, 0.6]))
    assert (result.mean, result.ci95, result.std) == (0.0, 0.0, 0.0)
    assert math.isnan(result.statistic)
    assert math.isnan(result.pvalue)


accuracy_lists = st.lists(st.integers(0, 15).map(lambda q: q / 15), min_size=3, max_size=30)


@st.composite
def arms(draw: Any) -> tuple[list[DifficultyTable], list[DifficultyTable]]:
    """Two arms of 1-3 seeds on the same n episodes."""
    n = draw(st.integers(3, 30))
    accuracies = st.lists(st.integers(0, 15).map(lambda q: q / 15), min_size=n, max_size=n)
    seeds = st.lists(accuracies, min_size=1, max_size=3)
    return [table(a) for a in draw(seeds)], [table(a) for a in draw(seeds)]


@settings(max_examples=50, deadline=None)
@given(arms(), st.floats(-1, 1))
def test_shifting_the_treatment_shifts_the_mean_and_leaves_the_interval(
    tables: tuple[list[DifficultyTable], list[DifficultyTable]], shift: float
) -> None:
    baseline, treatment = tables
    shifted = [table((t.accuracy + shift).tolist()) for t in treatment]
    before, after = paired_difference(baseline, treatment), paired_difference(baseline, shifted)
    assert after.mean == pytest.approx(before.mean + shift, abs=1e-9)
    assert after.ci95 == pytest.approx(before.ci95, abs=1e-9)
    assert after.std == pytest.approx(before.std, abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(arms())
def test_swapping_the_arms_negates_the_difference(tables: tuple[list[DifficultyTable], list[DifficultyTable]]) -> None:
    baseline, treatment = tables
    forward, backward = paired_difference(baseline, treatment), paired_difference(treatment, baseline)
    assert backward.mean == pytest.approx(-forward.mean, abs=1e-12)
    assert (backward.ci95, backward.std, backward.episodes) == pytest.approx(
        (forward.ci95, forward.std, forward.episodes)
    )
    assert backward.seeds == forward.seeds[::-1]
    if forward.seed_differences is not None:
        assert backward.seed_differences == pytest.approx([-d for d in forward.seed_differences], abs=1e-12)
        assert np.mean(forward.seed_differences) == pytest.approx(forward.mean, abs=1e-12)
    if forward.std > 0:
        assert backward.statistic == pytest.approx(-forward.statistic, rel=1e-9)
        assert backward.pvalue == pytest.approx(forward.pvalue, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(accuracy_lists, st.data())
def test_a_missing_episode_is_named(accuracies: list[float], data: Any) -> None:
    dropped = data.draw(st.integers(0, len(accuracies) - 1))
    ids = [i for i in range(len(accuracies)) if i != dropped]
    with pytest.raises(ValueError, match=rf"do not score the same episodes.*only in table_a \[{dropped}\]"):
        paired_difference(table(accuracies), table([accuracies[i] for i in ids], ids))


@pytest.mark.parametrize(
    ("baseline", "treatment", "message"),
    [
        ([table([0.1, 0.2, 0.3])], [table([0.1, 0.2, 0.3], data_seed=1)], r"treatment\[0\].*id 0 is a different"),
        ([table([0.1, 0.2]), table([0.1, 0.2, 0.3])], [table([0.1, 0.2])], r"baseline\[1\].*only in table_b \[2\]"),
        ([table([0.1, 0.2, 0.3])], [table([0.1, 0.2, 0.3]), table([0.1, None, 0.3])], r"treatment\[1\].*1 episode"),
        ([], [table([0.1, 0.2])], "`baseline` needs at least one table"),
        ([table([0.1, 0.2])], [], "`treatment` needs at least one table"),
        ([table([0.5])], [table([0.6])], "at least 2 episodes"),
    ],
)
def test_mismatched_tables_are_named(baseline: list, treatment: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_difference(baseline, treatment)


def test_a_table_cannot_repeat_an_episode() -> None:
    with pytest.raises(ValueError, match="repeated"):
        table([0.1, 0.2, 0.3], ids=[0, 1, 1])

"""Tests for the paper's normality protocol (§4.2): subsampled Shapiro-Wilk and the normal fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.analysis import NormalFit, ShapiroResult, fit_normal, shapiro_rejection_rate


@pytest.fixture(scope="module")
def normal_values() -> np.ndarray:
    return np.random.default_rng(12345).normal(loc=2.0, scale=0.4, size=100_000)


def test_rejection_rate_on_normal_values_is_alpha(normal_values: np.ndarray) -> None:
    # Under H0 each test rejects with probability alpha: the count is Binomial(repeats, alpha).
    repeats, alpha = 4000, 0.05
    result = shapiro_rejection_rate(normal_values, repeats=repeats, alpha=alpha, seed=3)
    tolerance = 4 * math.sqrt(alpha * (1 - alpha) / repeats)
    assert abs(result.rejection_rate - alpha) < tolerance
    # the p-value is uniform under H0, so its mean is 1/2
    assert abs(result.mean_pvalue - 0.5) < 4 * math.sqrt(1 / 12 / repeats)


@pytest.mark.parametrize("alpha", [0.01, 0.1])
def test_rejection_rate_follows_alpha(normal_values: np.ndarray, alpha: float) -> None:
    repeats = 3000
    result = shapiro_rejection_rate(normal_values, repeats=repeats, alpha=alpha, seed=1)
    assert abs(result.rejection_rate - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / repeats)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda rng: rng.exponential(size=2000), id="exponential"),
        pytest.param(lambda rng: np.concatenate([rng.normal(-3, 1, 1000), rng.normal(3, 1, 1000)]), id="bimodal"),
        pytest.param(lambda rng: rng.lognormal(sigma=1.0, size=2000), id="lognormal"),
    ],
)
def test_rejection_rate_on_non_normal_values_is_high(make) -> None:
    values = make(np.random.default_rng(7))
    assert shapiro_rejection_rate(values).rejection_rate > 0.5


def test_each_subsample_matches_a_direct_scipy_call() -> None:
    values = np.random.default_rng(0).gamma(shape=4.0, size=300)
    result = shapiro_rejection_rate(values, subsample=50, repeats=20, alpha=0.2, seed=42)
    # replay the documented draws by hand
    rng = np.random.default_rng(42)
    expected = [stats.shapiro(values[rng.choice(values.size, size=50, replace=False)]) for _ in range(20)]
    np.testing.assert_allclose(result.statistics, [e.statistic for e in expected], rtol=0, atol=0)
    np.testing.assert_allclose(result.pvalues, [e.pvalue for e in expected], rtol=0, atol=0)
    rejections = sum(e.pvalue < 0.2 for e in expected)
    assert result.rejections == rejections
    assert result.rejection_rate == rejections / 20
    assert result.mean_statistic == pytest.approx(np.mean([e.statistic for e in expected]))
    assert result.mean_pvalue == pytest.approx(np.mean([e.pvalue for e in expected]))


def test_subsample_of_everything_is_the_full_sample_test() -> None:
    # Shapiro-Wilk sorts its input, so testing a permutation of all values equals testing them all.
    values = np.random.default_rng(5).normal(size=60)
    result = shapiro_rejection_rate(values, subsample=60, repeats=1)
    direct = stats.shapiro(values)
    assert result.statistics[0] == pytest.approx(direct.statistic, rel=1e-12)
    assert result.pvalues[0] == pytest.approx(direct.pvalue, rel=1e-9)
    assert result.rejections == int(direct.pvalue < 0.05)


def test_seeded_determinism() -> None:
    values = np.random.default_rng(9).exponential(size=500) + np.random.default_rng(10).normal(size=500)
    first = shapiro_rejection_rate(values, repeats=30, seed=11)
    assert first == shapiro_rejection_rate(values, repeats=30, seed=11)
    assert first.statistics != shapiro_rejection_rate(values, repeats=30, seed=12).statistics


def test_torch_and_list_inputs_match_numpy() -> None:
    values = np.random.default_rng(2).normal(size=200)
    reference = shapiro_rejection_rate(values, repeats=10)
    tensor = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    assert shapiro_rejection_rate(tensor, repeats=10) == reference
    assert shapiro_rejection_rate(values.tolist(), repeats=10) == reference


def test_result_fields_and_standard_error() -> None:
    result = shapiro_rejection_rate(np.random.default_rng(4).uniform(size=400), repeats=40, alpha=0.05)
    assert isinstance(result, ShapiroResult)
    assert (result.repeats, result.subsample, result.alpha) == (40, 50, 0.05)
    assert len(result.statistics) == len(result.pvalues) == 40
    r = result.rejection_rate
    assert result.standard_error == pytest.approx(math.sqrt(r * (1 - r) / 40))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"values": np.arange(49.0)}, "subsample"),
        ({"values": np.arange(10.0), "subsample": 20}, "subsample"),
        ({"values": np.arange(100.0), "subsample": 2}, "subsample"),
        ({"values": np.arange(100.0), "subsample": 5.0}, "subsample"),
        ({"values": np.arange(100.0), "repeats": 0}, "repeats"),
        ({"values": np.arange(100.0), "alpha": 0.0}, "alpha"),
        ({"values": np.arange(100.0), "alpha": 1.0}, "alpha"),
        ({"values": np.append(np.arange(99.0), np.nan)}, "non-finite"),
        ({"values": np.append(np.arange(99.0), np.inf)}, "non-finite"),
        ({"values": np.ones(100)}, "constant"),
        ({"values": np.ones((10, 10))}, "1-dimensional"),
    ],
)
def test_validation_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        shapiro_rejection_rate(**kwargs)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3), min_size=10, max_size=40, unique=True),
    st.integers(3, 10),
    st.integers(1, 8),
)
def test_result_is_consistent(values: list[float], subsample: int, repeats: int) -> None:
    result = shapiro_rejection_rate(values, subsample=subsample, repeats=repeats, alpha=0.1)
    assert 0.0 <= result.rejection_rate <= 1.0
    assert result.rejections == sum(p < 0.1 for p in result.pvalues)
    assert all(0.0 <= w <= 1.0 + 1e-12 for w in result.statistics)


def test_fit_normal_matches_numpy_ddof0() -> None:
    values = np.random.default_rng(3).normal(1.5, 2.0, size=1000)
    fit = fit_normal(values)
    assert isinstance(fit, NormalFit)
    assert fit.mean == pytest.approx(float(np.mean(values)), rel=1e-12)
    assert fit.std == pytest.approx(float(np.std(values, ddof=0)), rel=1e-12)
    assert fit_normal(torch.tensor(values)) == fit
    assert fit_normal([1.0, 3.0]) == (2.0, 1.0)


def test_fit_normal_validation() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        fit_normal([])
    with pytest.raises(ValueError, match="non-finite"):
        fit_normal([1.0, float("nan")])

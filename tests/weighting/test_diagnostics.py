"""Diagnostics against scipy and textbook cases: the generalised Pareto fit and k-hat, skewness, Shapiro-Wilk,
and the held-out comparison of proposal models."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.weighting import (
    WeightingDiagnostics,
    better_proposal,
    gpd_fit,
    gpd_quantile,
    heldout_log_likelihood,
    normality_p,
    pareto_k,
    skewness,
)


@pytest.mark.parametrize("shape", [-0.2, 0.3, 0.8])
def test_gpd_fit_agrees_with_scipys_maximum_likelihood_and_the_truth(shape: float) -> None:
    draws = stats.genpareto.rvs(shape, scale=2.0, size=4000, random_state=np.random.default_rng(0))
    k, sigma = gpd_fit(draws)
    scipy_k, _, scipy_sigma = stats.genpareto.fit(draws, floc=0)
    assert k == pytest.approx(scipy_k, abs=0.05)
    assert sigma == pytest.approx(scipy_sigma, rel=0.05)
    assert k == pytest.approx(shape, abs=0.08)


def test_gpd_quantile_is_scipys() -> None:
    p = np.linspace(0.01, 0.99, 9)
    for k in (-0.3, 0.0, 0.5):
        np.testing.assert_allclose(gpd_quantile(p, k, 1.7), stats.genpareto.ppf(p, k, scale=1.7), rtol=1e-10)


def test_pareto_k_on_textbook_cases() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(4000)  # draws from q = N(0, 1)
    # p narrower than q: bounded ratios, a short tail
    narrow = stats.norm.pdf(x, scale=0.8) / stats.norm.pdf(x)
    assert pareto_k(narrow) < 0.3
    # p = N(0, 2^2) wider than q: ratios with infinite variance, k = 1 - 1/4 = 0.75 in theory
    wide = stats.norm.pdf(x, scale=2.0) / stats.norm.pdf(x)
    assert 0.6 < pareto_k(wide) < 0.95
    # Cauchy-like ratios: infinite mean, k near 1
    assert pareto_k(np.abs(rng.standard_cauchy(4000))) > 0.8
    # the paper's uniform weights, w = Z / (2 c phi(z)) on S, are bounded by 13.4: a short tail
    assert pareto_k(1 / stats.norm.pdf(x[np.abs(x) <= 2.58])) < 0.5


def test_pareto_k_needs_enough_weights() -> None:
    assert math.isnan(pareto_k([1.0, 2.0, 3.0]))
    assert math.isnan(pareto_k(np.ones(100)))


def test_skewness_and_normality_are_scipys() -> None:
    x = stats.lognorm.rvs(0.6, size=500, random_state=np.random.default_rng(2))
    assert skewness(torch.from_numpy(x)) == pytest.approx(stats.skew(x), rel=1e-12)
    assert normality_p(torch.from_numpy(x)) == pytest.approx(stats.shapiro(x).pvalue, rel=1e-9)
    assert normality_p(x) < 1e-6
    assert normality_p(np.log(x)) > 1e-3
    assert math.isnan(normality_p([1.0, 1.0, 1.0]))
    assert math.isnan(skewness([1.0, 2.0]))


def test_the_held_out_comparison_names_the_model_of_the_data() -> None:
    rng = np.random.default_rng(3)
    lognormal = stats.lognorm.rvs(0.6, scale=0.5, size=1000, random_state=rng)
    normal = stats.norm.rvs(1.0, 0.2, size=1000, random_state=rng)
    better, scores = better_proposal(lognormal, "normal")
    assert better in ("lognormal", "empirical")
    assert scores["lognormal"] > scores["normal"] + 0.05
    assert better_proposal(normal, "normal")[0] is None  # a normal fits normal data: no warning
    assert better_proposal(lognormal, "lognormal")[0] is None
    # log-likelihood of the normal by hand on the even/odd split
    even, odd = normal[0::2], normal[1::2]
    by_hand = (
        stats.norm.logpdf(odd, even.mean(), even.std()).sum() + stats.norm.logpdf(even, odd.mean(), odd.std()).sum()
    ) / normal.size
    assert heldout_log_likelihood(normal)["normal"] == pytest.approx(by_hand, rel=1e-12)
    assert heldout_log_likelihood(np.append(normal, -1.0))["lognormal"] == -math.inf
    few, few_scores = better_proposal(lognormal[:50], "normal")  # too few values: no verdict
    assert few is None
    assert all(math.isnan(v) for v in few_scores.values())


@settings(max_examples=60, deadline=None)
@given(
    window=st.integers(1, 12),
    steps=st.lists(
        st.tuples(
            st.lists(st.sampled_from([0.5, 1.0, 2.5, math.nan, math.inf]) | st.floats(-5, 5), min_size=1, max_size=6),
            st.booleans(),  # whether the step has weights (False: the warm-up)
            st.booleans(),  # whether the windows are read after it
        ),
        max_size=15,
    ),
)
def test_the_windows_are_the_last_values_observed_whenever_they_are_read(
    window: int, steps: list[tuple[list[float], bool, bool]]
) -> None:
    """Values kept aside until a read give the same windows as appending each step at once: the last ``window``
    finite difficulties and the last ``window`` weights, in order, read at any point (and saved in the state)."""
    diagnostics = WeightingDiagnostics(window=window)
    difficulties: list[float] = []
    weights: list[float] = []
    for values, weighted, read in steps:
        step_weights = [abs(v) if math.isfinite(v) else 0.0 for v in values]
        diagnostics.observe(
            torch.tensor(values, dtype=torch.float64),
            torch.tensor(step_weights, dtype=torch.float64) if weighted else None,
        )
        difficulties = (difficulties + [v for v in values if math.isfinite(v)])[-window:]
        weights = (weights + step_weights)[-window:] if weighted else weights
        if read:
            assert diagnostics.difficulties.tolist() == difficulties
            assert diagnostics.weights.tolist() == weights
    assert diagnostics.state_dict()["difficulties"].tolist() == difficulties
    assert diagnostics.state_dict()["weights"].tolist() == weights


def test_diagnostics_windows_and_state() -> None:
    diagnostics = WeightingDiagnostics(window=5)
    diagnostics.observe(torch.tensor([1.0, math.nan, 2.0]), None)
    diagnostics.observe(torch.tensor([3.0, 4.0, 5.0, 6.0]), torch.tensor([0.5, 1.5, 2.0, 3.0]))
    assert diagnostics.difficulties.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert diagnostics.weights.tolist() == [0.5, 1.5, 2.0, 3.0]
    restored = WeightingDiagnostics(window=5)
    restored.load_state_dict(diagnostics.state_dict())
    assert torch.equal(restored.difficulties, diagnostics.difficulties)
    assert torch.equal(restored.weights, diagnostics.weights)
    summary = diagnostics.summary(log_difficulty=True)
    assert set(summary) == {"pareto_k", "skewness", "normality_p", "log_skewness", "log_normality_p"}
    assert summary["skewness"] == pytest.approx(0.0, abs=1e-12)

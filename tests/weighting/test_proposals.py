"""Proposal models against scipy (norm, lognorm, gaussian_kde) and hand cases; targets keep their meaning on each.

The property tests draw difficulties from a known law (normal, log-normal, gamma), fit the proposal to one sample,
weight a fresh one and check that the weighted sample has the target's distribution on the support (a weighted
chi-square test for ``uniform``, all mass on the right half for ``easy``/``hard``).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy import stats

from lightning_episodes.weighting import (
    DifficultyEstimator,
    EmpiricalProposal,
    LogNormalProposal,
    NormalProposal,
    Target,
    available_proposals,
    density_ratio_weights,
    get_target,
    importance_weights,
    kde_bandwidth,
    kde_quantiles,
    make_proposal,
    standard_normal_mass,
)
from tests.weighting.test_proposal_contract import ROWS

C = 2.58
Z = standard_normal_mass(C)


def _sample(proposal: str, n: int, seed: int) -> torch.Tensor:
    """Difficulties from the law of the proposal's contract row (normal; log-normal, right skew ~2 like glyphs'
    difficulties; gamma for the empirical)."""
    law = next(row.law for row in ROWS if row.proposal == proposal)
    return torch.from_numpy(law.rvs(size=n, random_state=np.random.default_rng(seed)))


def _fitted(proposal: str, n: int = 4000, seed: int = 0) -> NormalProposal | EmpiricalProposal:
    q = make_proposal(proposal, window=n)
    q.fit(_sample(proposal, n, seed))
    return q  # type: ignore[return-value]


# -- densities and supports against scipy ---------------------------------------------------------------------------


def test_normal_is_the_papers_estimator_and_weights_bit_for_bit() -> None:
    values = _sample("normal", 500, 1)
    q = NormalProposal(decay=0.8, warmup_steps=3)
    reference = DifficultyEstimator(decay=0.8, warmup_steps=3)
    for chunk in values.split(50):
        x = chunk.float()
        if q.ready:
            expected = importance_weights(x, reference.mu, reference.sigma, "uniform")
            assert torch.equal(q.weights(x, get_target("uniform")), expected)
        q.update(chunk)
        reference.update(chunk)
    assert q.state_dict() == reference.state_dict()
    mu, sigma = reference.mu, reference.sigma
    assert q.support() == (mu - C * sigma, mu + C * sigma)
    x = torch.linspace(0.0, 2.0, 7, dtype=torch.float64)
    np.testing.assert_allclose(q.log_density(x).numpy(), stats.norm(mu, sigma).logpdf(x.numpy()), rtol=1e-12)


def test_normal_offline_fit_is_mean_and_variance_ddof0() -> None:
    values = torch.tensor([1.0, 2.0, 4.0, math.nan])
    q = NormalProposal()
    q.fit(values)
    assert q.ready
    assert (q.location, q.estimator.variance, q.nonfinite) == (7 / 3, 14 / 9, 1)  # by hand: 42 / 27


def test_lognormal_against_scipy_and_the_estimator_on_logs() -> None:
    values = _sample("lognormal", 400, 2)
    q = LogNormalProposal(decay=0.9, warmup_steps=2)
    on_logs = DifficultyEstimator(decay=0.9, warmup_steps=2)
    for chunk in values.split(40):
        q.update(chunk)
        on_logs.update(chunk.log())
    m, s = on_logs.mu, on_logs.sigma
    assert (q.location, q.scale) == (m, s)
    law = stats.lognorm(s, scale=math.exp(m))
    x = torch.linspace(0.05, 3.0, 9, dtype=torch.float64)
    np.testing.assert_allclose(q.log_density(x).numpy(), law.logpdf(x.numpy()), rtol=1e-10)
    low, high = q.support()
    assert low == pytest.approx(law.ppf((1 - Z) / 2), rel=1e-9)
    assert high == pytest.approx(law.ppf((1 + Z) / 2), rel=1e-9)
    assert law.cdf(high) - law.cdf(low) == pytest.approx(Z, rel=1e-9)


def test_lognormal_treats_non_positive_difficulties_like_non_finite_ones() -> None:
    q = LogNormalProposal(warmup_steps=2)
    q.update(torch.tensor([0.5, 1.0, 0.0, -1.0]))
    q.update(torch.tensor([0.7, 2.0, math.inf]))
    assert q.ready
    assert q.nonfinite == 3
    assert q.estimator.episodes == 4
    for out_of_support in ("zero", "clamp"):
        w = q.weights(torch.tensor([0.0, -0.5, 0.8]), get_target("uniform"), out_of_support)
        assert w[:2].tolist() == [0.0, 0.0]
        assert w[2] > 0


def test_empirical_is_scipys_gaussian_kde() -> None:
    data = _sample("empirical", 300, 3)
    q = EmpiricalProposal(window=300)
    q.fit(data)
    kde = stats.gaussian_kde(data.numpy())
    assert q.bandwidth == pytest.approx(math.sqrt(kde.covariance[0, 0]), rel=1e-12)
    assert kde_bandwidth(data) == q.bandwidth
    x = torch.linspace(-0.5, 4.0, 11, dtype=torch.float64)
    np.testing.assert_allclose(q.log_density(x).numpy(), kde.logpdf(x.numpy()), rtol=1e-10)
    low, high = q.support()
    assert kde.integrate_box_1d(-np.inf, low) == pytest.approx((1 - Z) / 2, abs=1e-9)
    assert kde.integrate_box_1d(low, high) == pytest.approx(Z, abs=1e-9)


@pytest.mark.parametrize(
    "window",
    [
        np.random.default_rng(0).normal(1.5, 1.0, 1000),
        np.random.default_rng(1).lognormal(0.0, 1.0, 500),
        np.r_[np.zeros(5), np.full(995, 1000.0)],  # a gap where the estimate's CDF is flat
        np.r_[np.random.default_rng(2).normal(0, 1, 199), 1e4],  # a far outlier
        np.array([1.0, 1.0000001]),  # two close values: a tiny bandwidth
        np.r_[np.full(50, 2.0), np.full(50, 3.0)],  # ties
        1e6 + np.random.default_rng(3).uniform(0, 1, 300),  # a large offset
    ],
    ids=["normal", "lognormal", "gap", "outlier", "two", "ties", "offset"],
)
def test_kde_quantiles_are_scipys_at_float64_precision(window: np.ndarray) -> None:
    """Newton's method in its bracket finds the levels of scipy's gaussian_kde CDF to float64 noise on awkward
    windows (flat CDF, far outlier, tiny bandwidth, ties, large offset), as bisection did."""
    data = torch.from_numpy(window)
    bandwidth = kde_bandwidth(data)
    levels = [0.5 - 0.5 * Z, 0.5 + 0.5 * Z, 0.5]
    quantiles = kde_quantiles(data, bandwidth, levels)
    for x, level in zip(quantiles, levels, strict=True):
        mass = float(stats.norm.cdf((x - window) / bandwidth).mean())
        slope = float(stats.norm.pdf((x - window) / bandwidth).mean()) / bandwidth
        # the mass below x is the level up to what one float64 step of x (or of the sum) moves it by
        assert abs(mass - level) <= 8 * slope * np.spacing(abs(x)) + 1e-14


def test_empirical_window_warm_up_and_slide() -> None:
    q = EmpiricalProposal(window=10, warmup_steps=2)
    q.update(torch.arange(4.0))
    assert not q.ready
    q.update(torch.tensor([4.0, math.nan, 5.0, 6.0]))
    assert q.ready
    assert q.nonfinite == 1
    q.update(torch.arange(7.0, 11.0))
    assert q.data.tolist() == [float(v) for v in range(1, 11)]  # the last 10 finite values, oldest first
    assert q.location == 5.5
    assert q.scale == pytest.approx(np.std(np.arange(1, 11)), rel=1e-12)
    restored = EmpiricalProposal(window=10, warmup_steps=2)
    restored.load_state_dict(q.state_dict())
    assert torch.equal(restored.data, q.data)
    assert (restored.support(), restored.bandwidth, restored.ready) == (q.support(), q.bandwidth, q.ready)


def test_empirical_fit_needs_two_values() -> None:
    with pytest.raises(ValueError, match="at least 2 finite"):
        EmpiricalProposal().fit(torch.tensor([1.0, math.nan]))


def test_unknown_proposal_is_named() -> None:
    with pytest.raises(ValueError, match=re.escape(f"proposal must be one of {list(available_proposals())}")):
        make_proposal("gaussian")


# -- targets keep their meaning on every proposal -------------------------------------------------------------------


@pytest.mark.parametrize("target", ["uniform", "easy", "hard", "curriculum"])
def test_the_general_formula_gives_the_papers_weights_for_a_normal(target: str) -> None:
    mu, sigma = 0.7, 0.2
    x = torch.linspace(mu - 3 * sigma, mu + 3 * sigma, 41, dtype=torch.float64)

    def log_q(v: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(stats.norm(mu, sigma).logpdf(v.numpy()))

    for out_of_support in ("zero", "clamp"):
        general = density_ratio_weights(x, log_q, mu - C * sigma, mu + C * sigma, target, C, out_of_support, 0.3)
        paper = importance_weights(x, mu, sigma, target, C, out_of_support, 0.3)
        torch.testing.assert_close(general, paper, rtol=1e-9, atol=1e-12)


def _weighted_chi_square(x: np.ndarray, w: np.ndarray, low: float, high: float, bins: int) -> float:
    """p-value that the w-weighted sample is uniform on [low, high]: sum_b (W_b - W/bins)^2 / sum_{i in b} w_i^2."""
    index = np.clip(((x - low) / (high - low) * bins).astype(int), 0, bins - 1)
    inside = (x >= low) & (x <= high)
    total = np.bincount(index[inside], w[inside], bins)
    squares = np.bincount(index[inside], w[inside] ** 2, bins)
    statistic = float(np.sum((total - total.sum() / bins) ** 2 / squares))
    return float(stats.chi2.sf(statistic, bins - 1))


def _fresh(q: NormalProposal | EmpiricalProposal, law: str, n: int, seed: int) -> torch.Tensor:
    """Draws from q's own law: the parametric law, or for the KDE a resample of it (data point + kernel noise)."""
    if isinstance(q, EmpiricalProposal):
        kde = stats.gaussian_kde(q.data.numpy())
        return torch.from_numpy(kde.resample(n, seed=np.random.default_rng(seed))[0])
    return _sample(law, n, seed)


@pytest.mark.parametrize("proposal", available_proposals())
@pytest.mark.parametrize("seed", [0, 1])
def test_uniform_weights_make_the_difficulties_uniform_over_the_support(proposal: str, seed: int) -> None:
    # fitted to a large sample: the fit's own sampling error is then far below what the test can see
    q = _fitted(proposal, n=4000 if proposal == "empirical" else 200_000, seed=seed)
    x = _fresh(q, proposal, 20000, 100 + seed)
    w = q.weights(x, get_target("uniform")).numpy()
    low, high = q.support()
    assert _weighted_chi_square(x.numpy(), w, low, high, 10) > 1e-3
    assert np.all(w[(x.numpy() < low) | (x.numpy() > high)] == 0)


def test_the_empirical_proposal_flattens_skewed_difficulties_far_better_than_the_normal() -> None:
    """On gamma-distributed difficulties the KDE (window 1,000) is biased only by its smoothing (most at the ends of
    the support): every bin of the weighted histogram within 50% of uniform, and a max/min ratio of the bins at
    most half the normal proposal's."""
    x = _sample("empirical", 20000, 11).numpy()
    spread = {}
    for proposal in ("empirical", "normal"):
        q = _fitted(proposal, n=1000)
        w = q.weights(torch.from_numpy(x), get_target("uniform")).numpy()
        low, high = q.support()
        index = np.clip(((x - low) / (high - low) * 10).astype(int), 0, 9)
        inside = (x >= max(low, 0.0)) & (x <= high)
        totals = np.bincount(index[inside], w[inside], 10)
        share = totals[totals > 0] / totals.sum() * np.count_nonzero(totals)
        spread[proposal] = (share.min(), share.max())
    assert spread["empirical"][0] > 0.5
    assert spread["empirical"][1] < 1.5
    assert spread["normal"][1] / spread["normal"][0] > 2 * spread["empirical"][1] / spread["empirical"][0]


def test_the_normal_proposal_does_not_make_skewed_difficulties_uniform() -> None:
    """The failure the other proposals fix: a normal fitted to log-normal difficulties is far from uniform."""
    q = NormalProposal()
    q.fit(_sample("lognormal", 4000, 0))
    x = _sample("lognormal", 20000, 100)
    low, high = q.support()
    assert low < 0  # the normal's support reaches below zero loss
    assert _weighted_chi_square(x.numpy(), q.weights(x, get_target("uniform")).numpy(), max(low, 0.0), high, 10) < 1e-6


@pytest.mark.parametrize("proposal", available_proposals())
@pytest.mark.parametrize("target", ["easy", "hard"])
def test_easy_and_hard_put_all_mass_on_their_half(proposal: str, target: str) -> None:
    q = _fitted(proposal, n=4000 if proposal == "empirical" else 200_000)
    x = _fresh(q, proposal, 20000, 7)
    w = q.weights(x, get_target(target)).numpy()
    low, high = q.support()
    middle = 0.5 * (low + high)
    half = (x.numpy() <= middle) if target == "easy" else (x.numpy() >= middle)
    assert w[~half].sum() == 0
    lower, upper = (low, middle) if target == "easy" else (middle, high)
    assert _weighted_chi_square(x.numpy(), w, lower, upper, 5) > 1e-3  # and uniform there


@pytest.mark.parametrize("proposal", ["lognormal", "empirical"])
def test_the_curriculum_centre_moves_from_the_low_end_to_the_high_end(proposal: str) -> None:
    q = _fitted(proposal)
    x = _sample(proposal, 20000, 8)
    low, high = q.support()
    means = []
    for progress in (0.0, 0.5, 1.0):
        w = q.weights(x, get_target("curriculum"), progress=progress).numpy()
        means.append(float(np.sum(w * x.numpy()) / np.sum(w)))
    assert low < means[0] < means[1] < means[2] < high
    assert means[1] == pytest.approx(0.5 * (low + high), rel=0.05)


class Triangular(Target):
    """A user's target: density rising linearly from the easiest to the hardest episodes of the support."""

    def density(self, z: torch.Tensor, support_sigmas: float, progress: float | None) -> torch.Tensor:
        return z + support_sigmas


@pytest.mark.parametrize("proposal", available_proposals())
def test_a_custom_target_works_with_every_proposal(proposal: str) -> None:
    q = _fitted(proposal)
    x = _sample(proposal, 40000, 9)
    w = q.weights(x, Triangular()).numpy()
    low, high = q.support()
    # weighted mean of the support position u in [0, 1] under a density proportional to u: 2/3
    u = (x.numpy() - low) / (high - low)
    assert float(np.sum(w * u) / np.sum(w)) == pytest.approx(2 / 3, abs=0.02)

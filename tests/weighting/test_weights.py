"""Importance weights against scipy's densities and hand computations (docs/method.md, "Importance weights")."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.weighting import (
    SIGMA_FLOOR,
    available_targets,
    curriculum_progress,
    effective_sample_size,
    fraction_outside_support,
    importance_weights,
    support_interval,
)

TARGETS = list(available_targets())


def scipy_weights(omegas, mu: float, sigma: float, c: float, target: str, progress: float, mode: str):
    """p / q from scipy's truncated normal and uniform densities, for an array of difficulties.

    Membership of S = [mu - c sigma, mu + c sigma] is decided in difficulty units; the densities are
    evaluated at z = (omega - mu) / sigma (clamped to [-c, c], which only removes rounding at the
    ends), where p_z / q_z equals p / q because sigma cancels.
    """
    omegas = np.asarray(omegas, dtype=np.float64)
    if target == "baseline":
        return np.ones_like(omegas)
    inside = (omegas >= mu - c * sigma) & (omegas <= mu + c * sigma)
    z = np.clip((omegas - mu) / sigma, -c, c)
    q = stats.truncnorm.pdf(z, -c, c)
    if target == "uniform":
        p = stats.uniform.pdf(z, loc=-c, scale=2 * c)
    elif target == "easy":
        p = stats.uniform.pdf(z, loc=-c, scale=c)
    elif target == "hard":
        p = stats.uniform.pdf(z, loc=0.0, scale=c)
    else:
        z_t = (mu - c * sigma + 2 * c * sigma * progress - mu) / sigma
        p = stats.truncnorm.pdf(z, -c - z_t, c - z_t, loc=z_t)
    return np.where(inside | (mode == "clamp"), p / q, 0.0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["zero", "clamp"])
def test_weights_match_scipy_densities(target: str, mode: str) -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        mu, sigma = rng.uniform(-3, 5), rng.uniform(0.05, 3)
        c = float(rng.choice([1.0, 2.0, 2.58, 3.5]))
        progress = float(rng.uniform(0, 1))
        # Points inside, just inside each end, outside, and mu itself (the easy/hard boundary).
        omegas = np.concatenate(
            [
                mu + sigma * rng.uniform(-1.3 * c, 1.3 * c, size=30),
                mu + sigma * c * np.array([-0.999999, 0.999999, -1.5, 1.5]),
                [mu],
            ]
        )
        w = importance_weights(torch.tensor(omegas, dtype=torch.float64), mu, sigma, target, c, mode, progress)
        expected = scipy_weights(omegas, mu, sigma, c, target, progress, mode)
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("progress", [0.0, 0.5, 1.0])
def test_curriculum_at_the_ends_of_its_schedule(progress: float) -> None:
    # mu_t at an end of S: the renormalised target doubles there (docs/method.md), scipy agrees.
    mu, sigma, c = 1.0, 0.5, 2.0  # S = [0, 2], exact in binary
    omegas = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0], dtype=torch.float64)
    w = importance_weights(omegas, mu, sigma, "curriculum", c, progress=progress)
    expected = scipy_weights(omegas.numpy(), mu, sigma, c, "curriculum", progress, "zero")
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-10)
    # The target's density at mu_t = the end of S is twice the untruncated normal's there.
    # With mu_t at the lower end of S, the target there is N(mu_t, sigma^2)'s density divided by its
    # mass on S, Phi(2c) - 1/2: about twice the untruncated density.
    if progress == 0.0:
        q_end = stats.truncnorm(-c, c, loc=mu, scale=sigma).pdf(0.0)
        untruncated = stats.norm(0.0, sigma).pdf(0.0)
        p_end = w[0].item() * q_end
        assert p_end == pytest.approx(untruncated / (stats.norm.cdf(2 * c) - 0.5), rel=1e-10)
        assert p_end == pytest.approx(2 * untruncated, rel=1e-3)


def test_interval_ends_belong_to_the_intervals() -> None:
    mu, sigma, c = 1.0, 0.5, 2.0  # S = [0, 2]
    ends = torch.tensor([0.0, 1.0, 2.0, -1e-12, 2.0 + 1e-12], dtype=torch.float64)
    z_weight = math.erf(c / math.sqrt(2)) * math.sqrt(2 * math.pi) * math.exp(c * c / 2)
    w = importance_weights(ends, mu, sigma, "uniform", c)
    assert w[0].item() == pytest.approx(z_weight / (2 * c), rel=1e-12)
    assert w[2].item() == pytest.approx(z_weight / (2 * c), rel=1e-12)
    assert w[3].item() == 0.0
    assert w[4].item() == 0.0
    # mu belongs to both halves, with the density 1 / c of each.
    z0 = math.erf(c / math.sqrt(2)) * math.sqrt(2 * math.pi) / c
    for target in ("easy", "hard"):
        assert importance_weights(ends[1:2], mu, sigma, target, c).item() == pytest.approx(z0, rel=1e-12)
    easy = importance_weights(ends, mu, sigma, "easy", c)
    hard = importance_weights(ends, mu, sigma, "hard", c)
    assert easy[0] > 0
    assert easy[2] == 0
    assert hard[0] == 0
    assert hard[2] > 0
    # The default c = 2.58 with mu = 0, sigma = 1: the end 2.58 itself is inside.
    w = importance_weights(torch.tensor([-2.58, 2.58], dtype=torch.float64), 0.0, 1.0)
    assert w.tolist() == pytest.approx([13.413649270414057] * 2, rel=1e-12)


def test_hand_computed_uniform_weights() -> None:
    # mu = 2, sigma = 0.5, so z = [0, 1, -2, 3, nan]; w(z) = Z sqrt(2 pi) exp(z^2 / 2) / (2c),
    # Z = erf(2.58 / sqrt 2) = 0.99011996848..., computed with the math module.
    omegas = torch.tensor([2.0, 2.5, 1.0, 3.5, float("nan")], dtype=torch.float64)
    expected_zero = [0.48098114501548433, 0.793003844592732, 3.5539966630473123, 0.0, 0.0]
    expected_clamp = expected_zero[:3] + [13.413649270414057, 0.0]
    assert importance_weights(omegas, 2.0, 0.5).tolist() == pytest.approx(expected_zero, rel=1e-12)
    assert importance_weights(omegas, 2.0, 0.5, out_of_support="clamp").tolist() == pytest.approx(
        expected_clamp, rel=1e-12
    )


def test_uniform_weight_range_and_symmetry() -> None:
    z = torch.linspace(-2.58, 2.58, 1001, dtype=torch.float64)
    w = importance_weights(z, 0.0, 1.0)
    assert w.min().item() == pytest.approx(0.481, abs=1e-3)
    assert w.max().item() == pytest.approx(13.41, abs=1e-2)
    torch.testing.assert_close(w, w.flip(0))
    # sigma cancels: the same z at another scale gives the same weights.
    torch.testing.assert_close(importance_weights(3.0 + 7.0 * z, 3.0, 7.0), w)


def test_uniform_ess_fraction_for_normal_difficulties() -> None:
    gen = torch.Generator().manual_seed(0)
    # Large-batch limit of ESS / |B| = E[w]^2 / E[w^2] under N(0, 1), by quadrature (0.395).
    c = 2.58
    z_mass = stats.norm.cdf(c) - stats.norm.cdf(-c)
    grid = np.linspace(-c, c, 200001)
    second = z_mass**2 / (4 * c * c) * np.trapezoid(np.exp(grid**2 / 2) * math.sqrt(2 * math.pi), grid)
    limit = z_mass**2 / second
    big = torch.randn(400_000, generator=gen, dtype=torch.float64)
    ess = effective_sample_size(importance_weights(big, 0.0, 1.0)).item()
    assert ess / big.numel() == pytest.approx(limit, rel=0.03)
    # |B| = 16: ESS < |B| once difficulties spread, about 0.6 |B| on average (small batches rarely
    # draw the heavy tails, so the mean lies above the limit).
    weights = importance_weights(torch.randn(4000, 16, generator=gen, dtype=torch.float64), 0.0, 1.0)
    fractions = weights.sum(1) ** 2 / (weights**2).sum(1) / 16
    assert 0.5 < fractions.mean().item() < 0.7
    assert fractions.max().item() < 1.0
    assert effective_sample_size(weights[0]).item() == pytest.approx(16 * fractions[0].item(), rel=1e-12)


def test_baseline_is_one_everywhere_even_outside_the_support() -> None:
    omegas = torch.tensor([-100.0, 0.0, 100.0, float("inf"), float("nan")])
    w = importance_weights(omegas, 0.0, 1.0, "baseline")
    assert w.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert importance_weights(omegas, float("nan"), float("nan"), "baseline").tolist() == w.tolist()


def test_dtype_device_and_detach() -> None:
    omegas = torch.tensor([0.1, 0.5, 1.2], requires_grad=True)
    w = importance_weights(omegas, 0.5, 0.3)
    assert w.dtype == torch.float32
    assert not w.requires_grad
    assert importance_weights(omegas.detach().half(), 0.5, 0.3).dtype == torch.float16
    assert importance_weights(torch.tensor([1, 2]), 1.5, 1.0).dtype == torch.get_default_dtype()
    # Tensor mu/sigma are accepted.
    torch.testing.assert_close(importance_weights(omegas, torch.tensor(0.5), torch.tensor(0.3)), w)


def test_degenerate_parameters() -> None:
    omegas = torch.tensor([1.0, 1.0 + 1e-7, 2.0])
    for sigma in (0.0, -1.0, 1e-300):  # floored at SIGMA_FLOOR
        w = importance_weights(omegas.double(), 1.0, sigma)
        expected = importance_weights(omegas.double(), 1.0, SIGMA_FLOOR)
        assert w.tolist() == expected.tolist()
        assert w[0] > 0
        assert w[2] == 0
    for mu, sigma in [(float("nan"), 1.0), (1.0, float("nan")), (float("inf"), 1.0)]:
        assert importance_weights(omegas, mu, sigma).tolist() == [0.0, 0.0, 0.0]
    # Clamp mode with mu = inf: every episode is below S, at its lower end.
    w = importance_weights(omegas.double(), float("inf"), 1.0, out_of_support="clamp")
    assert w.tolist() == pytest.approx([13.413649270414057] * 3)
    # A huge support would overflow exp(z^2 / 2): the weights stay finite, capped at the dtype's max.
    w = importance_weights(torch.tensor([0.0, 40.0]), 0.0, 1.0, support_sigmas=41.0)
    assert torch.isfinite(w).all()
    assert w[1] == torch.finfo(torch.float32).max


finite_floats = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(
    omegas=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=0, max_size=20),
    mu=st.floats(allow_nan=True, allow_infinity=True),
    sigma=st.one_of(st.just(0.0), st.floats(0, 1e-300), st.floats(allow_nan=True, allow_infinity=True)),
    target=st.sampled_from(TARGETS),
    c=st.floats(0.01, 10.0),
    mode=st.sampled_from(["zero", "clamp"]),
    progress=st.floats(0.0, 1.0),
)
def test_weights_are_always_finite_and_non_negative(omegas, mu, sigma, target, c, mode, progress) -> None:
    w = importance_weights(torch.tensor(omegas, dtype=torch.float32), mu, sigma, target, c, mode, progress)
    assert w.shape == (len(omegas),)
    assert w.dtype == torch.float32
    assert torch.isfinite(w).all()
    assert (w >= 0).all()
    ess = effective_sample_size(w)
    assert 0.0 <= ess.item() <= len(omegas)


def test_validation_errors() -> None:
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="target must be one of"):
        importance_weights(x, 0.0, 1.0, target="flat")
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="support_sigmas"):
            importance_weights(x, 0.0, 1.0, support_sigmas=bad)
    with pytest.raises(ValueError, match="out_of_support"):
        importance_weights(x, 0.0, 1.0, out_of_support="drop")
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="progress"):
            importance_weights(x, 0.0, 1.0, progress=bad)
    with pytest.raises(ValueError, match="progress"):
        importance_weights(x, 0.0, 1.0, target="curriculum")
    with pytest.raises(ValueError, match="mu must be a scalar"):
        importance_weights(x, torch.zeros(2), 1.0)


def test_fraction_outside_support_and_interval() -> None:
    assert support_interval(1.0, 0.5, 2.0) == (0.0, 2.0)
    assert support_interval(1.0, 0.0, 2.0) == (1.0 - 2 * SIGMA_FLOOR, 1.0 + 2 * SIGMA_FLOOR)
    omegas = torch.tensor([0.0, 2.0, -0.1, 2.1, 1.0, float("nan"), float("inf")])
    frac = fraction_outside_support(omegas, 1.0, 0.5, 2.0)
    assert frac.dtype == torch.float64
    assert frac.item() == pytest.approx(2 / 5)
    assert fraction_outside_support(torch.tensor([float("nan")]), 0.0, 1.0).item() == 0.0
    # It agrees with the zero weights of the uniform target.
    gen = torch.Generator().manual_seed(1)
    x = 3 * torch.randn(1000, generator=gen, dtype=torch.float64)
    zero = (importance_weights(x, 0.0, 1.0) == 0).double().mean().item()
    assert fraction_outside_support(x, 0.0, 1.0).item() == pytest.approx(zero)
    with pytest.raises(ValueError, match="support_sigmas"):
        fraction_outside_support(x, 0.0, 1.0, support_sigmas=0.0)


def test_curriculum_progress() -> None:
    assert curriculum_progress(0, 100) == 0.0
    assert curriculum_progress(25, 100) == 0.25
    assert curriculum_progress(150, 100) == 1.0
    for bad in (-1, 0, 10.0, True):
        with pytest.raises(ValueError, match="max_steps"):
            curriculum_progress(1, bad)  # type: ignore[arg-type]

"""Normalisers against reference computations written out here: truncation (Ionides 2008), Pareto smoothing
(Vehtari et al. 2024, with scipy's generalised Pareto), the running average of sum w, and the loss they feed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from lightning_episodes.weighting import (
    ParetoSmoothedNormalizer,
    RunningNormalizer,
    gpd_fit,
    make_normalizer,
    pareto_smooth,
    truncate_weights,
    weighted_loss,
)


def test_truncation_caps_at_the_mean_times_root_n() -> None:
    w = torch.tensor([0.5, 0.5, 1.0, 14.0], dtype=torch.float64)
    cap = (0.5 + 0.5 + 1.0 + 14.0) / 4 * math.sqrt(4)  # 8
    assert truncate_weights(w).tolist() == [0.5, 0.5, 1.0, cap]
    # nothing above the cap: unchanged
    assert torch.equal(truncate_weights(torch.tensor([1.0, 2.0, 3.0])), torch.tensor([1.0, 2.0, 3.0]))
    step = make_normalizer("truncated").normalize(w)
    assert step.divisor == "sum_weights"
    assert step.weights.tolist() == [0.5, 0.5, 1.0, cap]


def _psis_reference(sample: np.ndarray) -> np.ndarray:
    """Textbook PSIS on one sample: the M largest replaced, in order, by u + F^-1((i - 1/2) / M), capped at max."""
    order = np.argsort(sample)
    n = sample.size
    m = math.ceil(min(0.2 * n, 3 * math.sqrt(n)))
    threshold = sample[order[-m - 1]]
    k, sigma = gpd_fit(sample[order[-m:]] - threshold)
    smoothed = sample.copy()
    for i, index in enumerate(order[-m:], start=1):
        smoothed[index] = min(threshold + stats.genpareto.ppf((i - 0.5) / m, k, scale=sigma), sample.max())
    return smoothed


def test_pareto_smoothing_of_a_whole_sample_is_textbook_psis() -> None:
    rng = np.random.default_rng(0)
    sample = np.exp(rng.standard_normal(400) * 1.5)  # heavy-tailed weights
    smoothed, k = pareto_smooth(torch.from_numpy(sample), torch.from_numpy(sample))
    np.testing.assert_allclose(smoothed.numpy(), _psis_reference(sample), rtol=1e-10)
    assert k > 0.5  # log-normal weights with sigma 1.5: a heavy tail
    assert np.array_equal(np.argsort(smoothed.numpy(), kind="stable")[:300], np.argsort(sample, kind="stable")[:300])


def test_a_steps_tail_weights_are_mapped_through_the_windows_quantiles() -> None:
    rng = np.random.default_rng(1)
    window = np.exp(rng.standard_normal(300))
    step = window[-4:].copy()  # the step's weights are the window's last ones
    smoothed, _ = pareto_smooth(torch.from_numpy(step), torch.from_numpy(window))
    # each step weight becomes what textbook PSIS makes of it in the whole window
    np.testing.assert_allclose(smoothed.numpy(), _psis_reference(window)[-4:], rtol=1e-10)


def test_too_few_weights_are_left_alone() -> None:
    w = torch.tensor([1.0, 5.0, 0.2])
    smoothed, k = pareto_smooth(w, w)
    assert torch.equal(smoothed, w)
    assert math.isnan(k)


def test_psis_normalizer_keeps_a_window_of_raw_weights_after_the_warm_up() -> None:
    psis = ParetoSmoothedNormalizer(window=10)
    psis.update(torch.ones(4), warmup=True)
    assert psis.recent.numel() == 0  # the warm-up's 1s teach nothing about the tail
    for chunk in torch.arange(1.0, 13.0).split(4):
        psis.update(chunk)
    assert psis.recent.tolist() == [float(v) for v in range(3, 13)]
    restored = ParetoSmoothedNormalizer(window=10)
    restored.load_state_dict(psis.state_dict())
    assert torch.equal(restored.recent, psis.recent)
    assert psis.normalize(torch.tensor([2.0, 3.0])).divisor == "sum_weights"


def test_running_normalizer_is_an_exponential_average_of_sum_w() -> None:
    running = RunningNormalizer(decay=0.5)
    first = running.normalize(torch.tensor([1.0, 1.0, 1.0, 1.0]))
    assert (first.divisor, float(first.denominator)) == ("denominator", 4.0)  # D_0 = the first sum
    running.update(torch.ones(4, dtype=torch.float64), warmup=True)
    step = running.normalize(torch.tensor([0.5, 0.5, 9.0, 0.0]))
    assert float(step.denominator) == 0.5 * 4.0 + 0.5 * 10.0  # the step's own sum enters
    running.update(torch.tensor([0.5, 0.5, 9.0, 0.0], dtype=torch.float64))
    assert running.average == 7.0
    assert RunningNormalizer().state_dict() == {}
    restored = RunningNormalizer(decay=0.5)
    restored.load_state_dict(running.state_dict())
    assert restored.average == 7.0
    # the loss divides by D: W sum w L / D
    losses = torch.tensor([1.0, 2.0, 3.0, 4.0])
    out = weighted_loss(losses, step.weights, step.divisor, denominator=step.denominator)
    assert out.loss.item() == pytest.approx((0.5 * 1 + 0.5 * 2 + 9.0 * 3) / 7.0, rel=1e-6)


def test_scale_only_is_the_plain_mean_times_the_papers_factor() -> None:
    """Hand-computed: w = (1, 1, 2) gives sum w / ESS = (1 + 1 + 4) / 4 = 1.5; losses (1, 2, 3) have mean 2: loss 3."""
    w, losses = torch.tensor([1.0, 1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    step = make_normalizer("scale").normalize(w)
    assert step.weights.tolist() == [1.0, 1.0, 1.0]  # no aim, no spread
    out = weighted_loss(losses, step.weights, step.divisor, denominator=step.denominator)
    assert float(out.loss) == pytest.approx(3.0)
    assert float(out.loss_scale) == pytest.approx(1.5)  # the factor applied, though every weight is 1
    (grad,) = torch.autograd.grad(out.loss, losses)
    assert grad.tolist() == pytest.approx([0.5, 0.5, 0.5])  # 1.5 / 3 for every episode
    # the paper's loss on the same step is the self-normalised estimate times the same factor
    paper = weighted_loss(losses, w).loss
    assert float(paper) == pytest.approx(1.5 * (1 + 2 + 6) / 4)
    # weights all 1: the plain mean; all 4: four times it, as the paper's loss gives; all 0: skipped, as under ess
    cases = ((torch.ones(3), 2.0, False), (torch.full((3,), 4.0), 8.0, False), (torch.zeros(3), 0.0, True))
    for weights, expected, skipped in cases:
        step = make_normalizer("scale").normalize(weights)
        out = weighted_loss(losses, step.weights, step.divisor, denominator=step.denominator)
        assert (float(out.loss), bool(out.skipped)) == (pytest.approx(expected), skipped)


def test_fixed_denominator_is_validated() -> None:
    losses, weights = torch.ones(3), torch.ones(3)
    with pytest.raises(ValueError, match="denominator must be given exactly for divisor='denominator'"):
        weighted_loss(losses, weights, "denominator")
    with pytest.raises(ValueError, match="denominator must be given exactly"):
        weighted_loss(losses, weights, "ess", denominator=3.0)
    with pytest.raises(ValueError, match="denominator must be a finite number > 0"):
        weighted_loss(losses, weights, "denominator", denominator=0.0)
    # a tensor denominator that is not positive skips the step instead (no device sync to check it)
    assert weighted_loss(losses, weights, "denominator", denominator=torch.tensor(0.0)).skipped


def test_unknown_normalization_is_named() -> None:
    with pytest.raises(ValueError, match="normalization must be one of"):
        make_normalizer("clip")

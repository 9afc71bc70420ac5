"""Resampling a step's episodes from a pool of plain candidates: the scheme's counts and inclusion probabilities by
hand and by exhaustive offsets, and goodness of fit (scipy's Kolmogorov-Smirnov test) of the chosen difficulties to
every target, on synthetic normal, log-normal and gamma difficulties, against plain sampling, which must fail it."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.weighting import (
    EmpiricalProposal,
    LogNormalProposal,
    NormalProposal,
    Proposal,
    available_targets,
    get_target,
    inclusion_probabilities,
    placebo_permutation,
    select_candidates,
    selection_fidelity,
    standardize,
    systematic_resample,
    target_cdf,
)

# zero or well above rounding: a weight of 1e-93 next to 1 is lost in the cumulative sums' float64 rounding
weight_lists = st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 20.0)), min_size=2, max_size=40).filter(
    lambda w: sum(w) > 0
)


@settings(max_examples=60, deadline=None)
@given(weights=weight_lists, count=st.integers(1, 40), offset=st.floats(0.0, 0.999999))
@example(weights=[3.8118804812094105] * 3, count=9, offset=0.0)  # edges 3, 6, 9 only up to rounding, points on them
def test_with_replacement_each_candidate_gets_floor_or_ceil_of_its_expected_count(
    weights: list[float], count: int, offset: float
) -> None:
    w = torch.tensor(weights, dtype=torch.float64)
    chosen = systematic_resample(w, count, offset)
    assert chosen.numel() == count
    assert torch.equal(chosen, chosen.sort().values)
    counts = torch.bincount(chosen, minlength=len(weights)).double()
    expected = count * w / w.sum()
    assert bool(((counts >= expected.floor() - 1e-9) & (counts <= expected.ceil() + 1e-9)).all())
    assert bool((counts[w == 0] == 0).all())


@settings(max_examples=60, deadline=None)
@given(weights=weight_lists, count=st.integers(1, 20))
def test_inclusion_probabilities_sum_to_count_are_capped_and_proportional(weights: list[float], count: int) -> None:
    w = torch.tensor(weights, dtype=torch.float64)
    if int((w > 0).sum()) < count:
        return
    pi = inclusion_probabilities(w, count)
    assert math.isclose(float(pi.sum()), count, rel_tol=1e-9)
    assert bool((pi <= 1 + 1e-12).all() & (pi >= 0).all())
    free = (pi < 1 - 1e-12) & (w > 0)
    if int(free.sum()) >= 2:  # below the cap, proportional to w
        ratio = pi[free] / w[free]
        assert torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-9)
    assert bool((pi[w == 0] == 0).all())


def test_without_replacement_includes_each_candidate_with_its_probability() -> None:
    """Over a fine grid of offsets (the scheme's one random number), candidate i is chosen with frequency pi_i."""
    w = torch.tensor([8.0, 1.0, 1.0, 0.0, 3.0, 2.0, 0.5], dtype=torch.float64)
    count, grid = 3, 10_000
    pi = inclusion_probabilities(w, count)
    assert pi[0] == 1.0  # 3 * 8 / 15.5 > 1: capped
    frequency = torch.zeros_like(w)
    for k in range(grid):
        chosen = systematic_resample(w, count, (k + 0.5) / grid, replacement=False)
        assert chosen.unique().numel() == count
        frequency[chosen] += 1.0 / grid
    assert torch.allclose(frequency, pi, atol=2.0 / grid)


def test_hand_computed_choices() -> None:
    w = torch.tensor([1.0, 0.0, 3.0, 0.0])
    assert systematic_resample(w, 4, 0.0).tolist() == [0, 2, 2, 2]  # points 0, 1, 2, 3 on edges 1, 1, 4, 4
    assert systematic_resample(w, 2, 0.6).tolist() == [2, 2]  # points 0.6, 1.6 on edges 0.5, 0.5, 2, 2
    # without replacement: pi = [0.5, 0, 1, 0.5], edges 0.5, 0.5, 1.5, 2; points 0.25, 1.25 and 0.75, 1.75
    w = torch.tensor([1.0, 0.0, 3.0, 1.0])
    assert systematic_resample(w, 2, 0.25, replacement=False).tolist() == [0, 2]
    assert systematic_resample(w, 2, 0.75, replacement=False).tolist() == [2, 3]
    # fewer positive weights than episodes: with replacement after all
    assert systematic_resample(torch.tensor([0.0, 1.0, 0.0]), 2, 0.5, replacement=False).tolist() == [1, 1]


@pytest.mark.parametrize(
    ("weights", "offset"), [([0.0, 0.0], 0.5), ([1.0, math.inf], 0.5), ([-1.0, 2.0], 0.5), ([1.0, 1.0], 1.0)]
)
def test_bad_input_is_refused(weights: list[float], offset: float) -> None:
    with pytest.raises(ValueError, match="positive sum|offset"):
        systematic_resample(torch.tensor(weights), 2, offset)


def test_choice_is_a_pure_function_of_weights_seed_and_step() -> None:
    w = torch.rand(64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    first, _ = select_candidates(w, 16, seed=3, step=7)
    assert torch.equal(first, select_candidates(w.clone(), 16, seed=3, step=7)[0])
    others = [select_candidates(w, 16, seed=s, step=t)[0] for s, t in [(4, 7), (3, 8), (3, 9)]]
    assert any(not torch.equal(first, other) for other in others)
    # plain choices: the pool's first |B| (the plain stream's batch), also where no candidate has weight
    chosen, fallback = select_candidates(None, 16, 3, 7)
    assert not fallback
    assert torch.equal(chosen, torch.arange(16))
    chosen, fallback = select_candidates(torch.zeros(64), 16, 3, 7)
    assert fallback
    assert torch.equal(chosen, torch.arange(16))
    # the placebo: seeded too
    placebo, fallback = select_candidates(w, 16, 3, 7, placebo=True)
    assert not fallback
    assert torch.equal(placebo, select_candidates(w.clone(), 16, 3, 7, placebo=True)[0])


def test_placebo_draws_with_the_targeted_draws_repeats_blind_to_which_candidate_is_which() -> None:
    """The placebo deals the pool's weights to its candidates at random, then draws as the targeted choice does.

    By hand: one candidate holding all the weight is chosen ``count`` times by both; with the placebo, it is the
    candidate that the step's permutation hands that weight to, not the one that earned it. Over many steps with the
    same skewed weights, the targeted choice takes each candidate in proportion to its weight, the placebo each
    equally often (chi-square), and both take as many distinct candidates per step on average: the placebo keeps
    the repeats, so the two differ only in the target."""
    one = torch.tensor([0.0, 0.0, 0.0, 5.0, 0.0, 0.0])
    for step in range(20):
        targeted, _ = select_candidates(one, 3, seed=1, step=step)
        assert targeted.tolist() == [3, 3, 3]
        placebo, _ = select_candidates(one, 3, seed=1, step=step, placebo=True)
        heir = int(torch.nonzero(one[placebo_permutation(1, step, 6)]).item())
        assert placebo.tolist() == [heir] * 3
    # skewed weights (the uniform target's p / q on log-normal difficulties is of this shape); 16 candidates, 4 drawn
    weights = torch.tensor([9.0, 3.0, 2.0, 1.5] + [1.0] * 6 + [0.5] * 6, dtype=torch.float64)
    steps, count = 3000, 4
    targeted_counts, placebo_counts = torch.zeros(16), torch.zeros(16)
    targeted_distinct, placebo_distinct = [], []
    for step in range(steps):
        targeted, _ = select_candidates(weights, count, seed=5, step=step)
        placebo, _ = select_candidates(weights, count, seed=5, step=step, placebo=True)
        targeted_counts += torch.bincount(targeted, minlength=16)
        placebo_counts += torch.bincount(placebo, minlength=16)
        targeted_distinct.append(targeted.unique().numel())
        placebo_distinct.append(placebo.unique().numel())
    expected = steps * count * weights / weights.sum()
    assert stats.chisquare(targeted_counts.numpy(), expected.numpy()).pvalue > 1e-3
    assert stats.chisquare(placebo_counts.numpy()).pvalue > 1e-3  # uniform over the candidates
    assert stats.chisquare(placebo_counts.numpy(), expected.numpy()).pvalue < 1e-12  # and not by weight
    # the repeats: candidate 0 holds 9 / 24.5 of the weight, 1.47 draws a step, so the targeted choice trains about
    # 3.5 distinct episodes of 4; 4 distinct ones a step (the placebo before 2026-11-29) would be 0.45 away
    assert sum(placebo_distinct) / steps < 3.7
    assert sum(placebo_distinct) / steps == pytest.approx(sum(targeted_distinct) / steps, abs=0.05)


def test_target_cdf_matches_closed_forms() -> None:
    c = 2.58
    z = torch.linspace(-3, 3, 61, dtype=torch.float64)
    inside = z.clamp(-c, c)
    uniform = (inside + c) / (2 * c)
    assert torch.allclose(target_cdf(z, get_target("uniform"), c), uniform, atol=1e-9)
    assert torch.allclose(target_cdf(z, get_target("easy"), c), ((inside + c) / c).clamp(max=1), atol=1e-3)
    assert torch.allclose(target_cdf(z, get_target("hard"), c), (inside / c).clamp(min=0), atol=1e-3)
    truncated = stats.truncnorm(-c, c)
    assert torch.allclose(target_cdf(z, get_target("baseline"), c), torch.from_numpy(truncated.cdf(z)), atol=1e-6)
    centre = -c + 2 * c * 0.3  # the curriculum at progress 0.3: N(centre, 1) truncated to [-c, c]
    curriculum = stats.truncnorm(-c - centre, c - centre, loc=centre)
    expected = torch.from_numpy(curriculum.cdf(z))
    assert torch.allclose(target_cdf(z, get_target("curriculum"), c, 0.3), expected, atol=1e-6)


# synthetic difficulty distributions and the proposal that models each (gamma: the kernel density estimate, over
# 5,000 values: with 2,000 its smoothing error alone fails the test)
DISTRIBUTIONS = {
    "normal": (stats.norm(loc=1.2, scale=0.3), lambda: NormalProposal(warmup_steps=2)),
    "lognormal": (stats.lognorm(s=0.5, scale=1.0), lambda: LogNormalProposal(warmup_steps=2)),
    "gamma": (stats.gamma(a=3.0, scale=0.4), lambda: EmpiricalProposal(window=5_000, warmup_steps=2)),
}
BATCH, STEPS = 16, 125


def _pits(
    proposal: Proposal, distribution: stats.rv_continuous, target_name: str, pool: int, plain: bool = False, **options
) -> torch.Tensor:
    """``F_p(z)`` of every episode chosen (or of the plain batch) over ``STEPS`` steps of 16 from ``pool`` each."""
    target, c = get_target(target_name), proposal.support_sigmas
    low, high = proposal.support()
    draws = torch.from_numpy(distribution.rvs(size=(STEPS, pool), random_state=0))
    values = []
    for step in range(STEPS):
        progress = step / STEPS if target_name == "curriculum" else None
        candidates = draws[step]
        if plain:
            chosen = candidates[:BATCH]
        else:
            weights = proposal.weights(candidates, target, "zero", progress)
            chosen = candidates[select_candidates(weights, BATCH, 0, step, **options)[0]]
        values.append(target_cdf(standardize(chosen, low, high, c), target, c, progress))
    return torch.cat(values)


def _fitted(distribution_name: str) -> tuple[Proposal, stats.rv_continuous]:
    distribution, make = DISTRIBUTIONS[distribution_name]
    proposal = make()
    proposal.fit(torch.from_numpy(distribution.rvs(size=20_000, random_state=99)))
    return proposal, distribution


@pytest.mark.parametrize("target_name", [t for t in available_targets() if not get_target(t).plain_sampling])
# the kernel density estimate's weights cost ~0.1 s a step of 512 candidates on 2 loaded cores: gamma is slow
@pytest.mark.parametrize("distribution_name", ["normal", "lognormal", pytest.param("gamma", marks=pytest.mark.slow)])
def test_chosen_difficulties_follow_the_target_and_plain_ones_do_not(target_name: str, distribution_name: str) -> None:
    """``q`` fitted to 20,000 plain difficulties; 125 steps choose 16 of 512 (``k = 32``): the 2,000 chosen
    difficulties pass a KS test against the target (p > 0.001), the plain batches fail it (p < 1e-6).

    ``k = 32`` keeps the finite pool's bias (a candidate of weight ``w`` takes ``w / (w + rest)`` of the pool's mass
    instead of ``w / sum``: order ``w / (k |B|)``) and repeated picks (the chosen are then not independent, which
    the test's p-value assumes) below the test's resolution; at ``k = 4`` the KS distance is 0.02-0.05, see
    :func:`test_a_larger_pool_follows_the_target_more_closely`."""
    proposal, distribution = _fitted(distribution_name)
    chosen = _pits(proposal, distribution, target_name, pool=32 * BATCH)
    plain = _pits(proposal, distribution, target_name, pool=32 * BATCH, plain=True)
    fit, misfit = stats.kstest(chosen.numpy(), "uniform"), stats.kstest(plain.numpy(), "uniform")
    assert fit.pvalue > 1e-3, (fit, misfit)
    assert misfit.pvalue < 1e-6, (fit, misfit)


def test_without_replacement_follows_the_target_where_no_probability_is_capped() -> None:
    proposal, distribution = _fitted("normal")  # uniform at k = 32: pi <= 16 * 13.4 / 512 < 1
    chosen = _pits(proposal, distribution, "uniform", pool=32 * BATCH, replacement=False)
    assert stats.kstest(chosen.numpy(), "uniform").pvalue > 1e-3


def test_a_larger_pool_follows_the_target_more_closely() -> None:
    proposal, distribution = _fitted("normal")
    distances = [
        stats.kstest(_pits(proposal, distribution, "easy", pool=k * BATCH).numpy(), "uniform").statistic
        for k in (2, 4, 32)
    ]
    plain = stats.kstest(_pits(proposal, distribution, "easy", pool=BATCH, plain=True).numpy(), "uniform").statistic
    assert plain > 4 * distances[0], (plain, distances)
    assert distances[0] > distances[1] > distances[2], distances


def test_selection_fidelity_measures_how_far_a_pool_leaves_the_choice_from_the_target() -> None:
    """Plain difficulties already uniform over the proposal's support follow the uniform target at pool 1; normal
    ones do not, and resampling brings them closer as the pool grows (docs/method.md's table, normal row)."""
    generator = torch.Generator().manual_seed(0)
    normal = 0.5 + 0.1 * torch.randn(4000, generator=generator, dtype=torch.float64)
    q = NormalProposal()
    q.fit(normal)
    uniform_target = get_target("uniform")
    low, high = q.support()
    flat = low + (high - low) * torch.rand(4000, generator=generator, dtype=torch.float64)
    assert selection_fidelity(flat, q, uniform_target, pool=1, batch=4) < 1.36 / math.sqrt(1000)  # 5% critical
    distances = [selection_fidelity(normal, q, uniform_target, pool=k, batch=4) for k in (1, 4, 16)]
    assert distances[0] > 0.12
    assert distances[0] > distances[1] > distances[2]
    assert distances[2] < 0.06
    # a pure function of its arguments
    assert selection_fidelity(normal, q, uniform_target, 4, 4, seed=3) == selection_fidelity(
        normal.clone(), q, uniform_target, 4, 4, seed=3
    )
    with pytest.raises(ValueError, match="pool, batch and chosen must be >= 1"):
        selection_fidelity(normal, q, uniform_target, pool=0, batch=4)
    with pytest.raises(ValueError, match="at least one finite difficulty"):
        selection_fidelity(torch.tensor([math.nan]), q, uniform_target, pool=4, batch=4)

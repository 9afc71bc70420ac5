"""The contract every registered proposal keeps: one row per entry of the registry.

A row names the proposal, a law to draw difficulties from and the scipy reference of the fitted ``q``; the tests
check the density, the support, the importance weights of the uniform target and the held-out log-likelihood
against the reference, the checkpoint round-trip of the online state, and a resumed run against an uninterrupted
one. A new proposal is its file plus a row here (``tests/callbacks/test_ddp.py`` builds its two-process cases from
the registry); ``tests/weighting/extensions.py`` holds a test-only one (``tests.gumbel``) to prove it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

from lightning_episodes.weighting import (
    Proposal,
    available_proposals,
    get_target,
    make_proposal,
    standard_normal_mass,
)
from lightning_episodes.weighting.proposals import PROPOSAL_REGISTRY
from tests.helpers import roundtrip, same_state
from tests.weighting import extensions

C = 2.58
Z = standard_normal_mass(C)


class Reference:
    """``q`` as scipy computes it: ``logpdf`` and ``cdf``."""

    def __init__(self, logpdf: Callable[[np.ndarray], np.ndarray], cdf: Callable[[float], float]) -> None:
        self.logpdf, self.cdf = logpdf, cdf


def _normal(data: np.ndarray) -> Reference:
    law = stats.norm(data.mean(), data.std())
    return Reference(law.logpdf, law.cdf)


def _lognormal(data: np.ndarray) -> Reference:
    logs = np.log(data)
    law = stats.lognorm(logs.std(), scale=math.exp(logs.mean()))
    return Reference(law.logpdf, law.cdf)


def _gumbel(data: np.ndarray) -> Reference:
    scale = data.std() * math.sqrt(6.0) / math.pi  # the moments of a Gumbel: mean m + gamma b, variance (pi b)^2 / 6
    law = stats.gumbel_r(data.mean() - np.euler_gamma * scale, scale)
    return Reference(law.logpdf, law.cdf)


def _empirical(data: np.ndarray) -> Reference:
    kde = stats.gaussian_kde(data)
    return Reference(kde.logpdf, lambda x: kde.integrate_box_1d(-np.inf, x))


@dataclass(frozen=True)
class Row:
    """A registered proposal, the law its test data come from, and scipy's ``q`` fitted to a sample."""

    name: str
    law: Any
    reference: Callable[[np.ndarray], Reference]
    options: dict[str, Any]


ROWS = {
    row.name: row
    for row in (
        Row("normal", stats.norm(1.0, 0.3), _normal, {}),
        Row("lognormal", stats.lognorm(0.6, scale=0.5), _lognormal, {}),
        Row("empirical", stats.gamma(2.0, scale=0.4), _empirical, {"window": 300}),
        Row(extensions.PROPOSAL, stats.gumbel_r(1.0, 0.3), _gumbel, {}),
    )
}
NAMES = list(ROWS)


@pytest.fixture(autouse=True)
def _registered() -> Iterator[None]:
    with extensions.registered():
        yield


def _sample(row: Row, n: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(row.law.rvs(size=n, random_state=np.random.default_rng(seed)))


def _build(row: Row, **options: Any) -> Proposal:
    return make_proposal(row.name, **{"support_sigmas": C, "warmup_steps": 3, **row.options, **options})


def test_every_registered_proposal_has_a_row_and_the_library_order() -> None:
    assert set(available_proposals()) == set(ROWS)
    assert available_proposals()[:3] == ("normal", "lognormal", "empirical")


@pytest.mark.parametrize("name", NAMES)
def test_the_fitted_density_support_and_weights_are_scipys(name: str) -> None:
    row = ROWS[name]
    data = _sample(row, 300, seed=0)
    q = _build(row)
    q.fit(data)
    reference = row.reference(data.numpy())
    x = _sample(row, 50, seed=1)
    np.testing.assert_allclose(q.log_density(x).numpy(), reference.logpdf(x.numpy()), rtol=1e-9, atol=1e-9)
    low, high = q.support()  # the central interval of mass Z
    assert reference.cdf(low) == pytest.approx((1 - Z) / 2, abs=1e-9)
    assert reference.cdf(high) == pytest.approx((1 + Z) / 2, abs=1e-9)
    # w = p / q_S with p uniform on S and q_S = q / Z on S; 0 outside
    inside = (x >= low) & (x <= high)
    expected = np.where(inside, Z / (high - low) / np.exp(reference.logpdf(x.numpy())), 0.0)
    np.testing.assert_allclose(q.weights(x, get_target("uniform")).numpy(), expected, rtol=1e-8)
    outside = torch.tensor([low - 1.0, high + 1.0], dtype=torch.float64)
    assert q.weights(outside, get_target("uniform")).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("name", NAMES)
def test_the_heldout_log_likelihood_is_scipys(name: str) -> None:
    row = ROWS[name]
    train, test = _sample(row, 200, seed=2), _sample(row, 100, seed=3)
    expected = row.reference(train.numpy()).logpdf(test.numpy()).sum()
    assert PROPOSAL_REGISTRY[name].heldout_log_likelihood(train, test) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_a_resumed_proposal_continues_exactly(name: str) -> None:
    row = ROWS[name]
    steps = [_sample(row, 8, seed=10 + step) for step in range(10)]
    target = get_target("uniform")
    uninterrupted, first = _build(row), _build(row)
    weights = []
    for step, batch in enumerate(steps):
        weights.append(uninterrupted.weights(batch, target) if uninterrupted.ready else None)
        uninterrupted.update(batch)
        if step < 5:
            first.update(batch)
    assert (uninterrupted.ready, uninterrupted.steps) == (True, 10)
    resumed = _build(row)
    resumed.load_state_dict(roundtrip(first.state_dict()))
    assert same_state(resumed.state_dict(), first.state_dict())
    assert (resumed.ready, resumed.steps, resumed.support()) == (first.ready, first.steps, first.support())
    for step, batch in enumerate(steps[5:], start=5):
        assert torch.equal(resumed.weights(batch, target), weights[step]), step
        resumed.update(batch)
    assert same_state(resumed.state_dict(), uninterrupted.state_dict())
    assert (resumed.location, resumed.scale, resumed.support()) == (
        uninterrupted.location,
        uninterrupted.scale,
        uninterrupted.support(),
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_proposal_counts_what_it_cannot_use(name: str) -> None:
    row = ROWS[name]
    q = _build(row)
    batch = torch.cat([_sample(row, 6, seed=4), torch.tensor([math.nan, math.inf])])
    q.update(batch)
    assert (q.nonfinite, q.steps, q.ready) == (2, 1, False)

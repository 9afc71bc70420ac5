"""The contract every proposal keeps, checked for one of them by :func:`check_proposal` against scipy.

A :class:`ProposalSpec` names a proposal (registered, or its class), a law to draw test difficulties from and the
scipy reference of ``q`` fitted to a sample (:class:`ProposalReference`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lightning_episodes.testing._checks import Check, assert_approx, roundtrip, run_checks, same_state
from lightning_episodes.weighting import Proposal, get_target, make_proposal, standard_normal_mass
from lightning_episodes.weighting.proposals import PROPOSAL_REGISTRY

#: the support half-width ``c`` the proposals are built with, and the mass ``Φ(c) - Φ(-c)`` of q on its support
C = 2.58
Z = standard_normal_mass(C)


@dataclass(frozen=True)
class ProposalReference:
    """``q`` as a reference computes it (scipy's frozen laws have both: ``ProposalReference(law.logpdf, law.cdf)``).

    Args:
        logpdf: ``log q(x)`` of an array.
        cdf: ``q(X <= x)`` of a number.
    """

    logpdf: Callable[[np.ndarray], np.ndarray]
    cdf: Callable[[float], float]


@dataclass(frozen=True)
class ProposalSpec:
    """One proposal and what its contract checks compare it with.

    Args:
        proposal: a registered proposal's name, or a :class:`~lightning_episodes.weighting.Proposal` subclass.
        law: what test difficulties are drawn from: anything with scipy's ``rvs(size=..., random_state=...)``
            (``scipy.stats.norm(1.0, 0.3)``).
        reference: the reference ``q`` fitted to a sample of ``law`` (a 1-D array of float64).
        options: options of the proposal besides ``support_sigmas=2.58`` and ``warmup_steps=3``.
        name: its name in messages and test ids (default: the registered name, or the class's).
    """

    proposal: str | type[Proposal]
    law: Any
    reference: Callable[[np.ndarray], ProposalReference]
    options: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def build(self, **options: Any) -> Proposal:
        """A fresh proposal with ``support_sigmas=2.58``, ``warmup_steps=3``, the spec's options and ``options``."""
        options = {"support_sigmas": C, "warmup_steps": 3, **self.options, **options}
        if isinstance(self.proposal, str):
            return make_proposal(self.proposal, **options)
        return self.proposal.from_options(**options)

    def cls(self) -> type[Proposal]:
        """The proposal's class."""
        return PROPOSAL_REGISTRY[self.proposal] if isinstance(self.proposal, str) else self.proposal

    def sample(self, n: int, seed: int) -> torch.Tensor:
        """``n`` float64 draws of ``law`` from the seed."""
        return torch.from_numpy(self.law.rvs(size=n, random_state=np.random.default_rng(seed)))

    def __str__(self) -> str:
        return self.name or (self.proposal if isinstance(self.proposal, str) else self.proposal.__name__)


def _density_support_and_weights_are_the_reference(spec: ProposalSpec) -> None:
    data = spec.sample(300, seed=0)
    q = spec.build()
    q.fit(data)
    reference = spec.reference(data.numpy())
    x = spec.sample(50, seed=1)
    np.testing.assert_allclose(
        q.log_density(x).numpy(), reference.logpdf(x.numpy()), rtol=1e-9, atol=1e-9, err_msg="log_density"
    )
    low, high = q.support()  # the central interval of mass Z
    assert_approx(reference.cdf(low), (1 - Z) / 2, rel=0.0, abs_tol=1e-9, what="the mass below the support")
    assert_approx(reference.cdf(high), (1 + Z) / 2, rel=0.0, abs_tol=1e-9, what="the mass up to its top")
    # w = p / q_S with p uniform on S and q_S = q / Z on S; 0 outside
    inside = (x >= low) & (x <= high)
    expected = np.where(inside, Z / (high - low) / np.exp(reference.logpdf(x.numpy())), 0.0)
    np.testing.assert_allclose(
        q.weights(x, get_target("uniform")).numpy(), expected, rtol=1e-8, err_msg="the uniform target's weights"
    )
    outside = torch.tensor([low - 1.0, high + 1.0], dtype=torch.float64)
    assert q.weights(outside, get_target("uniform")).tolist() == [0.0, 0.0], "weights outside the support"


def _heldout_log_likelihood_is_the_reference(spec: ProposalSpec) -> None:
    train, test = spec.sample(200, seed=2), spec.sample(100, seed=3)
    expected = spec.reference(train.numpy()).logpdf(test.numpy()).sum()
    assert_approx(spec.cls().heldout_log_likelihood(train, test), expected, rel=1e-9, what="heldout_log_likelihood")


def _a_resumed_proposal_continues_exactly(spec: ProposalSpec) -> None:
    steps = [spec.sample(8, seed=10 + step) for step in range(10)]
    target = get_target("uniform")
    uninterrupted, first = spec.build(), spec.build()
    weights = []
    for step, batch in enumerate(steps):
        weights.append(uninterrupted.weights(batch, target) if uninterrupted.ready else None)
        uninterrupted.update(batch)
        if step < 5:
            first.update(batch)
    ready_steps = (uninterrupted.ready, uninterrupted.steps)
    assert ready_steps == (True, 10), f"(ready, steps) = {ready_steps} after 10 updates with warmup_steps=3"
    resumed = spec.build()
    resumed.load_state_dict(roundtrip(first.state_dict()))
    assert same_state(resumed.state_dict(), first.state_dict()), "the state after loading it"
    assert (resumed.ready, resumed.steps, resumed.support()) == (first.ready, first.steps, first.support()), (
        "ready, steps or support after loading the state"
    )
    for step, batch in enumerate(steps[5:], start=5):
        expected = weights[step]
        assert expected is not None, f"no weights at step {step} of the uninterrupted proposal"
        assert torch.equal(resumed.weights(batch, target), expected), f"step {step}"
        resumed.update(batch)
    assert same_state(resumed.state_dict(), uninterrupted.state_dict()), "the state at the end"
    assert (resumed.location, resumed.scale, resumed.support()) == (
        uninterrupted.location,
        uninterrupted.scale,
        uninterrupted.support(),
    ), "location, scale or support at the end"


def _counts_what_it_cannot_use(spec: ProposalSpec) -> None:
    q = spec.build()
    batch = torch.cat([spec.sample(6, seed=4), torch.tensor([math.nan, math.inf])])
    q.update(batch)
    counted = (q.nonfinite, q.steps, q.ready)
    assert counted == (2, 1, False), f"(nonfinite, steps, ready) = {counted} after one update with a NaN and an inf"


#: the properties of the proposal contract, by name, in the order :func:`check_proposal` checks them
PROPOSAL_CHECKS: dict[str, Check[ProposalSpec]] = {
    "density_support_and_weights_are_the_reference": Check(_density_support_and_weights_are_the_reference),
    "heldout_log_likelihood_is_the_reference": Check(_heldout_log_likelihood_is_the_reference),
    "a_resumed_proposal_continues_exactly": Check(_a_resumed_proposal_continues_exactly),
    "counts_what_it_cannot_use": Check(_counts_what_it_cannot_use),
}


def check_proposal(spec: ProposalSpec, checks: Iterable[str] | None = None) -> None:
    """Check that a proposal keeps the contract of every proposal (a second on a CPU):

    - ``density_support_and_weights_are_the_reference``: fitted to 300 draws of ``spec.law``, its log-density is the
      reference's (to 1e-9), its support the reference's central interval of mass ``Φ(c) - Φ(-c)``, and the
      uniform target's weights ``p / q`` there (0 outside);
    - ``heldout_log_likelihood_is_the_reference``: fitted to 200 draws, the reference's log-likelihood of 100 others;
    - ``a_resumed_proposal_continues_exactly``: one restored from a checkpoint of its state after 5 of 10 online
      updates gives the weights and ends in the state of the one never stopped;
    - ``counts_what_it_cannot_use``: an update with a NaN and an inf counts two non-finite values.

    Args:
        spec: the proposal, the law of its test data and the reference ``q``.
        checks: names of :data:`PROPOSAL_CHECKS` to run (default: all).

    Raises:
        AssertionError: naming the proposal and the first property it breaks.

    Example:
        >>> from scipy import stats
        >>> def fitted(data):  # the normal proposal fits the sample's mean and standard deviation
        ...     law = stats.norm(data.mean(), data.std())
        ...     return ProposalReference(law.logpdf, law.cdf)
        >>> check_proposal(ProposalSpec("normal", law=stats.norm(1.0, 0.3), reference=fitted))
    """
    run_checks(PROPOSAL_CHECKS, spec, checks)

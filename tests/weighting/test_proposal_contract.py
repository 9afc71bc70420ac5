"""The contract every registered proposal keeps: one row per entry of the registry, checked by
:func:`lightning_episodes.testing.check_proposal`.

A row names the proposal, a law to draw difficulties from and the scipy reference of the fitted ``q``; the
harness checks the density, the support, the importance weights of the uniform target and the held-out log-likelihood
against the reference, the checkpoint round-trip of the online state, and a resumed run against an uninterrupted
one. A new proposal is its file plus a row here (``tests/callbacks/test_ddp.py`` builds its two-process cases from
the registry); ``tests/weighting/extensions.py`` holds a test-only one (``tests.gumbel``) to prove it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lightning_episodes.testing import (
    PROPOSAL_CHECKS,
    ProposalReference,
    ProposalSpec,
    check_proposal,
    contract_params,
)
from lightning_episodes.weighting import available_proposals
from tests.weighting import extensions


def _normal(data: np.ndarray) -> ProposalReference:
    law = stats.norm(data.mean(), data.std())
    return ProposalReference(law.logpdf, law.cdf)


def _lognormal(data: np.ndarray) -> ProposalReference:
    logs = np.log(data)
    law = stats.lognorm(logs.std(), scale=math.exp(logs.mean()))
    return ProposalReference(law.logpdf, law.cdf)


def _gumbel(data: np.ndarray) -> ProposalReference:
    scale = data.std() * math.sqrt(6.0) / math.pi  # the moments of a Gumbel: mean m + gamma b, variance (pi b)^2 / 6
    law = stats.gumbel_r(data.mean() - np.euler_gamma * scale, scale)
    return ProposalReference(law.logpdf, law.cdf)


def _empirical(data: np.ndarray) -> ProposalReference:
    kde = stats.gaussian_kde(data)
    return ProposalReference(kde.logpdf, lambda x: kde.integrate_box_1d(-np.inf, x))


ROWS = [
    ProposalSpec("normal", stats.norm(1.0, 0.3), _normal, {}),
    ProposalSpec("lognormal", stats.lognorm(0.6, scale=0.5), _lognormal, {}),
    ProposalSpec("empirical", stats.gamma(2.0, scale=0.4), _empirical, {"window": 300}),
    ProposalSpec(extensions.PROPOSAL, stats.gumbel_r(1.0, 0.3), _gumbel, {}),
]


pytestmark = pytest.mark.usefixtures("registered_extensions")  # tests/weighting/conftest.py


def test_every_registered_proposal_has_a_row_and_the_library_order() -> None:
    assert set(available_proposals()) == {row.proposal for row in ROWS}
    assert available_proposals()[:3] == ("normal", "lognormal", "empirical")


@pytest.mark.parametrize(("row", "check"), contract_params(ROWS, PROPOSAL_CHECKS))
def test_the_proposal_keeps_the_contract(row: ProposalSpec, check: str) -> None:
    check_proposal(row, checks=[check])

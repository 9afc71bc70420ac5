"""The contract every registered target keeps: one row per entry of the registry, checked by
:func:`lightning_episodes.testing.check_target`.

A row names the target, scipy's density of it on the support (in standardised units ``z`` on ``[-c, c]``, normalised
there) and what it declares (``needs_progress``, ``plain_sampling``). The harness checks the renormalised density and
its normaliser against scipy, the importance weights ``p / q`` against scipy's truncated normal (zero outside S,
integrating to one over q), that the density is asked only inside S, the declarations, a pickle round trip (DDP and
records carry targets), and a resumed run against an uninterrupted one; one test per row and property (the three
support widths ``c`` of a property are one test). A new target is its file plus a row here;
``tests/weighting/extensions.py`` holds a test-only one (``tests.triangular``) to prove it.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lightning_episodes.testing import TARGET_CHECKS, TargetSpec, check_target, contract_params
from lightning_episodes.weighting import available_targets
from tests.weighting import extensions


def _curriculum(z: np.ndarray, c: float, progress: float | None) -> np.ndarray:
    assert progress is not None
    center = c * (2 * progress - 1)
    return stats.truncnorm(-c - center, c - center, loc=center).pdf(z)


ROWS = [
    TargetSpec("baseline", lambda z, c, _: stats.truncnorm(-c, c).pdf(z), plain_sampling=True),
    TargetSpec("easy", lambda z, c, _: stats.uniform(-c, c).pdf(z)),
    TargetSpec("hard", lambda z, c, _: stats.uniform(0.0, c).pdf(z)),
    TargetSpec("curriculum", _curriculum, needs_progress=True),
    TargetSpec("uniform", lambda z, c, _: stats.uniform(-c, 2 * c).pdf(z)),
    TargetSpec(extensions.TARGET, lambda z, c, _: stats.triang(1.0, loc=-c, scale=2 * c).pdf(z)),
]


pytestmark = pytest.mark.usefixtures("registered_extensions")  # tests/weighting/conftest.py


def test_every_registered_target_has_a_row_and_the_library_order() -> None:
    assert set(available_targets()) == {row.target for row in ROWS}
    assert available_targets()[:5] == ("baseline", "easy", "hard", "curriculum", "uniform")  # the paper's tables


@pytest.mark.parametrize(("row", "check"), contract_params(ROWS, TARGET_CHECKS))
def test_the_target_keeps_the_contract(row: TargetSpec, check: str) -> None:
    check_target(row, checks=[check])

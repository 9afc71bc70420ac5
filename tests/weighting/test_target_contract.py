"""The contract every registered target keeps: one row per entry of the registry.

A row names the target, scipy's density of it on the support (in standardised units ``z`` on ``[-c, c]``, normalised
there) and what it declares (``needs_progress``, ``plain_sampling``). The tests check the renormalised density and
its normaliser against scipy, the importance weights ``p / q`` against scipy's truncated normal (zero outside S,
integrating to one over q), that the density is asked only inside S, the declarations, a pickle round trip (DDP and
records carry targets), and a resumed run against an uninterrupted one. A new target is its file plus a row here;
``tests/weighting/extensions.py`` holds a test-only one (``tests.triangular``) to prove it.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from lightning_episodes.callbacks import WeightingOptions
from lightning_episodes.weighting import (
    NormalProposal,
    Target,
    available_targets,
    get_target,
    importance_weights,
)
from tests.helpers import roundtrip, same_state
from tests.weighting import extensions

#: ``pdf(z, c, progress)``: scipy's density of the target on ``[-c, c]``, normalised there
Reference = Callable[[np.ndarray, float, float | None], np.ndarray]


def _curriculum(z: np.ndarray, c: float, progress: float | None) -> np.ndarray:
    assert progress is not None
    center = c * (2 * progress - 1)
    return stats.truncnorm(-c - center, c - center, loc=center).pdf(z)


@dataclass(frozen=True)
class Row:
    """A registered target, scipy's density of it on the support, and what it declares."""

    name: str
    pdf: Reference
    needs_progress: bool = False
    plain_sampling: bool = False


ROWS = {
    row.name: row
    for row in (
        Row("baseline", lambda z, c, _: stats.truncnorm(-c, c).pdf(z), plain_sampling=True),
        Row("easy", lambda z, c, _: stats.uniform(-c, c).pdf(z)),
        Row("hard", lambda z, c, _: stats.uniform(0.0, c).pdf(z)),
        Row("curriculum", _curriculum, needs_progress=True),
        Row("uniform", lambda z, c, _: stats.uniform(-c, 2 * c).pdf(z)),
        Row(extensions.TARGET, lambda z, c, _: stats.triang(1.0, loc=-c, scale=2 * c).pdf(z)),
    )
}
NAMES = list(ROWS)
SIGMAS = (1.0, 2.58, 4.0)


@pytest.fixture(autouse=True)
def _registered() -> Iterator[None]:
    with extensions.registered():
        yield


def _progresses(row: Row) -> tuple[float | None, ...]:
    return (0.0, 0.3, 1.0) if row.needs_progress else (None,)


def _grid(c: float) -> torch.Tensor:
    # 101 points on [-c, c], symmetric, with z = 0 and both ends exactly (the built-ins' jumps sit there)
    half = c * torch.linspace(0.0, 1.0, 51, dtype=torch.float64)[1:]
    return torch.cat([-half.flip(0), torch.zeros(1, dtype=torch.float64), half])


def test_every_registered_target_has_a_row_and_the_library_order() -> None:
    assert set(available_targets()) == set(ROWS)
    assert available_targets()[:5] == ("baseline", "easy", "hard", "curriculum", "uniform")  # the paper's tables


@pytest.mark.parametrize("name", NAMES)
def test_the_declarations_are_the_rows(name: str) -> None:
    target, row = get_target(name), ROWS[name]
    assert (target.needs_progress, target.plain_sampling) == (row.needs_progress, row.plain_sampling)
    z = _grid(2.58)
    if row.needs_progress:  # a target that needs t / T says so when it is missing
        with pytest.raises(ValueError, match="progress"):
            target.density(z, 2.58, None)
    else:  # and one that does not ignores it
        assert torch.equal(target.density(z, 2.58, None), target.density(z, 2.58, 0.7))


@pytest.mark.parametrize("c", SIGMAS)
@pytest.mark.parametrize("name", NAMES)
def test_the_renormalised_density_is_scipys(name: str, c: float) -> None:
    target, row = get_target(name), ROWS[name]
    z = _grid(c)
    for progress in _progresses(row):
        density = target.density(z, c, progress) / target.normalizer(c, progress)
        np.testing.assert_allclose(density.numpy(), row.pdf(z.numpy(), c, progress), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("c", SIGMAS)
@pytest.mark.parametrize("name", NAMES)
def test_the_normaliser_is_the_integral_of_the_density(name: str, c: float) -> None:
    target = get_target(name)
    for progress in _progresses(ROWS[name]):
        # scipy's adaptive quadrature, told where the built-ins jump
        expected, _ = integrate.quad(
            lambda v, t=progress: float(target.density(torch.tensor([v], dtype=torch.float64), c, t)[0]),
            -c, c, points=[0.0], epsabs=1e-13, epsrel=1e-12,
        )  # fmt: skip
        assert target.normalizer(c, progress) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_the_weights_are_p_over_q_on_the_support_and_zero_outside(name: str) -> None:
    row, mu, sigma, c = ROWS[name], 0.8, 0.3, 2.58
    q = stats.truncnorm(-c, c)  # q on S, standardised
    x = torch.linspace(mu - 4 * sigma, mu + 4 * sigma, 161, dtype=torch.float64)
    z = ((x - mu) / sigma).numpy()
    inside = np.abs(z) <= c
    for progress in _progresses(row):
        w = importance_weights(x, mu, sigma, name, c, "zero", progress).numpy()
        if row.plain_sampling:  # plain sampling: every finite difficulty has weight 1, even outside S
            assert np.all(w == 1.0)
            continue
        expected = np.where(inside, row.pdf(z, c, progress) / np.where(inside, q.pdf(z), 1.0), 0.0)
        np.testing.assert_allclose(w, expected, rtol=1e-9, atol=1e-12)

        # E_q[w] = integral of p over S = 1 (quad reaches 1e-9 here; it may warn that it cannot reach its own default)
        def weighted_q(v: float, t: float | None = progress) -> float:
            w = importance_weights(torch.tensor([v], dtype=torch.float64), 0.0, 1.0, name, c, "zero", t)
            return float(w[0]) * q.pdf(v)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", integrate.IntegrationWarning)
            mean, _ = integrate.quad(weighted_q, -c, c, points=[0.0], limit=200)
        assert mean == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_the_density_is_asked_inside_the_support_in_float64(name: str) -> None:
    seen: list[torch.Tensor] = []
    target = get_target(name)

    class Recording(Target):
        plain_sampling, needs_progress = target.plain_sampling, target.needs_progress

        def density(self, z: torch.Tensor, support_sigmas: float, progress: float | None) -> torch.Tensor:
            seen.append(z.clone())
            return target.density(z, support_sigmas, progress)

    difficulties = torch.tensor([-10.0, 0.0, 0.5, 10.0, float("nan"), float("inf")])
    for out_of_support in ("zero", "clamp"):
        w = importance_weights(difficulties, 0.0, 1.0, Recording(), 2.58, out_of_support, 0.5)
        assert torch.isfinite(w).all()
        assert (w >= 0).all()
    assert all(z.dtype == torch.float64 and bool((z.abs() <= 2.58).all()) for z in seen)


@pytest.mark.parametrize("name", NAMES)
def test_a_target_survives_pickling_and_is_recorded_by_name(name: str) -> None:
    target = get_target(name)
    copy = pickle.loads(pickle.dumps(target))
    assert type(copy) is type(target)
    z = _grid(2.58)
    for progress in _progresses(ROWS[name]):
        assert torch.equal(copy.density(z, 2.58, progress), target.density(z, 2.58, progress))
    assert WeightingOptions(target=name)["target"] == name  # what a results record keeps


@pytest.mark.parametrize("name", NAMES)
def test_a_resumed_run_weights_exactly_as_an_uninterrupted_one(name: str) -> None:
    """The weights of step t depend on q's state and t / T alone: a proposal restored from a checkpoint at step 5
    gives, with this target, the weights of the run that was never stopped."""
    steps, generator = 10, torch.Generator().manual_seed(0)
    batches = [0.5 + torch.rand(8, generator=generator, dtype=torch.float64) for _ in range(steps)]
    target = get_target(name)
    uninterrupted, first = NormalProposal(warmup_steps=3), NormalProposal(warmup_steps=3)
    expected = []
    for step, batch in enumerate(batches):
        expected.append(uninterrupted.weights(batch, target, progress=step / steps) if uninterrupted.ready else None)
        uninterrupted.update(batch)
        if step < 5:
            first.update(batch)
    resumed = NormalProposal(warmup_steps=3)
    resumed.load_state_dict(roundtrip(first.state_dict()))
    for step, batch in enumerate(batches[5:], start=5):
        assert torch.equal(resumed.weights(batch, pickle.loads(pickle.dumps(target)), progress=step / steps),
                           expected[step]), step  # fmt: skip
        resumed.update(batch)
    assert same_state(resumed.state_dict(), uninterrupted.state_dict())

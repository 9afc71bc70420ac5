"""The custom-target extension point: one method, renormalised by the library, and the registry."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from lightning_episodes.weighting import (
    CurriculumTarget,
    Target,
    UniformTarget,
    available_targets,
    get_target,
    importance_weights,
    register_target,
    targets,
)


@pytest.fixture(autouse=True)
def _private_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test registers into a copy of the registry, so tests stay independent."""
    monkeypatch.setattr(targets._REGISTRY, "_entries", dict(targets._REGISTRY._entries))


class Triangular(Target):
    """Density rising linearly from 0 at the easiest end of S; deliberately unnormalised."""

    def density(self, z, support_sigmas, progress):
        return 3.0 * (z + support_sigmas)


class ScaledGaussian(Target):
    """The curriculum's shape without its closed-form normaliser, scaled by 5."""

    def density(self, z, support_sigmas, progress):
        center = support_sigmas * (2 * progress - 1)
        return 5.0 * torch.exp(-0.5 * (z - center) ** 2)


class StepAtZero(Target):
    """The easy target's shape (a jump at z = 0) with the numerical normaliser, scaled by 7."""

    def density(self, z, support_sigmas, progress):
        return 7.0 * (z <= 0).to(z.dtype)


def test_custom_density_is_renormalised_on_the_support() -> None:
    # Triangular on S = [mu - c sigma, mu + c sigma], mode at the hard end: scipy's triang(c=1).
    mu, sigma, c = 0.7, 0.4, 2.58
    low, high = mu - c * sigma, mu + c * sigma
    omegas = np.linspace(low, high, 41)
    w = importance_weights(torch.tensor(omegas), mu, sigma, Triangular(), c)
    p = stats.triang(1.0, loc=low, scale=high - low).pdf(omegas)
    q = stats.truncnorm(-c, c, loc=mu, scale=sigma).pdf(omegas)
    np.testing.assert_allclose(w.numpy(), p / q, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("c", [1.0, 2.58, 4.0])
def test_numerical_normalizer_matches_the_closed_forms(c: float) -> None:
    assert Triangular().normalizer(c, None) == pytest.approx(3.0 * 2 * c * c, rel=1e-13)
    for progress in (0.0, 0.3, 1.0):
        closed = 5.0 * math.sqrt(2 * math.pi) * CurriculumTarget().normalizer(c, progress)
        assert ScaledGaussian().normalizer(c, progress) == pytest.approx(closed, rel=1e-13)
    # A jump at z = 0 falls on a panel edge: integrated exactly.
    assert StepAtZero().normalizer(c, None) == pytest.approx(7.0 * c, rel=1e-13)


def test_unnormalised_custom_targets_give_the_built_in_weights() -> None:
    gen = torch.Generator().manual_seed(0)
    omegas = 1.0 + 0.5 * torch.randn(200, generator=gen, dtype=torch.float64)
    for progress in (0.0, 0.25, 1.0):
        torch.testing.assert_close(
            importance_weights(omegas, 1.0, 0.5, ScaledGaussian(), progress=progress),
            importance_weights(omegas, 1.0, 0.5, "curriculum", progress=progress),
            rtol=1e-12,
            atol=0,
        )
    for mode in ("zero", "clamp"):
        torch.testing.assert_close(
            importance_weights(omegas, 1.0, 0.5, StepAtZero(), out_of_support=mode),
            importance_weights(omegas, 1.0, 0.5, "easy", out_of_support=mode),
            rtol=1e-12,
            atol=0,
        )


def test_density_is_only_evaluated_on_the_support() -> None:
    seen: list[torch.Tensor] = []

    class Recording(Target):
        def density(self, z, support_sigmas, progress):
            seen.append(z.clone())
            assert z.dtype == torch.float64
            return torch.ones_like(z)

    omegas = torch.tensor([-10.0, 0.0, 10.0, float("nan")])
    for mode in ("zero", "clamp"):
        importance_weights(omegas, 0.0, 1.0, Recording(), out_of_support=mode)
    assert all(bool((z.abs() <= 2.58).all()) for z in seen)


def test_bad_custom_densities_still_give_finite_non_negative_weights() -> None:
    class Wild(Target):
        def density(self, z, support_sigmas, progress):
            out = z.clone()
            out[0], out[1] = float("nan"), float("inf")
            return out  # negative for z < 0

    w = importance_weights(torch.tensor([0.0, 0.1, -1.0, 1.0]), 0.0, 1.0, Wild())
    assert torch.isfinite(w).all()
    assert (w >= 0).all()

    class Zero(Target):
        def density(self, z, support_sigmas, progress):
            return torch.zeros_like(z)

    assert importance_weights(torch.tensor([0.0, 1.0]), 0.0, 1.0, Zero()).tolist() == [0.0, 0.0]


def test_registry_names_custom_targets() -> None:
    assert isinstance(get_target("uniform"), UniformTarget)
    instance = Triangular()
    assert get_target(instance) is instance

    assert register_target("triangular", Triangular) is Triangular
    assert isinstance(get_target("triangular"), Triangular)
    assert "triangular" in available_targets()
    omegas = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    torch.testing.assert_close(
        importance_weights(omegas, 0.5, 0.2, "triangular"), importance_weights(omegas, 0.5, 0.2, instance)
    )

    @register_target("gauss5")
    class Gauss5(ScaledGaussian):
        pass

    assert isinstance(get_target("gauss5"), Gauss5)
    register_target("tri_instance", instance)
    assert get_target("tri_instance") is instance


def test_registry_errors() -> None:
    register_target("mine", Triangular)
    with pytest.raises(ValueError, match="already registered"):
        register_target("mine", Triangular)
    register_target("mine", StepAtZero, overwrite=True)
    assert isinstance(get_target("mine"), StepAtZero)
    with pytest.raises(ValueError, match=r"built-in target and cannot be replaced: .* e\.g\. 'mylab\.uniform'"):
        register_target("uniform", Triangular, overwrite=True)
    register_target("mylab.uniform", Triangular)  # a dotted name: never a built-in's
    assert isinstance(get_target("mylab.uniform"), Triangular)
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        register_target("", Triangular)
    with pytest.raises(TypeError, match="target must be a Target"):
        register_target("thing", object())  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=r"target must be one of \[.*'uniform'.*\]"):
        get_target("unknown")
    with pytest.raises(TypeError):
        Target()  # type: ignore[abstract]


def test_curriculum_needs_progress() -> None:
    with pytest.raises(ValueError, match="progress"):
        CurriculumTarget().normalizer(2.58, None)
    assert CurriculumTarget.center(2.0, 0.0) == -2.0
    assert CurriculumTarget.center(2.0, 1.0) == 2.0

"""The contract every target keeps, checked for one of them by :func:`check_target` against scipy.

A :class:`TargetSpec` names a target (registered, or an instance), scipy's density of it on the support (in
standardised units ``z`` on ``[-c, c]``, normalised there) and what it declares (``needs_progress``,
``plain_sampling``).
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from scipy import integrate, stats

from lightning_episodes.callbacks import WeightingOptions
from lightning_episodes.testing._checks import Check, assert_approx, raises, roundtrip, run_checks, same_state
from lightning_episodes.weighting import NormalProposal, Target, get_target, importance_weights

#: ``pdf(z, c, progress)``: the reference density of a target on ``[-c, c]``, normalised there, as numpy computes it
Reference = Callable[[np.ndarray, float, float | None], np.ndarray]

#: the support half-widths ``c`` the densities are checked at
SIGMAS = (1.0, 2.58, 4.0)


@dataclass(frozen=True)
class TargetSpec:
    """One target and what its contract checks compare it with.

    Args:
        target: a registered target's name, or a :class:`~lightning_episodes.weighting.Target` instance.
        pdf: ``pdf(z, c, progress)``, its density on ``[-c, c]`` normalised there, written independently (with
            scipy: ``lambda z, c, _: stats.uniform(-c, 2 * c).pdf(z)`` for the uniform target).
        needs_progress: what the target must declare: that its density uses the training progress ``t / T``.
        plain_sampling: what the target must declare: that it is plain sampling (weight 1 everywhere).
        name: its name in messages and test ids (default: the registered name, or the class's).
    """

    target: str | Target
    pdf: Reference
    needs_progress: bool = False
    plain_sampling: bool = False
    name: str = ""

    def __str__(self) -> str:
        return self.name or (self.target if isinstance(self.target, str) else type(self.target).__name__)

    def progresses(self) -> tuple[float | None, ...]:
        """The training progresses ``t / T`` it is checked at: three, or only ``None`` if it needs none."""
        return (0.0, 0.3, 1.0) if self.needs_progress else (None,)


def _grid(c: float) -> torch.Tensor:
    # 101 points on [-c, c], symmetric, with z = 0 and both ends exactly (the built-ins' jumps sit there)
    half = c * torch.linspace(0.0, 1.0, 51, dtype=torch.float64)[1:]
    return torch.cat([-half.flip(0), torch.zeros(1, dtype=torch.float64), half])


def _declarations(spec: TargetSpec) -> None:
    target = get_target(spec.target)
    declared = (target.needs_progress, target.plain_sampling)
    assert declared == (spec.needs_progress, spec.plain_sampling), f"(needs_progress, plain_sampling) = {declared}"
    z = _grid(2.58)
    if spec.needs_progress:  # a target that needs t / T says so when it is missing
        with raises(ValueError, match="progress"):
            target.density(z, 2.58, None)
    else:  # and one that does not ignores it
        assert torch.equal(target.density(z, 2.58, None), target.density(z, 2.58, 0.7)), "the density uses progress"


def _density_is_the_reference(spec: TargetSpec) -> None:
    target = get_target(spec.target)
    for c in SIGMAS:
        z = _grid(c)
        for progress in spec.progresses():
            density = target.density(z, c, progress) / target.normalizer(c, progress)
            np.testing.assert_allclose(
                density.numpy(), spec.pdf(z.numpy(), c, progress), rtol=1e-11, atol=1e-13,
                err_msg=f"the renormalised density at c={c}, progress={progress}",
            )  # fmt: skip


def _normalizer_is_the_integral(spec: TargetSpec) -> None:
    target = get_target(spec.target)
    for c in SIGMAS:
        for progress in spec.progresses():
            # scipy's adaptive quadrature, told where the built-ins jump
            expected, _ = integrate.quad(
                lambda v, c=c, t=progress: float(target.density(torch.tensor([v], dtype=torch.float64), c, t)[0]),
                -c, c, points=[0.0], epsabs=1e-13, epsrel=1e-12,
            )  # fmt: skip
            assert_approx(target.normalizer(c, progress), expected, rel=1e-10, what=f"normalizer({c}, {progress})")


def _weights_are_p_over_q(spec: TargetSpec) -> None:
    mu, sigma, c = 0.8, 0.3, 2.58
    q = stats.truncnorm(-c, c)  # q on S, standardised
    x = torch.linspace(mu - 4 * sigma, mu + 4 * sigma, 161, dtype=torch.float64)
    z = ((x - mu) / sigma).numpy()
    inside = np.abs(z) <= c
    for progress in spec.progresses():
        w = importance_weights(x, mu, sigma, spec.target, c, "zero", progress).numpy()
        if spec.plain_sampling:  # plain sampling: every finite difficulty has weight 1, even outside S
            assert np.all(w == 1.0), "plain sampling gives weights other than 1"
            continue
        expected = np.where(inside, spec.pdf(z, c, progress) / np.where(inside, q.pdf(z), 1.0), 0.0)
        np.testing.assert_allclose(w, expected, rtol=1e-9, atol=1e-12, err_msg=f"p / q at progress={progress}")

        # E_q[w] = integral of p over S = 1 (quad reaches 1e-9 here; it may warn that it cannot reach its own default)
        def weighted_q(v: float, t: float | None = progress) -> float:
            w = importance_weights(torch.tensor([v], dtype=torch.float64), 0.0, 1.0, spec.target, c, "zero", t)
            return float(w[0]) * q.pdf(v)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", integrate.IntegrationWarning)
            mean, _ = integrate.quad(weighted_q, -c, c, points=[0.0], limit=200)
        assert_approx(mean, 1.0, rel=0.0, abs_tol=1e-6, what=f"E_q[w] at progress={progress}")


def _density_is_asked_inside_the_support_in_float64(spec: TargetSpec) -> None:
    seen: list[torch.Tensor] = []
    target = get_target(spec.target)

    class Recording(Target):
        plain_sampling, needs_progress = target.plain_sampling, target.needs_progress

        def density(self, z: torch.Tensor, support_sigmas: float, progress: float | None) -> torch.Tensor:
            seen.append(z.clone())
            return target.density(z, support_sigmas, progress)

    difficulties = torch.tensor([-10.0, 0.0, 0.5, 10.0, float("nan"), float("inf")])
    for out_of_support in ("zero", "clamp"):
        w = importance_weights(difficulties, 0.0, 1.0, Recording(), 2.58, out_of_support, 0.5)
        assert torch.isfinite(w).all(), f"out_of_support={out_of_support}: weights {w.tolist()}"
        assert (w >= 0).all(), f"out_of_support={out_of_support}: weights {w.tolist()}"
    assert all(z.dtype == torch.float64 and bool((z.abs() <= 2.58).all()) for z in seen), "asked outside S"


def _survives_pickling_and_is_recorded_by_name(spec: TargetSpec) -> None:
    target = get_target(spec.target)
    copy = pickle.loads(pickle.dumps(target))
    assert type(copy) is type(target), f"unpickled as a {type(copy).__name__}"
    z = _grid(2.58)
    for progress in spec.progresses():
        assert torch.equal(copy.density(z, 2.58, progress), target.density(z, 2.58, progress)), "unpickled differs"
    assert copy.init_args == target.init_args, "unpickled with other arguments"
    # what a results record keeps: a name as it is, an object as its class path and arguments
    name = spec.target if isinstance(spec.target, str) else spec.target.config()
    recorded = WeightingOptions(target=spec.target)["target"]
    assert recorded == name, f"a results record names it {recorded!r}"


def _a_resumed_run_weights_exactly(spec: TargetSpec) -> None:
    """The weights of step t depend on q's state and t / T alone: a proposal restored from a checkpoint at step 5
    gives, with this target, the weights of the run that was never stopped."""
    steps, generator = 10, torch.Generator().manual_seed(0)
    batches = [0.5 + torch.rand(8, generator=generator, dtype=torch.float64) for _ in range(steps)]
    target = get_target(spec.target)
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
        before = expected[step]
        assert before is not None, f"no weights at step {step} of the uninterrupted run"
        weights = resumed.weights(batch, pickle.loads(pickle.dumps(target)), progress=step / steps)
        assert torch.equal(weights, before), f"step {step}"
        resumed.update(batch)
    assert same_state(resumed.state_dict(), uninterrupted.state_dict()), "the proposal's state at the end"


#: the properties of the target contract, by name, in the order :func:`check_target` checks them
TARGET_CHECKS: dict[str, Check[TargetSpec]] = {
    "declarations": Check(_declarations),
    "density_is_the_reference": Check(_density_is_the_reference),
    "normalizer_is_the_integral": Check(_normalizer_is_the_integral),
    "weights_are_p_over_q": Check(_weights_are_p_over_q),
    "density_is_asked_inside_the_support_in_float64": Check(_density_is_asked_inside_the_support_in_float64),
    "survives_pickling_and_is_recorded_by_name": Check(_survives_pickling_and_is_recorded_by_name),
    "a_resumed_run_weights_exactly": Check(_a_resumed_run_weights_exactly),
}


def check_target(spec: TargetSpec, checks: Iterable[str] | None = None) -> None:
    """Check that a target keeps the contract of every target (a second on a CPU):

    - ``declarations``: ``needs_progress`` and ``plain_sampling`` are the spec's; a target that needs the progress
      raises ``ValueError`` naming it without one, and one that does not ignores it;
    - ``density_is_the_reference``: the density renormalised on ``[-c, c]`` is ``spec.pdf`` (to 1e-11), for ``c`` in
      :data:`SIGMAS` and three progresses if it needs them;
    - ``normalizer_is_the_integral``: ``normalizer(c, progress)`` is scipy's integral of the density (to 1e-10);
    - ``weights_are_p_over_q``: :func:`~lightning_episodes.weighting.importance_weights` are ``spec.pdf`` over scipy's
      truncated normal on the support and 0 outside, integrating to 1 over q (or all 1 for plain sampling);
    - ``density_is_asked_inside_the_support_in_float64``: finite, non-negative weights for any difficulty, the density
      asked only inside ``[-c, c]``, in float64;
    - ``survives_pickling_and_is_recorded_by_name``: a pickled copy has the same density (DDP and records carry
      targets), and a results record names it;
    - ``a_resumed_run_weights_exactly``: with a proposal restored from a checkpoint, the weights of the run that was
      never stopped.

    Args:
        spec: the target and its reference density.
        checks: names of :data:`TARGET_CHECKS` to run (default: all).

    Raises:
        AssertionError: naming the target and the first property it breaks.

    Example:
        >>> from scipy import stats
        >>> check_target(TargetSpec("uniform", pdf=lambda z, c, _: stats.uniform(-c, 2 * c).pdf(z)))
    """
    run_checks(TARGET_CHECKS, spec, checks)

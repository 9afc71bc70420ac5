"""The weighting callback's options (one frozen ``WeightingOptions``) and its checkpointed state across versions."""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch
from scipy import stats

from lightning_episodes.callbacks import DifficultyWeightingCallback, WeightingOptions
from lightning_episodes.weighting import NormalProposal, Proposal, register_proposal, selection_fidelity
from lightning_episodes.weighting.proposals import PROPOSAL_REGISTRY

#: The state a run with ``proposal="lognormal", normalization="running"`` checkpointed before the options became one
#: ``WeightingOptions`` (written by that version: 3 online steps of 2 episodes, 2 normaliser updates, 3 diagnostics).
OLD_STATE = {
    "estimator": {
        "steps": 3, "ready": True, "sum": 3.1780538303479458, "sum_squares": 3.609214030403589, "count": 4,
        "mu": 0.6366244288398596, "variance": 0.4387844985189645, "nonfinite": 0, "episodes": 6,
    },
    "normalizer": {"average": 2.01},
    "diagnostics": {
        "difficulties": torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64),
        "weights": torch.tensor([0.5, 1.0, 1.5], dtype=torch.float64),
    },
    "skipped_steps": 1, "nonfinite_episodes": 2, "verdict": "", "fit_warnings": 0,
}  # fmt: skip


def test_an_old_checkpoints_state_resumes_under_the_same_key() -> None:
    callback = DifficultyWeightingCallback(warmup_steps=2, proposal="lognormal", normalization="running", window=10)
    assert callback.state_key == "DifficultyWeightingCallback[]"
    callback.load_state_dict(OLD_STATE)
    assert callback.ready
    assert callback.mu == 0.6366244288398596
    assert callback.sigma == math.sqrt(0.4387844985189645)
    assert (callback.state.skipped_steps, callback.state.nonfinite_episodes) == (1, 2)
    assert callback.state.normalizer.state_dict() == {"average": 2.01}
    assert callback.state.diagnostics.weights.tolist() == [0.5, 1.0, 1.5]
    # and it is written back in the same format
    state = callback.state_dict()
    assert state.keys() == OLD_STATE.keys()
    assert state["estimator"] == OLD_STATE["estimator"]


def test_the_options_are_kept_once_frozen_and_read_as_plain_values() -> None:
    callback = DifficultyWeightingCallback(proposal="empirical", support_sigmas=3, reference_checkpoint=None)
    options = callback.options
    assert isinstance(options, WeightingOptions)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.window = 5  # type: ignore[misc]
    assert not {"proposal", "warmup_steps", "estimate", "mode"} & set(vars(callback))  # no second copy
    assert dict(options) == {field.name: getattr(options, field.name) for field in dataclasses.fields(options)}
    assert options.proposal_options() == {
        "support_sigmas": 3.0, "decay": 0.9, "warmup_steps": 100, "update": "episode", "window": 1000,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"proposal": "gaussian"}, r"^DifficultyWeightingCallback: proposal must be one of \['normal', 'lognormal', "),
        ({"normalization": "clip"}, r"^DifficultyWeightingCallback: normalization must be one of \['ess', 'self', "),
        ({"pool": 1}, r"^DifficultyWeightingCallback: pool must be an integer >= 2, got 1$"),
        ({"decay": 1.0}, r"^DifficultyWeightingCallback: decay must be a number in \[0, 1\), got 1.0$"),
    ],
)
def test_a_bad_option_is_one_line_naming_it_and_its_range(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        WeightingOptions(**options)  # type: ignore[arg-type]
    assert "\n" not in str(raised.value)


def test_a_registered_proposal_is_accepted_and_listed_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PROPOSAL_REGISTRY, "_entries", dict(PROPOSAL_REGISTRY._entries))

    @register_proposal("wide_normal")
    class WideNormal(NormalProposal):
        """The normal with twice its scale."""

        @property
        def scale(self) -> float:
            return 2.0 * super().scale

    callback = DifficultyWeightingCallback(proposal="wide_normal", warmup_steps=2)
    assert isinstance(callback.state.proposal, WideNormal)
    assert isinstance(callback.state.proposal, Proposal)
    with pytest.raises(ValueError, match=r"'empirical', 'wide_normal'\], got 'oracle'"):
        DifficultyWeightingCallback(proposal="oracle")


@pytest.mark.parametrize(
    ("law", "proposal", "expected"),
    [
        ("normal", "normal", None),  # a fitting proposal on symmetric difficulties: pool 4 follows the target
        ("lognormal", "lognormal", "larger"),  # skewness 2: pool 4 leaves the batches off it, pool 16 comes closer
        ("lognormal", "normal", "misfit"),  # the normal's support reaches below the easiest episodes: no pool helps
    ],
)
def test_the_pool_check_says_whether_a_larger_pool_would_help(law: str, proposal: str, expected: str | None) -> None:
    """docs/method.md's table in a warning: the warm-up's 400 difficulties, pool 4 of |B| = 4, the uniform target."""
    generator = torch.Generator().manual_seed(0)
    normal = torch.randn(400, generator=generator, dtype=torch.float64)
    sample = 0.5 + 0.1 * normal if law == "normal" else 0.5 * torch.exp(0.55 * normal)
    callback = DifficultyWeightingCallback(mode="resample", proposal=proposal)
    state = callback.state
    state.proposal.fit(sample)
    state.diagnostics.observe(sample, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state.check_pool(4, 4, callback.target, None, "zero", proposal)
    messages = [str(w.message) for w in caught]
    if expected is None:
        assert messages == []
        return
    (message,) = messages
    distance = float(re.search(r"about (\d\.\d\d) from the target", message)[1])  # type: ignore[index]
    assert distance > 0.1
    assert f"on the warm-up's 400 difficulties (skewness {stats.skew(sample.numpy()):.1f};" in message
    if expected == "larger":
        reached = float(re.search(r"pool=16 would reach about (\d\.\d\d)", message)[1])  # type: ignore[index]
        assert reached < distance - 0.02
    else:
        assert "a larger pool would not help (pool=16: about 0.2" in message
        assert "proposal='normal'" in message


def _pool_warnings(check: Callable[[], None]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check()
    return [str(w.message) for w in caught if "pool=" in str(w.message)]


def test_the_pool_check_simulates_with_the_proposal_fitted_to_the_difficulties_it_draws_from() -> None:
    """A warm-up whose loss fell: ``q`` (the whole warm-up's mean, 1.47) sits 1.3 sigma above the recent difficulties
    (1.31), so the uniform target on ``q``'s support puts mass where none of them lies. That is the warm-up's drift,
    not the pool: within a step the online ``q`` follows the difficulties. On normal difficulties with a fitting
    normal, pool 4 follows the target (docs/method.md's table: 0.046), and the check says nothing."""
    generator = torch.Generator().manual_seed(0)
    recent = 1.31 + 0.12 * torch.randn(1000, generator=generator, dtype=torch.float64)
    callback = DifficultyWeightingCallback(mode="resample")
    state, target = callback.state, callback.target
    state.proposal.fit(1.47 + 0.135 * torch.randn(1600, generator=generator, dtype=torch.float64))
    state.diagnostics.observe(recent, None)
    stale = selection_fidelity(recent, state.proposal, target, 4, 4)
    fitted = NormalProposal()
    fitted.fit(recent)
    assert stale > 0.3  # the simulation with the stale q: the target's mass above the difficulties
    assert state.pool_fidelity(4, 4, target, None, "zero") == selection_fidelity(recent, fitted, target, 4, 4) < 0.07
    assert _pool_warnings(lambda: state.check_pool(4, 4, target, None, "zero", "normal")) == []
    assert (state.pool_verdict, state.proposal.location) == ("on", pytest.approx(1.47, abs=0.01))  # q untouched


def test_the_pool_is_rechecked_on_the_distance_its_chosen_batches_reached() -> None:
    """Losses near 0 and right-skewed (gamma, shape 1.6): the normal's support ``mu -+ 2.58 sigma`` reaches below 0,
    where no difficulty lies, so at best the chosen quantiles ``u = F_p(z)`` are uniform on ``[u0, 1]`` with
    ``u0 = (2.58 sigma - mu) / (2 x 2.58 sigma)`` the target's mass below 0, and their KS distance from ``U(0, 1)``
    is ``u0`` whatever the pool. Measured above 0.1 with a full window, the re-check warns once, with the measured
    distance and that a larger pool would not help; silent while the verdict holds, again after it came back."""
    sample = torch.from_numpy(np.random.default_rng(0).gamma(1.6, 0.065, 1000))
    callback = DifficultyWeightingCallback(mode="resample")
    state, target = callback.state, callback.target
    state.proposal.fit(sample)
    state.diagnostics.observe(sample, None)
    mu, sigma = float(sample.mean()), float(sample.std(correction=0))
    floor = (2.58 * sigma - mu) / (2 * 2.58 * sigma)
    assert 0.2 < floor < 0.3  # 1 / 2 - 1 / (2 x 2.58 cv), the gamma's cv 1.6 ** -0.5: about 0.255
    fit = state.selection_fit
    assert fit is not None
    grid = (torch.arange(1000, dtype=torch.float64) + 0.5) / 1000
    fit.chosen, fit.plain = floor + (1 - floor) * grid, floor + (1 - floor) * grid**2
    ks = fit.summary()["ks"]
    assert ks == pytest.approx(floor, abs=1e-3)

    def recheck() -> list[str]:
        return _pool_warnings(lambda: state.recheck_pool(4, 4, target, None, "zero", "normal"))

    (message,) = recheck()
    assert f"at a Kolmogorov-Smirnov distance of {ks:.2f} from the target (weighting/ks over the last 1000" in message
    reached = re.search(
        r"pool=4 would reach about (\d\.\d\d); a larger pool would not help \(pool=16: about (\d\.\d\d)", message
    )
    assert reached is not None, message
    assert min(float(reached[1]), float(reached[2])) > floor - 0.03  # no pool reaches below the floor
    assert recheck() == []  # the verdict holds: said once
    fit.chosen = grid  # on the target: the verdict turns back, silently
    assert recheck() == []
    assert state.pool_verdict == "on"
    fit.chosen = floor + (1 - floor) * grid
    assert len(recheck()) == 1
    restored = DifficultyWeightingCallback(mode="resample")
    restored.load_state_dict(callback.state_dict())  # a resumed run remembers what it said
    assert (restored.state.pool_verdict, restored.state.pool_warnings) == ("off", 2)
    fit.chosen = fit.chosen[:999]  # a window not yet full measures nothing
    state.pool_verdict = ""
    assert recheck() == []
    assert state.pool_verdict == ""


def test_a_recheck_whose_pool_reaches_the_target_in_simulation_does_not_blame_the_pool() -> None:
    """Normal difficulties with a fitting normal proposal: pool 4 reaches the target in simulation (docs/method.md's
    table: 0.046). Chosen batches measured off the target anyway (as far as plain ones) are then not the pool's doing,
    and the warning says so instead of advising a larger pool or another proposal."""
    sample = 1.31 + 0.12 * torch.randn(1000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    callback = DifficultyWeightingCallback(mode="resample")
    state, target = callback.state, callback.target
    state.proposal.fit(sample)
    state.diagnostics.observe(sample, None)
    fit = state.selection_fit
    assert fit is not None
    grid = (torch.arange(1000, dtype=torch.float64) + 0.5) / 1000
    fit.chosen = fit.plain = grid**2  # a KS distance of 0.25 from U(0, 1)
    (message,) = _pool_warnings(lambda: state.recheck_pool(4, 4, target, None, "zero", "normal"))
    predicted = float(re.search(r"pool=4 would reach about (\d\.\d\d)", message)[1])  # type: ignore[index]
    assert predicted < 0.1
    assert message.endswith(", within 0.10: the pool is not what keeps the batches off the target")


def test_the_advice_never_proposes_the_proposal_in_use() -> None:
    """Where no larger pool helps, the advice names a proposal that fits the difficulties' skew, ``empirical``: for a
    run that uses it already, the cause is the target's mass, not the proposal's shape."""
    sample = 0.5 * torch.exp(0.55 * torch.randn(400, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    for proposal, expected in [
        ("normal", "proposal='normal' puts the target's mass where the difficulties are not (a proposal that fits "
                   "their skew, e.g. proposal=empirical, may)"),
        ("empirical", "proposal='empirical' follows their shape already: the target puts its mass where few "
                      "difficulties lie"),
    ]:  # fmt: skip
        callback = DifficultyWeightingCallback(mode="resample", proposal=proposal)
        callback.state.proposal.fit(sample)
        callback.state.diagnostics.observe(sample, None)
        advice = callback.state._pool_advice(0.0, 4, 4, callback.target, None, "zero", proposal)  # nothing to reach
        assert advice.startswith("; a larger pool would not help (pool=16: about ")
        assert advice.endswith(expected)

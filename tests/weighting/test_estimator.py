"""DifficultyEstimator against a plain re-implementation of docs/method.md's formulas."""

from __future__ import annotations

import io
import math
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_episodes.weighting import SIGMA_FLOOR, DifficultyEstimator, difficulty_statistics


def reference(stream: list[list[float]], decay: float, warmup_steps: int, update: str) -> list[tuple]:
    """(ready, mu, variance) after each step, straight from docs/method.md (warm-up keeps a list of values)."""
    history, warm, ready, mu, var = [], [], False, 0.0, 0.0
    for step, batch in enumerate(stream, start=1):
        finite = [v for v in batch if math.isfinite(v)]
        if not ready:
            warm.extend(finite)
            if step >= warmup_steps and len(warm) >= 2:
                mu, var, ready = float(np.mean(warm)), float(np.var(warm)), True
        elif finite and update == "episode":
            for omega in finite:
                old_mu = mu
                mu = decay * mu + (1 - decay) * omega
                var = decay * var + (1 - decay) * (omega - old_mu) ** 2
        elif finite:
            m, v = float(np.mean(finite)), float(np.var(finite))
            var = decay * var + (1 - decay) * (v + (m - mu) ** 2)
            mu = decay * mu + (1 - decay) * m
        history.append((ready, mu, var))
    return history


def random_stream(seed: int, steps: int = 40) -> list[list[float]]:
    rng = random.Random(seed)
    stream = []
    for step in range(steps):
        drift = 2.0 - step / steps  # the model learns: difficulty drifts down
        batch = [rng.gauss(drift, 0.4) for _ in range(rng.choice([1, 4, 16, 32]))]
        if rng.random() < 0.3:
            batch[rng.randrange(len(batch))] = rng.choice([math.nan, math.inf, -math.inf])
        if rng.random() < 0.05:
            batch = [math.nan] * len(batch)  # a step with nothing finite
        stream.append(batch)
    return stream


@pytest.mark.parametrize("update", ["episode", "batch"])
@pytest.mark.parametrize(("decay", "warmup_steps"), [(0.9, 2), (0.9, 5), (0.5, 3), (0.0, 2), (0.99, 10)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_reference_over_random_streams(update: str, decay: float, warmup_steps: int, seed: int) -> None:
    stream = random_stream(seed)
    est = DifficultyEstimator(decay=decay, warmup_steps=warmup_steps, update=update)
    for step, (batch, (ready, mu, var)) in enumerate(
        zip(stream, reference(stream, decay, warmup_steps, update), strict=True), start=1
    ):
        est.update(batch if step % 2 else torch.tensor(batch, dtype=torch.float64))
        assert est.steps == step
        assert est.ready == ready
        if ready:
            assert est.mu == pytest.approx(mu, rel=1e-12, abs=1e-12)
            assert est.variance == pytest.approx(var, rel=1e-12, abs=1e-12)
            assert est.sigma == pytest.approx(max(math.sqrt(var), SIGMA_FLOOR), rel=1e-12)
    assert est.nonfinite == sum(not math.isfinite(v) for b in stream for v in b)
    assert est.episodes == sum(math.isfinite(v) for b in stream for v in b)


def test_warm_up_boundary_by_hand() -> None:
    est = DifficultyEstimator(decay=0.9, warmup_steps=3)
    est.update([1.0, 2.0])
    est.update(torch.tensor([3.0, float("nan")]))
    assert not est.ready
    assert est.mu == 2.0
    assert est.variance == pytest.approx(2 / 3)
    est.update([6.0])  # third step: warm-up over, mu = 12 / 4, var = 50 / 4 - 9
    assert est.ready
    assert est.mu == 3.0
    assert est.variance == pytest.approx(3.5)
    est.update([4.0, 2.0])  # per episode, in order
    mu1, var1 = 0.9 * 3 + 0.1 * 4, 0.9 * 3.5 + 0.1 * (4 - 3) ** 2
    mu2, var2 = 0.9 * mu1 + 0.1 * 2, 0.9 * var1 + 0.1 * (2 - mu1) ** 2
    assert est.mu == pytest.approx(mu2, rel=1e-15)
    assert est.variance == pytest.approx(var2, rel=1e-15)

    batch = DifficultyEstimator(decay=0.9, warmup_steps=2, update="batch")
    batch.update([1.0, 3.0])
    batch.update([2.0, 2.0])  # mu = 2, var = 0.5
    batch.update([4.0, 2.0])  # m = 3, v = 1
    assert batch.mu == pytest.approx(0.9 * 2 + 0.1 * 3)
    assert batch.variance == pytest.approx(0.9 * 0.5 + 0.1 * (1 + (3 - 2) ** 2))
    assert (est.nonfinite, est.episodes, est.steps) == (1, 6, 4)


def test_order_matters_per_episode_but_not_per_batch() -> None:
    estimates = {}
    for update in ("episode", "batch"):
        for order in ((1.0, 5.0), (5.0, 1.0)):
            est = DifficultyEstimator(warmup_steps=2, update=update)
            est.update([2.0, 3.0])
            est.update([2.0, 3.0])
            est.update(list(order))
            estimates[update, order] = (est.mu, est.variance)
    assert estimates["episode", (1.0, 5.0)] != estimates["episode", (5.0, 1.0)]
    assert estimates["batch", (1.0, 5.0)] == estimates["batch", (5.0, 1.0)]


def test_warm_up_waits_for_two_finite_difficulties_and_nonfinite_steps_count() -> None:
    est = DifficultyEstimator(warmup_steps=2)
    est.update([math.nan])
    est.update([1.0])
    assert est.steps == 2
    assert not est.ready
    est.update([math.inf, 3.0])
    assert est.ready
    assert est.mu == 2.0
    assert est.variance == 1.0
    before = (est.mu, est.variance)
    est.update([math.nan, -math.inf])  # counts as a step, changes nothing else
    assert (est.mu, est.variance) == before
    assert est.steps == 4
    assert est.nonfinite == 4


def test_sigma_floor_and_before_any_data() -> None:
    est = DifficultyEstimator(warmup_steps=2)
    assert (est.mu, est.variance, est.sigma, est.ready) == (0.0, 0.0, SIGMA_FLOOR, False)
    est.update([0.7, 0.7])
    est.update([0.7, 0.7])
    assert est.ready
    assert est.variance == 0.0
    assert est.sigma == SIGMA_FLOOR


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_state_dict_round_trip_is_exact_and_plain(steps: int) -> None:
    stream = random_stream(5, steps=12)
    est = DifficultyEstimator(decay=0.8, warmup_steps=4)
    for batch in stream[:steps]:
        est.update(batch)
    state = est.state_dict()
    assert all(type(v) in (int, float, bool) for v in state.values())
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    restored = DifficultyEstimator(decay=0.8, warmup_steps=4)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.state_dict() == state
    for batch in stream[steps:]:
        est.update(batch)
        restored.update(batch)
        assert (restored.mu, restored.variance, restored.ready) == (est.mu, est.variance, est.ready)


def test_load_state_dict_is_tolerant() -> None:
    est = DifficultyEstimator()
    est.update([1.0, 2.0])
    est.load_state_dict({})
    assert est.state_dict() == DifficultyEstimator().state_dict()
    est.load_state_dict({"ready": True, "mu": torch.tensor(1.5), "variance": 0.25, "unknown": "ignored"})
    assert est.ready
    assert est.mu == 1.5
    assert est.sigma == 0.5
    assert est.steps == 0
    assert type(est.state_dict()["mu"]) is float


def test_difficulty_statistics() -> None:
    gen = torch.Generator().manual_seed(0)
    x = 1.5 + 0.3 * torch.randn(1000, generator=gen, dtype=torch.float64)
    mu, var = difficulty_statistics(torch.cat([x, torch.tensor([float("nan")], dtype=torch.float64)]))
    assert mu == pytest.approx(float(np.mean(x.numpy())), rel=1e-14)
    assert var == pytest.approx(float(np.var(x.numpy())), rel=1e-12)
    with pytest.raises(ValueError, match="difficulties"):
        difficulty_statistics([math.nan])


def test_validation_errors() -> None:
    for bad in (-0.1, 1.0, 1.5, math.nan, True, "0.9"):
        with pytest.raises(ValueError, match=r"decay must be a number in \[0, 1\)"):
            DifficultyEstimator(decay=bad)  # type: ignore[arg-type]
    for bad in (1, 0, -5, 2.0, True):
        with pytest.raises(ValueError, match="warmup_steps must be an integer >= 2"):
            DifficultyEstimator(warmup_steps=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="update must be one of"):
        DifficultyEstimator(update="step")
    assert DifficultyEstimator(decay=np.float32(0.5)).decay == 0.5  # type: ignore[arg-type]  # numpy reals are accepted


@settings(max_examples=60, deadline=None)
@given(
    stream=st.lists(
        st.lists(st.one_of(st.floats(-1e3, 1e3), st.just(math.nan), st.just(math.inf)), max_size=8),
        max_size=12,
    ),
    decay=st.floats(0.0, 0.999),
    update=st.sampled_from(["episode", "batch"]),
)
def test_estimates_stay_finite_and_match_the_reference(stream, decay, update) -> None:
    est = DifficultyEstimator(decay=decay, warmup_steps=2, update=update)
    for batch, (ready, mu, var) in zip(stream, reference(stream, decay, 2, update), strict=True):
        est.update(batch)
        assert est.ready == ready
        assert math.isfinite(est.mu)
        assert est.variance >= 0.0
        if ready:
            assert est.mu == pytest.approx(mu, rel=1e-9, abs=1e-9)
            assert est.variance == pytest.approx(var, rel=1e-9, abs=1e-6)

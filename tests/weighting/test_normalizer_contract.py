"""The contract every registered normaliser keeps: one row per entry of the registry.

A row names the normaliser and writes out the loss it must give at each step of a run (a warm-up of weights 1,
then heavy-tailed weights) from that run's weights so far; the tests check the loss step by step, the checkpoint
round-trip of the state, and a resumed run against an uninterrupted one. A new normaliser is its file plus a row
here (``tests/callbacks/test_ddp.py``'s cases are built from the registry); ``tests/weighting/extensions.py`` holds a
test-only one (``tests.batch``) to prove it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest
import torch

from lightning_episodes.weighting import (
    Normalizer,
    available_normalizers,
    make_normalizer,
    pareto_smooth,
    weighted_loss,
)
from tests.helpers import roundtrip, same_state
from tests.weighting import extensions

WARMUP, STEPS, BATCH, WINDOW, DECAY = 3, 12, 8, 30, 0.5
OPTIONS = {"window": WINDOW, "running_decay": DECAY}

#: ``expected(history, weights, losses)``: the step's loss from the raw weights of the earlier steps after the
#: warm-up (``history``, oldest first), the step's raw weights and its losses
Expected = Callable[[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor], float]


def _ess(_: list[torch.Tensor], __: list[torch.Tensor], w: torch.Tensor, losses: torch.Tensor) -> float:
    return float((w * losses).sum() * (w * w).sum() / w.sum() ** 2)


def _self(_: list[torch.Tensor], __: list[torch.Tensor], w: torch.Tensor, losses: torch.Tensor) -> float:
    return float((w * losses).sum() / w.sum())


def _truncated(_: list[torch.Tensor], __: list[torch.Tensor], w: torch.Tensor, losses: torch.Tensor) -> float:
    capped = torch.minimum(w, w.mean() * math.sqrt(w.numel()))
    return _self([], [], capped, losses)


def _psis(after: list[torch.Tensor], _: list[torch.Tensor], w: torch.Tensor, losses: torch.Tensor) -> float:
    reference = torch.cat([*after, w])[-WINDOW:]  # the warm-up's weights are left out of the window
    return _self([], [], pareto_smooth(w, reference)[0], losses)


def _running(_: list[torch.Tensor], every: list[torch.Tensor], w: torch.Tensor, losses: torch.Tensor) -> float:
    average = None
    for total in [float(x.sum()) for x in every] + [float(w.sum())]:  # every step, the warm-up's included
        average = total if average is None else DECAY * average + (1 - DECAY) * total
    return float((w * losses).sum()) / average


def _batch(_: list[torch.Tensor], __: list[torch.Tensor], w: torch.Tensor, losses: torch.Tensor) -> float:
    return float((w * losses).sum()) / w.numel()


ROWS: dict[str, Expected] = {
    "ess": _ess, "self": _self, "truncated": _truncated, "psis": _psis, "running": _running,
    extensions.NORMALIZER: _batch,
}  # fmt: skip
NAMES = list(ROWS)


@pytest.fixture(autouse=True)
def _registered() -> Iterator[None]:
    with extensions.registered():
        yield


def _run() -> list[tuple[torch.Tensor, torch.Tensor, bool]]:
    """``(raw weights, losses, warm-up)`` of each step: 1s, then log-normal weights with an occasional outlier."""
    generator = torch.Generator().manual_seed(0)
    steps = []
    for step in range(STEPS):
        losses = torch.rand(BATCH, generator=generator, dtype=torch.float64) + 0.5
        if step < WARMUP:
            steps.append((torch.ones(BATCH, dtype=torch.float64), losses, True))
            continue
        w = torch.exp(1.5 * torch.randn(BATCH, generator=generator, dtype=torch.float64))
        steps.append((w, losses, False))
    return steps


def _loss(normalizer: Normalizer, w: torch.Tensor, losses: torch.Tensor) -> float:
    step = normalizer.normalize(w)
    return float(weighted_loss(losses, step.weights, step.divisor, denominator=step.denominator).loss)


def test_every_registered_normaliser_has_a_row_and_the_library_order() -> None:
    assert set(available_normalizers()) == set(ROWS)
    assert available_normalizers()[:5] == ("ess", "self", "truncated", "psis", "running")


@pytest.mark.parametrize("name", NAMES)
def test_each_steps_loss_is_the_written_out_formula(name: str) -> None:
    normalizer, expected = make_normalizer(name, **OPTIONS), ROWS[name]
    after: list[torch.Tensor] = []
    every: list[torch.Tensor] = []
    for w, losses, warmup in _run():
        assert _loss(normalizer, w, losses) == pytest.approx(expected(after, every, w, losses), rel=1e-12)
        normalizer.update(w, warmup=warmup)
        every.append(w)
        if not warmup:
            after.append(w)


@pytest.mark.parametrize("name", NAMES)
def test_a_resumed_normaliser_continues_exactly(name: str) -> None:
    run = _run()
    uninterrupted, first = make_normalizer(name, **OPTIONS), make_normalizer(name, **OPTIONS)
    losses = []
    for step, (w, loss, warmup) in enumerate(run):
        losses.append(_loss(uninterrupted, w, loss))
        uninterrupted.update(w, warmup=warmup)
        if step < STEPS // 2:
            first.update(w, warmup=warmup)
    resumed = make_normalizer(name, **OPTIONS)
    resumed.load_state_dict(roundtrip(first.state_dict()))
    assert same_state(resumed.state_dict(), first.state_dict())
    for step, (w, loss, warmup) in enumerate(run[STEPS // 2 :], start=STEPS // 2):
        assert _loss(resumed, w, loss) == losses[step], step
        resumed.update(w, warmup=warmup)
    assert same_state(resumed.state_dict(), uninterrupted.state_dict())

"""The contract every registered normaliser keeps: one row per entry of the registry, checked by
:func:`lightning_episodes.testing.check_normalizer`.

A row names the normaliser and writes out the loss it must give at each step of a run (a warm-up of weights 1,
then heavy-tailed weights) from that run's weights so far; the harness checks the loss step by step, the checkpoint
round-trip of the state, and a resumed run against an uninterrupted one. A new normaliser is its file plus a row
here (``tests/callbacks/test_ddp.py``'s cases are built from the registry); ``tests/weighting/extensions.py`` holds a
test-only one (``tests.batch``) to prove it.
"""

from __future__ import annotations

import math

import pytest
import torch

from lightning_episodes.testing import NORMALIZER_CHECKS, NormalizerSpec, check_normalizer, contract_params
from lightning_episodes.weighting import available_normalizers, pareto_smooth
from tests.weighting import extensions

WINDOW, DECAY = 30, 0.5
OPTIONS = {"window": WINDOW, "running_decay": DECAY}


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


def _scale(_: list[torch.Tensor], __: list[torch.Tensor], w: torch.Tensor, losses: torch.Tensor) -> float:
    # the paper's factor sum w / ESS = sum w^2 / sum w times the plain mean
    return float((w * w).sum() / w.sum() * losses.mean())


def _batch(_: list[torch.Tensor], __: list[torch.Tensor], w: torch.Tensor, losses: torch.Tensor) -> float:
    return float((w * losses).sum()) / w.numel()


ROWS = [
    NormalizerSpec(name, expected, OPTIONS)
    for name, expected in (
        ("ess", _ess),
        ("self", _self),
        ("truncated", _truncated),
        ("psis", _psis),
        ("running", _running),
        ("scale", _scale),
        (extensions.NORMALIZER, _batch),
    )
]


pytestmark = pytest.mark.usefixtures("registered_extensions")  # tests/weighting/conftest.py


def test_every_registered_normaliser_has_a_row_and_the_library_order() -> None:
    assert set(available_normalizers()) == {row.normalizer for row in ROWS}
    assert available_normalizers()[:6] == ("ess", "self", "truncated", "psis", "running", "scale")


@pytest.mark.parametrize(("row", "check"), contract_params(ROWS, NORMALIZER_CHECKS))
def test_the_normaliser_keeps_the_contract(row: NormalizerSpec, check: str) -> None:
    check_normalizer(row, checks=[check])

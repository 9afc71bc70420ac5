"""scripts/resample_fidelity.py: resampling's chosen episodes approach the target as the pool grows (what the table
of docs/method.md reports), where plain sampling stays off it."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "resample_fidelity.py"))


@pytest.mark.parametrize(("kind", "proposal"), [("normal", "normal"), ("lognormal", "lognormal")])
def test_a_larger_pool_brings_the_choice_closer_to_the_target(kind: str, proposal: str) -> None:
    def mean_ks(pool: int) -> float:
        return sum(SCRIPT["fidelity"](kind, proposal, pool, steps=100, batch=4, seed=s) for s in range(3)) / 3

    plain, four, sixteen = mean_ks(1), mean_ks(4), mean_ks(16)
    assert sixteen < four < plain
    assert plain > 0.15  # plain sampling is far from uniform over the support
    assert sixteen < 0.1


def test_bad_settings_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        SCRIPT["main"](["--pools", "0"])
    assert exit_info.value.code == 2
    assert "--pools must be >= 1" in capsys.readouterr().err

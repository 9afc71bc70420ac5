"""scripts/study_converge.sh: a bad schedule or benchmark is refused in one line before anything runs, and each
schedule reaches scripts/run_scenario.py as the trainer configs that define it, its runs under a folder of its own."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "study_converge.sh"


def study_converge(tmp_path: Path, *data: str, **settings: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Runs the script with a stand-in Python that records each command line instead of fitting."""
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PYTHON": str(python), "OUT": str(tmp_path / "out"), **settings}
    result = subprocess.run(["bash", str(SCRIPT), *data], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    return result, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize(
    ("data", "settings", "message"),
    [
        ((), {"SCHEDULES": "constant cosin"}, "SCHEDULES: cosin is not constant, step or a file of configs/schedules"),
        (("glyphs_100",), {}, "no configs/data/glyphs_100.yaml"),
    ],
)
def test_a_bad_setting_is_refused_before_any_fit(
    tmp_path: Path, data: tuple[str, ...], settings: dict[str, str], message: str
) -> None:
    result, calls = study_converge(tmp_path, *data, **settings)
    assert result.returncode == 2
    assert message in result.stderr
    assert calls == []


def trainer_configs(call: str) -> list[str]:
    words = call.split()
    start = words.index("--trainer") + 1
    end = next(i for i in range(start, len(words)) if words[i].startswith("--"))
    return words[start:end]


def test_each_schedule_reaches_the_fits_as_its_configs_under_its_own_folder(tmp_path: Path) -> None:
    result, calls = study_converge(tmp_path, "glyphs_100_5w1s", SCHEDULES="constant step cosine")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    by_schedule = {
        "constant": ["configs/study/converge_cpu.yaml"],
        "step": ["configs/study/converge_cpu.yaml", "configs/study/step_cpu.yaml"],
        "cosine": ["configs/study/converge_cpu.yaml", "configs/schedules/cosine.yaml"],
    }
    for schedule, configs in by_schedule.items():
        mine = [call for call in calls if f"--out {out / schedule} " in call]
        # seed 0 of the paper's pair, seed 0 of resampling and its placebo, seeds 1 and 2, the other arms
        assert len(mine) == 5
        assert all(trainer_configs(call) == configs for call in mine)
        assert all((ROOT / config).is_file() for config in configs)
    # the paper's pair at seed 0 in every schedule comes first, in the order the schedules were given
    first = calls[:3]
    assert [call.split("--out ")[1].split()[0] for call in first] == [str(out / s) for s in by_schedule]
    assert all("--schemes uniform --seeds 0" in call for call in first)

"""scripts/land_runs.sh: a campaign's finished runs reach the study's records with the files a study keeps, and
nothing else (no checkpoint, no event file, no unfinished run)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "land_runs.sh"


def test_finished_runs_land_with_their_records_and_log_only(tmp_path: Path) -> None:
    runs, study = tmp_path / "runs", tmp_path / "study"
    finished = runs / "n60/cell/seed0/baseline_online"
    version = finished / "lightning_logs/version_1"
    (version / "checkpoints").mkdir(parents=True)
    kept = ["test_results.json", "test_episodes.csv", "hparams.yaml", "config.yaml", "scalars.csv"]
    for name in [*kept, "events.out.tfevents.1", "checkpoints/last.ckpt"]:
        (version / name).write_text(name)
    (finished / "fit.log").write_text("the fit's output")
    unfinished = runs / "n60/cell/seed0/uniform_online/lightning_logs/version_0"
    unfinished.mkdir(parents=True)
    (unfinished / "config.yaml").write_text("config")
    python = tmp_path / "python"  # study_diagnostics.py --export stands in: scalars.csv is already there
    python.write_text('#!/usr/bin/env bash\necho "$*" > ' + str(tmp_path / "exported") + "\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)

    result = subprocess.run(["bash", str(SCRIPT), str(runs), str(study)], env={**os.environ, "PYTHON": str(python)},
                            capture_output=True, text=True, cwd=ROOT, timeout=60)  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"land_runs.sh: 1 runs from {runs} into {study}"
    assert (tmp_path / "exported").read_text().split()[1:] == [str(runs), "--export"]
    landed = sorted(str(p.relative_to(study)) for p in study.rglob("*") if p.is_file())
    run = "n60/cell/seed0/baseline_online"
    assert landed == sorted([f"{run}/fit.log", *(f"{run}/lightning_logs/version_1/{name}" for name in kept)])


def test_a_missing_runs_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "nowhere"), str(tmp_path / "study")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == f"land_runs.sh: no runs folder {tmp_path / 'nowhere'}"

"""scripts/study_gpu.sh: bad settings refused in one line before anything runs; a tiny run of its fits on the CPU
lands where `report` and `compare` read it, under the schedule it was asked for, and a second call skips it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "study_gpu.sh"


def study_gpu(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "OUT": str(tmp_path / "out"),
        "PYTHON": sys.executable,
        "LAUNCHER": f"{sys.executable} -m lightning_episodes",
        **settings,
    }
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("DATA", "no_such_data", "DATA=no_such_data: no configs/data/no_such_data.yaml"),
        ("SCHEDULE", "cosin", "SCHEDULE=cosin: constant or a file of configs/schedules without .yaml"),
        ("ARMS", "baseline_online uniform", "ARMS: no configs/sampling/uniform.yaml"),
        ("MODEL", "protonet_cosine", "MODEL=protonet_cosine: no configs/models/protonet_cosine.yaml"),
        ("DEADLINE", "in 10 minutes", "DEADLINE=in 10 minutes: a Unix time in seconds"),
    ],
)
def test_a_bad_setting_is_refused_before_any_fit(tmp_path: Path, setting: str, value: str, message: str) -> None:
    result = study_gpu(tmp_path, **{setting: value})
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_tiny_run_lands_under_its_schedule_and_is_skipped_when_done(tmp_path: Path) -> None:
    tiny = (
        "--trainer.accelerator=cpu --data.device_cache=false --data.episodes_per_batch=1 --data.queries=2 "
        "--data.eval_queries=2 --data.val_episodes=4 --data.test_episodes=4 --data.eval_episodes_per_batch=4 "
        "--trainer.val_check_interval=2 --model.init_args.backbone_options.hidden=4"
    )
    settings = {
        "DATA": "glyphs_5w1s",
        "SEEDS": "0",
        "STEPS": "4",
        "SCHEDULE": "step",
        "ARMS": "baseline_online",
        "EXTRA": tiny,
    }
    first = study_gpu(tmp_path, **settings)
    run = tmp_path / "out" / "glyphs_5w1s__protonet_euclidean_conv4" / "seed0" / "baseline_online"
    assert first.returncode == 0, (run.parent / "baseline_online.log").read_text()[-3000:]
    record = json.loads((run / "lightning_logs" / "version_0" / "test_results.json").read_text())
    assert record["global_step"] == 4
    config = yaml.safe_load((run / "lightning_logs" / "version_0" / "config.yaml").read_text())
    scheduler = config["model"]["init_args"]["lr_scheduler"]
    assert scheduler["class_path"] == "torch.optim.lr_scheduler.StepLR"
    assert scheduler["init_args"]["step_size"] == 2000  # configs/schedules/step.yaml, the paper's
    assert config["model"]["init_args"]["backbone_options"]["hidden"] == 4  # EXTRA comes after the study's configs
    assert config["data"]["init_args"]["episodes_per_batch"] == 1

    second = study_gpu(tmp_path, **settings)
    assert second.returncode == 0
    assert "baseline_online is done: skipped" in second.stderr

"""The README's commands under 2-process CPU DDP through the real console script, in subprocesses, with the
numbers of one process: fit (+ --test_after_fit, whose per-episode table gathers both ranks' episodes), compare and
difficulty on the runs DDP wrote, test, validate, and the resume command.

Lightning's ``ddp`` launcher re-runs the command line for rank 1, so these must be real processes (the other DDP
tests fork inside pytest and never run the CLI). Tiny settings: the embedded glyphs data, conv4 with 8 channels,
4 steps, 20 validation and test episodes; each process still costs several seconds of start-up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lightning_episodes.analysis import DifficultyTable
from lightning_episodes.evaluation import SCORES_FILE

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "lightning-episodes")
DDP = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
#: two processes of one thread each on a 2-core machine
ENV = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([CLI, *args], cwd=cwd, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    # epoch-level val/test values are already synchronised: no Lightning advice to sync them again
    assert "sync_dist" not in done.stderr, done.stderr[-4000:]
    return done


def _config(tmp_path: Path) -> Path:
    """quickstart.yaml, smaller: checkpoints in the run folder of the logger."""
    config = yaml.safe_load((ROOT / "configs/quickstart.yaml").read_text())
    trainer = config["trainer"]
    trainer.update(max_steps=4, val_check_interval=2, enable_progress_bar=False, enable_model_summary=False)
    config["model"]["init_args"]["backbone_options"] = {"hidden": 8}
    config["data"]["init_args"].update(val_episodes=20, test_episodes=20, episodes_per_batch=4)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _logs(run: Path) -> list[str]:
    return [f"--trainer.default_root_dir={run}", f"--trainer.logger.init_args.save_dir={run}"]


def _record(folder: Path) -> dict[str, float]:
    return json.loads(next(folder.glob("test_results.json")).read_text())


@pytest.mark.slow
def test_readme_commands_under_two_process_ddp_give_the_numbers_of_one_process(tmp_path: Path) -> None:
    config = str(_config(tmp_path))
    scenario = tmp_path / "scenario"
    run = scenario / "seed0" / "baseline_online"
    weighting = ["--trainer.callbacks+=lightning_episodes.callbacks.DifficultyWeightingCallback"]
    weighting += ["--trainer.callbacks.warmup_steps=2"]

    # fit + test in one command (the crash: the test record's log_dir was a collective on rank 0 only)
    _run("fit", "--config", config, *DDP, *weighting, *_logs(run), "--test_after_fit=true", cwd=tmp_path)
    folder = run / "logs" / "version_0"
    ddp_record = _record(folder)
    assert ddp_record["episodes"] == 20
    assert ddp_record["global_step"] == 4
    assert ddp_record["sampling"]["target"] == "uniform"
    assert "proposal" in ddp_record["sampling"]
    assert ddp_record["sampling"]["warmup_steps"] == 2
    best = Path(ddp_record["ckpt_path"])
    assert best.parent == folder / "checkpoints"
    assert best.name.startswith("best-")
    assert torch.load(folder / "checkpoints/last.ckpt", weights_only=True)["global_step"] == 4

    # compare: the paired difference of two arms of the DDP run (here the same run twice: exactly 0), from the
    # per-episode table that the DDP test wrote (gathered from both ranks): nothing is scored again
    ddp_table = DifficultyTable.read(folder / SCORES_FILE)
    assert ddp_table.episode_ids.tolist() == list(range(20))
    assert ddp_table.accuracy.mean() == pytest.approx(ddp_record["accuracy"], abs=1e-9)
    shutil.copytree(run, scenario / "seed0" / "uniform_online")
    compared = _run("compare", str(scenario), "--device=cpu", cwd=tmp_path)
    assert "[compare] scoring" not in compared.stderr
    row = next(line for line in compared.stdout.splitlines() if "| ProtoNet (Euclidean) |" in line)
    assert "+0.00 ± 0.00" in row
    assert f"| {100 * ddp_record['accuracy']:.2f} ± " in row

    # difficulty on the checkpoint DDP wrote: the same 20 test episodes, the same accuracy
    scores = tmp_path / "scores.csv"
    _run("difficulty", f"--ckpt_path={best}", f"--output={scores}", "--episodes=20", "--device=cpu", cwd=tmp_path)
    scored = json.loads(scores.with_suffix(".json").read_text())

    # test in one process, then validate and test under DDP (`best` found through the run's last.ckpt)
    evals = tmp_path / "evals"
    _run("test", "--config", config, f"--ckpt_path={best}", *_logs(evals), cwd=tmp_path)
    one_record = _record(evals / "logs" / "version_0")
    validated = _run("validate", "--config", config, *DDP, f"--ckpt_path={best}", *_logs(evals), cwd=tmp_path)
    _run("test", "--config", config, *DDP, *weighting, "--ckpt_path=best", *_logs(run), cwd=tmp_path)
    ddp_again = _record(run / "logs" / "version_1")

    # Each episode's accuracy is computed alone (running batch-norm statistics at evaluation), whichever rank
    # evaluates it; only the float64 sums over ranks run in another order: equal to 1e-6 (a whole episode of 75
    # queries would move the mean of 20 by 1/1500).
    for accuracy in (ddp_record["accuracy"], ddp_again["accuracy"], scored["accuracy_mean"]):
        assert accuracy == pytest.approx(one_record["accuracy"], abs=1e-6)
    assert ddp_record["ci95"] == pytest.approx(one_record["ci95"], abs=1e-6)
    one_table = DifficultyTable.read(evals / "logs" / "version_0" / SCORES_FILE)  # the same table, episode by episode
    assert all(a.same_episode(b) for a, b in zip(ddp_table, one_table, strict=True))
    assert ddp_table.accuracy.tolist() == one_table.accuracy.tolist()
    assert ddp_table.difficulty == pytest.approx(one_table.difficulty, rel=1e-6, abs=1e-6)
    saved = torch.load(best, weights_only=True)["callbacks"]
    best_score = next(float(s["best_model_score"]) for k, s in saved.items() if "Checkpoint" in k)
    val_acc = next(line for line in validated.stdout.splitlines() if "val/acc " in f"{line} ")
    assert float(val_acc.split()[1]) == pytest.approx(best_score, abs=1e-6)

    # the README's resume command under DDP (each rank finds the run's last.ckpt): 2 more steps, same folder
    _run(
        "fit",
        "--config",
        config,
        *DDP,
        *weighting,
        *_logs(run),
        "--trainer.max_steps=6",
        "--ckpt_path=last",
        cwd=tmp_path,
    )
    assert torch.load(folder / "checkpoints/last.ckpt", weights_only=True)["global_step"] == 6
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["version_0", "version_1"]  # no new folder

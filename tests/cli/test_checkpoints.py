"""`--ckpt_path last|best|FILE` through the CLI in process: a killed run resumes exactly with one command, nothing
to resume from is a clear error, and a broken checkpoint file is one message naming it."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lightning_episodes.cli import DEFAULT_CHECKPOINT, main
from lightning_episodes.console import PREEMPTED_STATUS, TOOLS
from lightning_episodes.console import run as console_run
from lightning_episodes.run_folder import LOCK_NAME

ROOT = Path(__file__).resolve().parents[2]

#: the CLI's default checkpoint callback, writing last.ckpt every 2 steps
CHECKPOINT = {**DEFAULT_CHECKPOINT, "init_args": {**DEFAULT_CHECKPOINT["init_args"], "last_every_n_steps": 2}}


def _config(
    folder: Path, crash_at: int | None = None, sigterm_at: int | None = None, crash_in_validation_at: int | None = None
) -> Path:
    """A config like quickstart + a sampling config: a CSV logger and a checkpoint callback without dirpath, so
    checkpoints go to ``<folder>/logs/version_N/checkpoints``, a new folder for each run."""
    callbacks: list[dict[str, Any]] = [CHECKPOINT]
    stops = {"CrashAt": crash_at, "CrashInValidationAt": crash_in_validation_at, "SignalAt": sigterm_at}
    for name, step in stops.items():
        if step is not None:
            callbacks = [{"class_path": f"tests.callbacks.helpers.{name}", "init_args": {"step": step}}, CHECKPOINT]
    config = {
        "seed_everything": 0,
        "trainer": {
            "default_root_dir": str(folder),
            "logger": {
                "class_path": "pytorch_lightning.loggers.CSVLogger",
                "init_args": {"save_dir": str(folder), "name": "logs"},
            },
            "callbacks": callbacks,
            "max_steps": 8,
            "val_check_interval": 3,
            "check_val_every_n_epoch": None,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
        "model": {
            "class_path": "lightning_episodes.algorithms.ProtoNet",
            "init_args": {"backbone_options": {"hidden": 8}},
        },
        "data": {
            "init_args": {
                "dataset": "tiny",
                "image_size": 16,
                "shots": 2,
                "queries": 3,
                "episodes_per_batch": 4,
                "val_episodes": 8,
                "test_episodes": 8,
            }
        },
    }
    crashed = crash_at is not None or crash_in_validation_at is not None
    path = folder / f"config{'-crash' if crashed else ''}{'' if sigterm_at is None else '-sigterm'}.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _rows(metrics: Path) -> list[dict[str, str]]:
    with metrics.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _steps(metrics: Path) -> list[int]:
    return sorted({int(row["step"]) for row in _rows(metrics)})


@pytest.mark.slow
def test_fit_ckpt_path_last_resumes_a_killed_run_exactly(tmp_path: Path) -> None:
    """Killed before step 6 (last.ckpt at step 4), resumed with `fit --ckpt_path last` to step 8: the weights equal
    those of an uninterrupted 8-step run bit for bit, in the same run folder."""
    main(["fit", "--config", str(_config(tmp_path / "straight"))])
    straight = _weights(tmp_path / "straight/logs/version_0/checkpoints/last.ckpt")

    run = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="CRASH"):
        main(["fit", "--config", str(_config(run, crash_at=5))])
    last = run / "logs/version_0/checkpoints/last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 4
    main(["fit", "--config", str(_config(run)), "--ckpt_path", "last"])

    assert torch.load(last, weights_only=True)["global_step"] == 8
    resumed = _weights(last)
    assert resumed.keys() == straight.keys()
    for name, tensor in straight.items():
        assert torch.equal(resumed[name], tensor), name
    # one run folder: the resumed run continued version_0, whose metrics keep the rows before the checkpoint
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["version_0"]
    assert _steps(run / "logs/version_0/metrics.csv") == _steps(tmp_path / "straight/logs/version_0/metrics.csv")


def _validations(metrics: Path) -> list[tuple[int, str]]:
    """(step, validation accuracy) of each validation row, in the order logged."""
    return [(int(row["step"]), row["val/acc"]) for row in _rows(metrics) if row.get("val/acc")]


@pytest.mark.slow
@pytest.mark.parametrize(("every", "resumed_from"), [(2, 4), (3, 3)])
def test_a_run_killed_inside_a_validation_resumes_with_that_validation(
    tmp_path: Path, every: int, resumed_from: int
) -> None:
    """Step 6 is due for last.ckpt (every 2 or 3 steps) and validated (every 3): killed inside that validation and
    resumed from the last.ckpt before it (step 4, written after its batch, or step 3, written after its own
    validation), the run validates at step 6 as an uninterrupted run does (same steps, once each, same accuracies)
    and ends with its weights bit for bit: the validation neither goes missing, nor runs twice, nor moves the
    training's random state."""

    def config(folder: Path, crash: int | None = None) -> Path:
        path = _config(folder, crash_in_validation_at=crash)
        settings = yaml.safe_load(path.read_text())
        settings["trainer"]["callbacks"][-1]["init_args"]["last_every_n_steps"] = every
        path.write_text(yaml.safe_dump(settings))
        return path

    main(["fit", "--config", str(config(tmp_path / "straight"))])
    straight = tmp_path / "straight/logs/version_0"
    run = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="CRASH"):
        main(["fit", "--config", str(config(run, crash=6))])
    last = run / "logs/version_0/checkpoints/last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == resumed_from  # not step 6 without its validation
    main(["fit", "--config", str(config(run)), "--ckpt_path", "last"])

    expected = _validations(straight / "metrics.csv")
    assert [step for step, _ in expected] == [2, 5]  # logged at the step index before the optimiser step: 3 and 6
    assert _validations(run / "logs/version_0/metrics.csv") == expected
    resumed, reference = _weights(last), _weights(straight / "checkpoints/last.ckpt")
    for name, tensor in reference.items():
        assert torch.equal(resumed[name], tensor), name


@pytest.mark.slow
def test_a_resumed_run_with_a_checkpoint_dirpath_keeps_logging_in_its_version(tmp_path: Path) -> None:
    """The quickstart's layout (checkpoints in a dirpath of their own): the resumed run logs into the version the
    killed run logged into (recorded in last.ckpt), one metrics.csv with the uninterrupted run's steps."""

    def config(folder: Path, crash_at: int | None = None) -> Path:
        path = _config(folder, crash_at=crash_at)
        settings = yaml.safe_load(path.read_text())
        settings["trainer"]["callbacks"][-1]["init_args"]["dirpath"] = str(folder / "checkpoints")
        path.write_text(yaml.safe_dump(settings))
        return path

    main(["fit", "--config", str(config(tmp_path / "straight"))])
    run = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="CRASH"):
        main(["fit", "--config", str(config(run, crash_at=5))])
    main(["fit", "--config", str(config(run)), "--ckpt_path", "last"])
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["version_0"]
    assert _steps(run / "logs/version_0/metrics.csv") == _steps(tmp_path / "straight/logs/version_0/metrics.csv")
    assert torch.load(run / "checkpoints/last.ckpt", weights_only=True)["global_step"] == 8


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_saves_its_step_fails_and_resumes_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM after step 5 (last.ckpt written every 2 steps: at 4): the fit writes last.ckpt at step 5, tests
    nothing, releases its folder and exits 143 with one line; resumed to step 8 it equals an uninterrupted run."""
    main(["fit", "--config", str(_config(tmp_path / "straight"))])
    straight = _weights(tmp_path / "straight/logs/version_0/checkpoints/last.ckpt")

    run = tmp_path / "preempted"
    status = console_run(["fit", "--config", str(_config(run, sigterm_at=5)), "--test_after_fit=true"], main, TOOLS)
    assert status == PREEMPTED_STATUS == 143
    last = run / "logs/version_0/checkpoints/last.ckpt"
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"lightning-episodes fit: stopped by SIGTERM at step 5 of 8, not tested: {last} holds that step; resume "
        "with the same command and --ckpt_path last"
    )
    assert torch.load(last, weights_only=True)["global_step"] == 5
    assert not list(run.rglob("test_results.json"))
    assert not list(run.rglob(LOCK_NAME))  # the folder is free for the resumed run
    main(["fit", "--config", str(_config(run)), "--ckpt_path", "last"])

    assert torch.load(last, weights_only=True)["global_step"] == 8
    resumed = _weights(last)
    for name, tensor in straight.items():
        assert torch.equal(resumed[name], tensor), name
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["version_0"]
    assert _steps(run / "logs/version_0/metrics.csv") == _steps(tmp_path / "straight/logs/version_0/metrics.csv")


@pytest.mark.slow
def test_the_command_line_exits_non_zero_when_sigterm_stops_a_fit(tmp_path: Path) -> None:
    """The real console script in its own process: Lightning's SIGTERM handling ends a fit with status 0; ours 143."""
    config = _config(tmp_path, sigterm_at=3)
    command = [sys.executable, "-m", "lightning_episodes", "fit", "--config", str(config), "--test_after_fit=true"]
    command += ["--data.dataset=glyphs", "--data.image_size=28", "--data.channels=1"]  # not the tests' own "tiny"
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 143, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1].startswith("lightning-episodes fit: stopped by SIGTERM at step 3 of 8")
    assert "Traceback" not in result.stderr
    assert torch.load(tmp_path / "logs/version_0/checkpoints/last.ckpt", weights_only=True)["global_step"] == 3
    # nothing a user cannot act on: Lightning's advertisement and its own deprecation warning
    assert "litlogger" not in result.stderr
    assert "LeafSpec" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("name", "status"), [("SIGTERM", 143), ("SIGUSR1", 138)])
def test_under_ddp_sigterm_in_one_process_stops_both_at_the_same_step(tmp_path: Path, name: str, status: int) -> None:
    """2 CPU processes, SIGTERM (or SIGUSR1) to rank 1 alone: both stop after step 3 (Lightning's own handler can
    leave them in different collectives and hang), last.ckpt holds step 3, one line naming the signal, the status
    128 + its number."""
    config = _config(tmp_path, sigterm_at=3)
    settings = yaml.safe_load(config.read_text())
    settings["trainer"]["callbacks"][0]["init_args"].update(rank=1, signal=name)
    config.write_text(yaml.safe_dump(settings))
    command = [sys.executable, "-m", "lightning_episodes", "fit", "--config", str(config), "--test_after_fit=true"]
    command += ["--data.dataset=glyphs", "--data.image_size=28", "--data.channels=1"]
    command += ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert result.returncode == status, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if f"stopped by {name}" in line]
    assert len(lines) == 1
    assert lines[0].startswith(f"lightning-episodes fit: stopped by {name} at step 3 of 8, not tested: ")
    assert lines[0].endswith("last.ckpt holds that step; resume with the same command and --ckpt_path last")
    assert torch.load(tmp_path / "logs/version_0/checkpoints/last.ckpt", weights_only=True)["global_step"] == 3
    assert not list(tmp_path.rglob("test_results.json"))


@pytest.mark.slow
def test_test_ckpt_path_best_reads_the_newest_run_without_a_dirpath(tmp_path: Path) -> None:
    main(["fit", "--config", str(_config(tmp_path)), "--trainer.max_steps", "6"])
    cli = main(["test", "--config", str(_config(tmp_path)), "--ckpt_path", "best"])
    assert "/logs/version_0/checkpoints/best-" in str(cli.trainer.ckpt_path)
    assert cli.trainer.callback_metrics["test/episodes"] == 8


@pytest.mark.parametrize("subcommand", ["fit", "test"])
@pytest.mark.parametrize("value", ["last", "best"])
def test_nothing_to_resume_from_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], subcommand: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([subcommand, "--config", str(_config(tmp_path)), "--ckpt_path", value])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.splitlines()[-1]
    assert (
        message
        == f"error: --ckpt_path {value}: no last.ckpt in {tmp_path}/logs/<version>/checkpoints/last.ckpt: "
        + ("has a fit with this configuration saved one?")
    )


def _broken(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A broken checkpoint file of one kind and the words that must name what is wrong with it."""
    path = tmp_path / f"{kind}.ckpt"
    if kind == "truncated":
        torch.save({"state_dict": {"w": torch.ones(1000)}}, path)
        path.write_bytes(path.read_bytes()[:2000])
        return path, "is truncated or corrupt"
    if kind == "empty":
        path.write_bytes(b"")
        return path, "is empty (0 bytes)"
    if kind == "directory":
        path.mkdir()
        return path, "is a directory, not a checkpoint file"
    if kind == "text":
        path.write_text("not a checkpoint\n")
        return path, "is not a checkpoint: it is not a file written by torch.save"
    if kind == "not-lightning":
        torch.save({"weights": torch.ones(3)}, path)
        return path, "is not a Lightning checkpoint (it has no 'state_dict')"
    if kind == "missing":
        return path, "does not exist"
    raise AssertionError(kind)


KINDS = ["truncated", "empty", "directory", "text", "not-lightning", "missing"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_broken_checkpoint_file_is_one_message_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path, problem = _broken(tmp_path, kind)
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--config", str(_config(tmp_path / "run")), "--ckpt_path", str(path)])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.splitlines()[-1]
    assert message.startswith(f"error: --ckpt_path {path}: ")
    assert str(path) in message.removeprefix(f"error: --ckpt_path {path}: ")
    assert problem in message


@pytest.mark.parametrize("kind", KINDS)
def test_difficulty_names_a_broken_checkpoint_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    from lightning_episodes.cli import entry

    path, problem = _broken(tmp_path, kind)
    assert entry(["difficulty", "--ckpt_path", str(path), "--output", str(tmp_path / "x.csv")]) == 2
    (message,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert str(path) in message
    assert problem in message


@pytest.mark.parametrize("kind", ["truncated", "empty"])
def test_compare_names_a_broken_checkpoint_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    import json

    from lightning_episodes.commands.compare import main as compare

    for arm in ("baseline_online", "uniform_online"):
        folder = tmp_path / "scenario" / "seed0" / arm / "logs" / "version_0"
        (folder / "checkpoints").mkdir(parents=True)
        (folder / "test_results.json").write_text(json.dumps({"accuracy": 0.5, "ci95": 0.1, "episodes": 4}))
        path, problem = _broken(folder / "checkpoints", kind)
        path.rename(folder / "checkpoints" / "best-4-0.5000.ckpt")
    assert compare([str(tmp_path / "scenario"), "--device=cpu"]) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("lightning-episodes compare: error: checkpoint ")
    assert "best-4-0.5000.ckpt" in message
    assert problem in message


@pytest.mark.slow
def test_the_console_script_gives_one_line_and_no_traceback(tmp_path: Path) -> None:
    """Through the real console script: `test` and `difficulty` with broken files exit non-zero with one message."""
    import os
    import subprocess
    import sys

    cli = str(Path(sys.executable).parent / "lightning-episodes")
    truncated, problem = _broken(tmp_path, "truncated")
    config = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")
    commands = {
        ("test", "--config", config, f"--ckpt_path={truncated}"): (truncated, problem),
        ("difficulty", f"--ckpt_path={tmp_path}", "--output=x.csv"): (tmp_path, "is a directory"),
    }
    for command, (path, words) in commands.items():
        done = subprocess.run(
            [cli, *command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        (message,) = [line for line in done.stderr.splitlines() if "error:" in line]
        assert str(path) in message, message
        assert words in message, message

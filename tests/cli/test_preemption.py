"""Every interruption of a fit is a preemption, through the real console script in its own process: SIGINT (Ctrl-C)
and SIGUSR1 (SLURM's --signal=USR1 without Lightning's auto-requeue) save last.ckpt at the step, release the run
folder, say how to resume and exit 128 + the signal's number, as SIGTERM does (tests/cli/test_checkpoints.py); Ctrl-C
twice stops at once, keeping the last checkpoint written, from which the run resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from pytorch_lightning.plugins.io import TorchCheckpointIO

from lightning_episodes.cli import main
from lightning_episodes.run_folder import LOCK_NAME
from tests.cli.test_checkpoints import _config

ROOT = Path(__file__).resolve().parents[2]
#: not the tests' own "tiny" dataset, which a new process does not have
GLYPHS = ["--data.dataset=glyphs", "--data.image_size=28", "--data.channels=1"]
RESUME = "resume with the same command and --ckpt_path last"


class SigintWhileSaving(TorchCheckpointIO):
    """Sends this process SIGINT (the second Ctrl-C) as it starts writing ``last.ckpt`` at global step ``step``."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if checkpoint["global_step"] == self.step and Path(path).name.startswith(".last.ckpt"):
            os.kill(os.getpid(), signal.SIGINT)
        super().save_checkpoint(checkpoint, path, storage_options)


def _interrupted(folder: Path, name: str, step: int, times: int = 1) -> Path:
    """The tests' config (last.ckpt every 2 steps, 8 steps) sending ``name`` ``times`` at the end of step ``step``."""
    config = _config(folder, sigterm_at=step)
    settings = yaml.safe_load(config.read_text())
    signals = settings["trainer"]["callbacks"]
    signals[0]["init_args"]["signal"] = name
    signals[1:1] = signals[:1] * (times - 1)
    config.write_text(yaml.safe_dump(settings))
    return config


def _default_sigint() -> None:
    """The child starts with SIGINT's default disposition, as from a terminal: a suite run as a background job (``make
    test &``) would otherwise hand it an ignored SIGINT, which the fit rightly leaves ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _fit(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lightning_episodes", "fit", "--config", str(config), "--test_after_fit=true"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*command, *GLYPHS, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
                          preexec_fn=_default_sigint)  # fmt: skip


def _resumes_to_the_end(folder: Path, last: Path) -> None:
    """`fit --ckpt_path last` with the same config (without the signal) continues to step 8 in the same run folder."""
    main(["fit", "--config", str(_config(folder)), *GLYPHS, "--ckpt_path", "last"])
    assert torch.load(last, weights_only=True)["global_step"] == 8
    assert sorted(p.name for p in (folder / "logs").iterdir()) == ["version_0"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "status"), [("SIGINT", 130), ("SIGUSR1", 138)])
def test_sigint_and_sigusr1_stop_a_fit_as_sigterm_does(tmp_path: Path, name: str, status: int) -> None:
    """At step 3 (last.ckpt written at 2): last.ckpt at step 3, nothing tested, the folder released, one line;
    Lightning alone exits 1 on SIGINT with nothing saved and is killed by SIGUSR1 (138, nothing saved)."""
    result = _fit(_interrupted(tmp_path, name, step=3))
    assert result.returncode == status == 128 + getattr(signal, name), result.stderr[-2000:]
    last = tmp_path / "logs/version_0/checkpoints/last.ckpt"
    assert result.stderr.splitlines()[-1] == (
        f"lightning-episodes fit: stopped by {name} at step 3 of 8, not tested: {last} holds that step; {RESUME}"
    )
    assert "Traceback" not in result.stderr
    assert "graceful shutdown" not in result.stderr
    assert torch.load(last, weights_only=True)["global_step"] == 3
    assert not list(tmp_path.rglob("test_results.json"))
    assert not list(tmp_path.rglob(LOCK_NAME))
    _resumes_to_the_end(tmp_path, last)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["while saving", "before saving"])
def test_ctrl_c_twice_stops_at_once_and_keeps_the_last_checkpoint_written(tmp_path: Path, when: str) -> None:
    """Ctrl-C at step 5 (last.ckpt written at 4), then again while last.ckpt is written at 5, or before (in the same
    batch): the fit stops there, last.ckpt still holds step 4 (no temporary file left), the folder is released, and
    the line says so; the run resumes from step 4."""
    config = _interrupted(tmp_path, "SIGINT", step=5, times=2 if when == "before saving" else 1)
    plugin = {"class_path": f"{__name__}.SigintWhileSaving", "init_args": {"step": 5}}
    result = _fit(config, *([f"--trainer.plugins={json.dumps(plugin)}"] if when == "while saving" else []))
    assert result.returncode == 130, result.stderr[-2000:]
    folder = tmp_path / "logs/version_0/checkpoints"
    last = folder / "last.ckpt"
    assert result.stderr.splitlines()[-1] == (
        f"lightning-episodes fit: stopped by SIGINT at step 5 of 8, not tested: {last} holds step 4; {RESUME}"
    )
    assert torch.load(last, weights_only=True)["global_step"] == 4
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("best-")) == ["last.ckpt"]
    _resumes_to_the_end(tmp_path, last)

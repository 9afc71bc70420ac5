"""What a command-line run prints, through the real console script in its own process: no advertisement and no
warning a user cannot act on, and evaluation progress bars that show their totals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs/quickstart.yaml")


def _bar_lines(output: str, name: str) -> list[str]:
    """The progress bar's states named ``name`` (``Validation DataLoader 0``), one per redraw."""
    return [line.strip() for line in output.replace("\r", "\n").splitlines() if line.strip().startswith(f"{name}:")]


@pytest.mark.slow
def test_a_quickstart_run_is_quiet_and_its_evaluation_bars_show_totals(tmp_path: Path) -> None:
    runs = ["--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path)]
    runs += ["--trainer.callbacks.dirpath", str(tmp_path / "checkpoints")]
    # 20 validation episodes in batches of 10, 30 test episodes: 2 and 3 batches, over 2 dataloader workers
    data = ["--data.val_episodes", "20", "--data.test_episodes", "30", "--data.num_workers", "2"]
    steps = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--test_after_fit", "true"]
    command = [sys.executable, "-m", "lightning_episodes", "fit", "--config", QUICKSTART, *runs, *data, *steps]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # Lightning's advertisement of its cloud logger, its own deprecation warning, and no other warning either
    for unwanted in ("litlogger", "💡", "LeafSpec", "IterableDataset", "Traceback"):
        assert unwanted not in done.stderr + done.stdout, unwanted
    assert not re.search(r"\w*Warning\b", done.stderr), done.stderr
    totals = {"Sanity Checking DataLoader 0": 2, "Validation DataLoader 0": 2, "Testing DataLoader 0": 3}
    for name, total in totals.items():
        lines = _bar_lines(done.stdout, name)
        assert lines, f"no {name} bar in {done.stdout[-2000:]}"
        assert all(f"/{total} [" in line for line in lines), lines
        assert f"100%|██████████| {total}/{total} [" in lines[-1]

"""scripts/device_check.sh, the prepared GPU check of what a CPU cannot check (the CUDA tests, the step-overhead table
with CUDA graphs, the 84 px comparison with learn2learn): in its dry mode on the CPU it runs every part at tiny sizes,
says each part's exit status, and packs what it wrote where the device tool brings it back."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_dry_run_runs_every_part_and_packs_its_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE_CHECK_DRY": "1", "PYTHON": sys.executable, "OUT": str(out)}
    done = subprocess.run(["bash", "scripts/device_check.sh"], env=env, capture_output=True, text=True, timeout=600,
                          cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = (out / "env.txt").read_text()
    for part in ("tests", "step overhead", "84 px comparison"):
        assert re.search(rf"== \d+ s: {part}: exit 0\b", log), f"{part} did not exit 0:\n{log}"
    assert re.search(r"tests: exit 0 \(\d+ passed", log)  # the CPU-side checks of the CUDA test files ran
    overhead = (out / "step_overhead.md").read_text()
    assert re.search(r"^\| bare loop \| [\d.]+ \|", overhead, re.M)
    assert re.search(r"^\| Trainer \+ uniform/normal/ess \| [\d.]+ \|", overhead, re.M)
    mini = (out / "miniimagenet.md").read_text()
    assert re.search(r"^\| conv4 5w1s5q x 2 \| lightning-episodes \| [\d.]+ \|", mini, re.M)
    if importlib.util.find_spec("learn2learn") is not None:  # `make setup` builds it: the peer's row beside ours
        assert re.search(r"^\| conv4 5w1s5q x 2 \| learn2learn \| [\d.]+ \| 1\.00x \|", mini, re.M)
    with tarfile.open(out / "device_check.tgz") as tar:
        names = {Path(name).name for name in tar.getnames()}
    assert {"tests.log", "step_overhead.md", "miniimagenet.md", "env.txt"} <= names
    assert {"step_overhead.err.tail", "miniimagenet.err.tail"} <= names  # the benchmarks' stderr, cut to its end

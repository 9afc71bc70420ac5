"""scripts/device_study.sh, the prepared GPU run of the paper's cells: in its dry mode on the CPU it runs the first
unfinished pair of its cells, packs their records (no checkpoints, no event files) where the device tool brings them
back, and each later call lands the next pair until none is left."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device_study.sh"


def test_every_cell_of_the_priority_list_names_existing_configs() -> None:
    cells = re.search(r'CELLS=\$\{CELLS:-"(.*?)"\}', SCRIPT.read_text(), re.S)
    assert cells is not None
    rows = [line.split() for line in cells.group(1).splitlines()]
    assert rows[0] == ["glyphs_100_5w5s", "protonet_cosine_conv4", "0"]  # the paper's largest ProtoNet gain first
    assert len(rows) == 9
    for data, model, seed in rows:
        assert (ROOT / "configs" / "data" / f"{data}.yaml").is_file()
        assert (ROOT / "configs" / "models" / f"{model}.yaml").is_file()
        assert seed in {"0", "1", "2"}


def device_study(tmp_path: Path, out: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DEVICE_STUDY_DRY": "1",
        "PYTHON": sys.executable,
        "STUDY": str(tmp_path / "study"),
        "OUT": str(tmp_path / out),
        "CELLS": "glyphs_5w1s protonet_cosine_conv4 0\nglyphs_5w1s protonet_cosine_conv4 1\n",
    }
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)


def packed(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


@pytest.mark.slow
def test_each_call_lands_the_next_pair_and_packs_its_records(tmp_path: Path) -> None:
    first = device_study(tmp_path, "out0")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    names = packed(tmp_path / "out0" / "records.tgz")
    runs = sorted(Path(n).parts[-4] for n in names if n.endswith("test_results.json"))
    assert runs == ["baseline_online", "uniform_online"]
    assert all("seed0" in n for n in names)
    assert not [n for n in names if "checkpoints" in n or "tfevents" in n or n.endswith(".log")]
    assert any(n.endswith("scalars.csv") for n in names)  # the scalars travel without the event files
    summary = (tmp_path / "out0" / "summary.txt").read_text()
    assert "cell: glyphs_5w1s protonet_cosine_conv4 seed 0" in summary
    assert re.search(r"baseline_online: test \d+\.\d\d \+- \d+\.\d\d at global step 4", summary)
    assert re.search(r"uniform_online: test \d+\.\d\d \+- \d+\.\d\d at global step 4", summary)

    second = device_study(tmp_path, "out1")
    assert second.returncode == 0
    assert all("seed1" in n for n in packed(tmp_path / "out1" / "records.tgz"))

    third = device_study(tmp_path, "out2")
    assert third.returncode == 0
    assert "every cell of CELLS has its pair: nothing to run" in third.stdout
    assert not (tmp_path / "out2" / "records.tgz").exists()

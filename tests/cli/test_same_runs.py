"""scripts/same_runs.py: two fits of one seed through the real CLI (resampling, whose records hold wall-clock timings)
are the same bit for bit; another seed is not; one weight moved by one ulp, a missing file and a record's changed
field are found, and a changed timing, the trees' own folders and what ``--ignore`` names are not."""

from __future__ import annotations

import csv
import io
import json
import runpy
import shutil
from pathlib import Path

import pytest
import torch

from lightning_episodes.cli import main as cli
from tests.helpers import tiny_cli_options

ROOT = Path(__file__).resolve().parents[2]
same_runs = runpy.run_path(str(ROOT / "scripts" / "same_runs.py"))["main"]


def _fit(folder: Path, seed: int) -> None:
    """A resampling fit of a few steps on the tiny dataset (tests/conftest.py), tested after it, under ``folder``."""
    options = tiny_cli_options(folder, **{"model.backbone_options.hidden": 8, "trainer.max_steps": 6})
    extra = ["--trainer.val_check_interval=3", "--trainer.log_every_n_steps=1", "--trainer.callbacks.warmup_steps=2"]
    sampling = ["--config=configs/quickstart.yaml", "--config=configs/sampling/uniform_resample.yaml"]
    cli(["fit", *sampling, *options, *extra, f"--seed_everything={seed}", "--test_after_fit=true"])


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same run made twice (``old``, ``new``) and once with another seed (``other``)."""
    made = {}
    for name, seed in (("old", 0), ("new", 0), ("other", 1)):
        made[name] = tmp_path_factory.mktemp(name)
        _fit(made[name] / "run", seed)
    return made


def _last_line(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_one_seed_twice_is_the_same_and_another_seed_is_not(
    trees: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert same_runs([str(trees["old"]), str(trees["new"])]) == 0
    summary = _last_line(capsys)
    assert summary.endswith("the same, bit for bit")
    compared = int(summary.split()[0])
    # the last and best checkpoints, the test record and its per-episode scores at least
    assert compared >= 4
    assert same_runs([str(trees["old"]), str(trees["other"])]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    # other weights, and so another best validation accuracy in the best checkpoint's name
    assert any(line.endswith(".ckpt: only in " + str(trees["old"])) for line in lines)
    assert any("last.ckpt: " in line and "state_dict" in line for line in lines)
    assert lines[-1].endswith("files differ")


def test_a_one_ulp_weight_a_missing_file_and_a_record_field_are_found(
    trees: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # copies: both hold the paths of trees["new"] (not their own folders)
    untouched, tampered = tmp_path / "untouched", tmp_path / "tampered"
    shutil.copytree(trees["new"], untouched)
    shutil.copytree(trees["new"], tampered)
    last = next(tampered.rglob("last.ckpt"))
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    name, weight = next((k, v) for k, v in checkpoint["state_dict"].items() if v.is_floating_point())
    flat = weight.view(-1)
    flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf")))
    torch.save(checkpoint, last)
    assert same_runs([str(untouched), str(tampered)]) == 1
    line = next(line for line in capsys.readouterr().out.splitlines() if "last.ckpt" in line)
    assert line.endswith(f"last.ckpt: 1 value differs (state_dict 1; first /state_dict/{name})")  # that weight alone
    # the same file put back: the same again; then a record's accuracy changed and a best checkpoint removed
    shutil.copy(next(trees["new"].rglob("last.ckpt")), last)
    record_path = next(tampered.rglob("test_results.json"))
    record = json.loads(record_path.read_text())
    record["accuracy"] += 1e-12
    record_path.write_text(json.dumps(record))
    next(tampered.rglob("best-*.ckpt")).unlink()
    assert same_runs([str(untouched), str(tampered)]) == 1
    out = capsys.readouterr().out
    assert "test_results.json: 1 value differs (accuracy 1; first /accuracy)" in out
    assert "only in" in out
    # both left out by --ignore (a regular expression over the keys and file paths' lines)
    assert same_runs([str(untouched), str(tampered), "--ignore", "accuracy"]) == 1  # the missing file stays
    assert "test_results.json" not in capsys.readouterr().out


def test_timings_and_the_trees_own_folders_are_left_out(
    trees: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The records name their own folder (checkpoint paths) and hold the resampling's wall-clock times: two trees of
    the same runs differ in both, and are still the same."""
    records = [json.loads(next(trees[name].rglob("test_results.json")).read_text()) for name in ("old", "new")]
    assert records[0]["ckpt_path"] != records[1]["ckpt_path"]  # each in its own folder: compared as "<run>/..."
    untouched, timed = tmp_path / "untouched", tmp_path / "timed"
    shutil.copytree(trees["new"], untouched)
    shutil.copytree(trees["new"], timed)
    metrics = next(timed.rglob("metrics.csv"))
    rows = list(csv.reader(io.StringIO(metrics.read_text())))
    timed_columns = [i for i, name in enumerate(rows[0]) if name.endswith("_ms")]
    assert timed_columns  # the resampling's score and draw times
    for row in rows[1:]:
        for i in timed_columns:
            row[i] = str(float(row[i]) + 1.0) if row[i] else row[i]
    with metrics.open("w", newline="") as file:
        csv.writer(file).writerows(rows)
    assert same_runs([str(untouched), str(timed)]) == 0
    assert _last_line(capsys).endswith("the same, bit for bit")


def test_bad_arguments_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        same_runs([str(tmp_path / "nowhere"), str(tmp_path)])
    assert stop.value.code == 2
    assert "nowhere is not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        same_runs([str(tmp_path), str(tmp_path), "--ignore", "("])
    assert "--ignore '(' is not a regular expression" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        same_runs([str(tmp_path), str(tmp_path)])
    assert "no checkpoint, CSV or test record" in capsys.readouterr().err

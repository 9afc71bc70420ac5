"""scripts/study_diagnostics.py: per arm, the mean over seeds of the test accuracy and of the callback's logged
diagnostics after the warm-up, computed by hand on fabricated run folders."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

ROOT = Path(__file__).resolve().parents[2]
study = runpy.run_path(str(ROOT / "scripts" / "study_diagnostics.py"))


def fabricate(run: Path, accuracy: float, ess: list[float], p_values: list[float], best: int) -> None:
    """A run folder: its test record and the scalars logged at steps 50, 100, 150, ..."""
    folder = run / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    record = {"accuracy": accuracy, "global_step": 2000, "ckpt_path": f"/x/best-{best}-0.9.ckpt"}
    (folder / "test_results.json").write_text(json.dumps(record))
    writer = SummaryWriter(str(folder))
    for i, (e, p) in enumerate(zip(ess, p_values, strict=True)):
        writer.add_scalar("weighting/ess_over_batch", e, 50 * (i + 1))
        writer.add_scalar("weighting/loss_scale", 1 / e, 50 * (i + 1))
        writer.add_scalar("weighting/normality_p", p, 50 * (i + 1))
    writer.close()


def test_arms_average_their_seeds_and_skip_the_warm_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "glyphs_5w1s__protonet_euclidean_conv4"
    fabricate(scenario / "seed0" / "uniform_online", 0.80, [0.1, 0.8, 0.9], [0.5, 0.01, 0.2], 2000)
    fabricate(scenario / "seed1" / "uniform_online", 0.90, [0.1, 0.6, 0.7], [0.5, 0.01, 0.01], 1500)
    (scenario / "seed2" / "uniform_online").mkdir(parents=True)  # not finished: no record, left out
    assert study["main"]([str(tmp_path), "--after", "100"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| uniform_online"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # steps 100 and 150 only: ESS/|B| (0.8 + 0.9 + 0.6 + 0.7) / 4; normal rejected at 5% in 1 of 2, then 2 of 2 steps
    assert cells[:4] == ["uniform_online", "2", "85.0", "1750"]  # the tested best checkpoints: steps 2000, 1500
    assert float(cells[4]) == pytest.approx(0.75)
    assert float(cells[5]) == pytest.approx((1 / 0.8 + 1 / 0.9 + 1 / 0.6 + 1 / 0.7) / 4, abs=0.005)  # printed: 1.36
    assert float(cells[9]) == pytest.approx(75.0)
    assert cells[6:9] == cells[10:] == ["–"] * 3  # never logged: support, Pareto k, skewness; ks (2), base - novel gap


def test_the_table_is_valid_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Header, delimiter and rows have one cell count once escaped pipes are read as text (GitHub's and MkDocs'
    rule): an unescaped pipe in a column name (ESS/|B|) would split it and the table would render as plain text."""
    fabricate(tmp_path / "glyphs_5w1s__protonet_euclidean_conv4" / "seed0" / "uniform_online", 0.8, [0.5], [0.5], 50)
    assert study["main"]([str(tmp_path)]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    counts = {len(line.replace("\\|", "").strip("|").split("|")) for line in table}
    assert len(table) == 3  # header, delimiter, the arm
    assert counts == {13}  # arm, seeds, accuracy, best step, 8 diagnostics, base - novel


def test_specialisation_is_base_minus_novel_accuracy_at_the_tested_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Training accuracy over the logged steps since the validation before, minus the validation accuracy nearest the
    tested checkpoint's step (the checkpoint is named after the step count, one past the step validation logs at)."""
    scenario = tmp_path / "glyphs_100_5w1s__protonet_euclidean_conv4"
    for seed, (best, train, val) in enumerate(
        [
            (200, [0.2, 0.3, 0.5, 0.7], [0.25, 0.4]),  # best at the first validation (step 199): train at 50, 100, 150
            (400, [0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0, 0.6], [0.25, 0.4]),  # best at the last: train at 250 ... 400
        ]
    ):
        folder = scenario / f"seed{seed}" / "baseline_online" / "lightning_logs" / "version_0"
        folder.mkdir(parents=True)
        record = {"accuracy": 0.5, "ckpt_path": f"/x/best-{best}-0.5.ckpt"}
        (folder / "test_results.json").write_text(json.dumps(record))
        writer = SummaryWriter(str(folder))
        for i, acc in enumerate(train):
            writer.add_scalar("train/acc", acc, 50 * (i + 1))
        for i, acc in enumerate(val):
            writer.add_scalar("val/acc", acc, 200 * (i + 1) - 1)
        writer.close()
    assert study["main"]([str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| baseline_online"))
    seed0 = 100 * ((0.2 + 0.3 + 0.5) / 3 - 0.25)  # steps 50, 100, 150 <= 199
    seed1 = 100 * ((0.7 + 0.8 + 0.9 + 1.0) / 4 - 0.4)  # steps 200, 250, 300, 350 in (199, 399]
    assert float(row.strip("|").split("|")[-1]) == pytest.approx((seed0 + seed1) / 2, abs=0.05)


def test_an_empty_root_is_an_error(tmp_path: Path) -> None:
    assert study["main"]([str(tmp_path)]) == 1


def test_a_missing_root_is_a_one_line_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        study["main"]([str(tmp_path / "nowhere")])
    assert exit_.value.code == 2
    assert f"root: {tmp_path / 'nowhere'} is not a folder" in capsys.readouterr().err


def test_exported_scalars_give_the_same_table_without_the_event_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--export`` writes each run's scalars to scalars.csv; with the event files gone, the table reads the same."""
    scenario = tmp_path / "glyphs_5w1s__protonet_euclidean_conv4"
    fabricate(scenario / "seed0" / "uniform_online", 0.80, [0.1, 0.8, 0.9], [0.5, 0.01, 0.2], 2000)
    fabricate(scenario / "seed1" / "uniform_online", 0.90, [0.1, 0.6, 0.7], [0.5, 0.01, 0.01], 1500)
    assert study["main"]([str(tmp_path), "--export"]) == 0
    from_events = capsys.readouterr().out
    for events in tmp_path.rglob("events.out.tfevents.*"):
        events.unlink()
    assert sorted(p.parent.parent.parent.parent.name for p in tmp_path.rglob("scalars.csv")) == ["seed0", "seed1"]
    assert study["main"]([str(tmp_path)]) == 0
    assert capsys.readouterr().out == from_events
    assert "| uniform_online | 2 | 85.0 | 1750 | 0.75 |" in from_events


def test_records_in_either_scalars_layout_are_read(capsys: pytest.CaptureFixture[str]) -> None:
    """``studies/scarce_resample`` keeps scalars in both layouts (the copied ``scarce5`` seeds 0 and 1 as Lightning's
    ``metrics.csv``, the rest as ``tag,step,value``): every arm has its three seeds and its logged diagnostics."""
    assert study["main"]([str(ROOT / "studies/scarce_resample/n60")]) == 0
    lines = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    rows = {cells[1].strip(): cells for cells in lines}
    for arm in ("baseline_online", "uniform_online", "uniform_resample_empirical16"):
        assert rows[arm][2].strip() == "3", rows[arm]
        assert rows[arm][5].strip() != "–"  # ESS/|B|, from every seed's scalars

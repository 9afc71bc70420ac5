"""scripts/dose_response.py: the gain g and the baseline's over-fitting d of every seed pair, Pearson's r between
them with its Fisher interval, and the per-level t intervals with Holm's adjustment over the levels, computed by hand
on fabricated level folders in the records' on-disk format."""

from __future__ import annotations

import csv
import json
import math
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "dose_response.py"
dose = runpy.run_path(str(SCRIPT))
CELL = "glyphs_100_5w5s__protonet_cosine_conv4"
#: the columns of a record's wide scalars.csv (a subset of the real one's, in its order)
COLUMNS = ["step", "epoch", "hp_metric", "test/acc", "train/acc", "train/loss", "val/acc", "val/loss", "weighting/ess"]


def fabricate(
    run: Path,
    accuracy: float,
    val_acc: list[float] | None = None,
    val_loss: list[float] | None = None,
    layout: str = "wide",
    version: int = 0,
) -> Path:
    """A run folder's test record and, for a baseline, its scalars.csv: training rows every 50 steps, a validation
    every 250 (steps 249, 499, ...), empty cells where a row logs no value, as the records' exporter writes them
    (``layout="long"``: one ``tag,step,value`` row per value, as ``scripts/study_diagnostics.py --export``)."""
    folder = run / "lightning_logs" / f"version_{version}"
    folder.mkdir(parents=True)
    record = {"accuracy": accuracy, "ci95": 0.005, "episodes": 1000, "global_step": 3000}
    (folder / "test_results.json").write_text(json.dumps(record, indent=2))
    if val_acc is None:
        return folder
    rows: list[dict[str, Any]] = [{"step": 0, "hp_metric": -1.0}]
    for step in range(49, 250 * len(val_acc), 50):
        row: dict[str, Any] = {"step": step, "epoch": 0.0, "train/acc": 0.9, "train/loss": 0.3, "weighting/ess": "nan"}
        if (step + 1) % 250 == 0:
            i = (step + 1) // 250 - 1
            row["val/acc"] = val_acc[i]
            if val_loss is not None:
                row["val/loss"] = val_loss[i]
        rows.append(row)
    rows.append({"step": 250 * len(val_acc), "epoch": 1.0, "test/acc": accuracy})
    with (folder / "scalars.csv").open("w", newline="") as f:
        if layout == "wide":
            writer = csv.DictWriter(f, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        else:
            long = csv.writer(f)
            long.writerow(["tag", "step", "value"])
            long.writerows((t, r["step"], r[t]) for t in COLUMNS[1:] for r in rows if t in r)
    return folder


#: level -> seed -> (baseline accuracy, uniform accuracy, baseline val/acc, baseline val/loss)
STUDY = {
    30: {
        0: (0.50, 0.56, [0.40, 0.58, 0.55], [1.2, 1.0, 1.1]),  # g 6, d 3, loss rise 0.1
        1: (0.52, 0.55, [0.45, 0.57, 0.50], [1.0, 0.8, 1.0]),  # g 3, d 7, loss rise 0.25
        2: (0.48, 0.53, [0.50, 0.56, 0.50], [1.0, 0.9, 0.9]),  # g 5, d 6, loss rise 0
    },
    60: {
        0: (0.60, 0.61, [0.50, 0.60, 0.59], [1.0, 0.9, 0.85]),  # g 1, d 1
        1: (0.62, 0.62, [0.55, 0.60, 0.60], [1.0, 0.9, 0.85]),  # g 0, d 0
        2: (0.61, 0.63, [0.58, 0.61, 0.58], [1.0, 0.9, 0.85]),  # g 2, d 3
    },
}
GAINS = {30: [6.0, 3.0, 5.0], 60: [1.0, 0.0, 2.0]}
OVERFITTING = {30: [3.0, 7.0, 6.0], 60: [1.0, 0.0, 3.0]}


def study(root: Path, layout: str = "wide") -> list[Path]:
    """The level folders n30 and n60 of :data:`STUDY`."""
    for level, seeds in STUDY.items():
        for seed, (baseline, uniform, val_acc, val_loss) in seeds.items():
            runs = root / f"n{level}" / CELL / f"seed{seed}"
            fabricate(runs / "baseline_online", baseline, val_acc, val_loss, layout)
            fabricate(runs / "uniform_online", uniform)
    return [root / "n30", root / "n60"]


def analyse(levels: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """The script's JSON numbers and printed text."""
    assert dose["main"]([*map(str, levels), "--json", str(tmp_path / "out.json")]) == 0
    return json.loads((tmp_path / "out.json").read_text()), capsys.readouterr().out


def test_two_levels_of_three_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    numbers, out = analyse(study(tmp_path / "study"), tmp_path, capsys)
    pairs = numbers["pairs"]
    assert [(p["level"], p["seed"]) for p in pairs] == [(30, 0), (30, 1), (30, 2), (60, 0), (60, 1), (60, 2)]
    g, d = [p["gain"] for p in pairs], [p["overfitting"] for p in pairs]
    assert g == pytest.approx(GAINS[30] + GAINS[60])
    assert d == pytest.approx(OVERFITTING[30] + OVERFITTING[60])
    assert [p["loss_rise"] for p in pairs] == pytest.approx([0.1, 0.25, 0.0, 0.0, 0.0, 0.0])
    r = float(np.corrcoef(GAINS[30] + GAINS[60], OVERFITTING[30] + OVERFITTING[60])[0, 1])
    p = stats.pearsonr(GAINS[30] + GAINS[60], OVERFITTING[30] + OVERFITTING[60]).pvalue
    z, half = math.atanh(r), 1.96 / math.sqrt(6 - 3)
    primary = numbers["correlation"]
    assert primary["n"] == 6
    assert primary["r"] == pytest.approx(r)
    assert primary["pvalue"] == pytest.approx(p)
    assert primary["ci95"] == pytest.approx([math.tanh(z - half), math.tanh(z + half)])
    rows = {row["level"]: row for row in numbers["levels"]}
    assert rows[30]["mean"] == pytest.approx(14 / 3)
    assert rows[60]["mean"] == pytest.approx(1.0)
    # sd of (6, 3, 5) is √(7/3), of (1, 0, 2) is 1; t with 2 degrees of freedom
    assert rows[30]["half_width"] == pytest.approx(stats.t.ppf(0.975, 2) * math.sqrt(7 / 3) / math.sqrt(3))
    assert rows[60]["half_width"] == pytest.approx(stats.t.ppf(0.975, 2) * 1 / math.sqrt(3))
    assert rows[30]["overfitting"] == pytest.approx(16 / 3)
    assert rows[60]["overfitting"] == pytest.approx(4 / 3)
    assert rows[30]["loss_rise"] == pytest.approx(0.35 / 3)
    p30, p60 = (stats.ttest_1samp(GAINS[level], 0).pvalue for level in (30, 60))
    assert (rows[30]["pvalue"], rows[60]["pvalue"]) == pytest.approx((p30, p60))
    assert p30 < p60  # Holm: 2 × p30 first, then max(2 × p30, p60)
    assert (rows[30]["holm"], rows[60]["holm"]) == pytest.approx((2 * p30, max(2 * p30, p60)))
    assert numbers["unpaired"] == []
    assert f"r = {r:+.3f}, 95% interval (Fisher's z) [{math.tanh(z - half):+.2f}, " in out
    assert f"p = {p:.3f} (two-sided), n = 6 seed pairs" in out
    row30 = next(line for line in out.splitlines() if line.startswith("| 30 |"))
    cells = [cell.strip() for cell in row30.strip("|").split("|")]
    assert cells[:3] == ["30", "3", f"+4.67 ± {rows[30]['half_width']:.2f}"]
    assert cells[5:] == [
        "5.33",
        "+0.117",
        "seed0 +6.00, seed1 +3.00, seed2 +5.00",
        "seed0 +3.00, seed1 +7.00, seed2 +6.00",
    ]
    assert "r mixes the levels' differences with the seeds'" in out


def test_exported_long_scalars_give_the_same_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``tag,step,value`` rows (``scripts/study_diagnostics.py --export``, as studies/scarce_classes keeps them) read
    as the wide table does."""
    wide, _ = analyse(study(tmp_path / "wide"), tmp_path, capsys)
    long, _ = analyse(study(tmp_path / "long", layout="long"), tmp_path, capsys)
    assert long == wide


def test_fisher_interval_by_hand() -> None:
    # r = 0.5 of 12 pairs: atanh 0.549306, ± 1.96 / 3 = 0.653333, tanh back
    assert dose["fisher_interval"](0.5, 12) == pytest.approx((-0.1036536, 0.8344579), abs=1e-7)
    assert dose["fisher_interval"](0.5, 3) is None
    assert dose["fisher_interval"](1.0, 5) == (1.0, 1.0)


def test_t_interval_of_one_value_has_no_width() -> None:
    assert dose["t_interval"]([2.5]) == (2.5, None, pytest.approx(math.nan, nan_ok=True))
    mean, half_width, p = dose["t_interval"]([1.0, 1.0, 1.0])
    assert (mean, half_width) == (1.0, 0.0)
    assert math.isnan(p)  # equal values: no t-test


def test_holm_over_family_d_in_the_order_of_the_p_values() -> None:
    """Three levels whose p-values rank 60, 30, 120 (not their order); a fourth level given without a pair counts in
    the family without a p."""
    pair = dose["SeedPair"]
    gains = {30: [1.0, 2.0, 3.0], 60: [5.0, 5.1, 4.9], 120: [-1.0, 2.0, 0.5]}
    pairs = [pair(level, s, g, 1.0, None) for level, values in gains.items() for s, g in enumerate(values)]
    p = {level: stats.ttest_1samp(values, 0).pvalue for level, values in gains.items()}
    assert p[60] < p[30] < p[120]
    rows = {row.level: row for row in dose["levels"](pairs, [30, 60, 120])}
    first = 3 * p[60]
    second = max(first, 2 * p[30])
    assert rows[60].holm == pytest.approx(first)
    assert rows[30].holm == pytest.approx(second)
    assert rows[120].holm == pytest.approx(min(1.0, max(second, p[120])))
    rows = {row.level: row for row in dose["levels"](pairs, [30, 60, 120, 240])}
    assert set(rows) == {30, 60, 120}
    assert rows[60].holm == pytest.approx(4 * p[60])
    assert rows[30].holm == pytest.approx(max(4 * p[60], 3 * p[30]))
    assert rows[120].holm == pytest.approx(min(1.0, max(4 * p[60], 3 * p[30], 2 * p[120])))
    assert rows[30].loss_rise is None  # no val/loss: –


values = st.lists(st.floats(-50, 50, allow_nan=False), min_size=3, max_size=12)


@settings(max_examples=60, deadline=None)
@given(gd=st.data(), shift=st.floats(-100, 100), scale=st.floats(0.01, 100))
def test_r_is_invariant_to_shifting_g_and_scaling_d_and_flips_with_d(
    gd: st.DataObject, shift: float, scale: float
) -> None:
    g = gd.draw(values)
    d = gd.draw(st.lists(st.floats(-50, 50, allow_nan=False), min_size=len(g), max_size=len(g)))
    assume(np.std(g) > 1e-2 and np.std(d) > 1e-2)
    r = dose["correlation"](g, d)
    assert r.n == len(g)
    assert dose["correlation"]([x + shift for x in g], [y * scale for y in d]).r == pytest.approx(r.r, abs=1e-6)
    flipped = dose["correlation"](g, [-y for y in d])
    assert flipped.r == pytest.approx(-r.r, abs=1e-9)
    assert flipped.pvalue == pytest.approx(r.pvalue, abs=1e-9)


def test_a_seed_with_one_arm_is_named_and_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    levels = study(tmp_path / "study")
    seed3 = levels[1] / CELL / "seed3"
    fabricate(seed3 / "baseline_online", 0.6, [0.5, 0.6], [1.0, 0.9])
    (seed3 / "uniform_online" / "lightning_logs" / "version_0").mkdir(parents=True)  # still training: no record
    numbers, out = analyse(levels, tmp_path, capsys)
    assert numbers["correlation"]["n"] == 6
    assert numbers["unpaired"] == [f"{seed3} (baseline_online only)"]
    assert f"Left out, one arm not tested: {seed3} (baseline_online only)." in out
    assert "| 60 | 3 |" in out


def test_several_versions_use_the_newest_record_as_compare_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare's run_record: the newest test record of a run folder, said in a warning on stderr."""
    levels = study(tmp_path / "study")
    newer = fabricate(levels[0] / CELL / "seed0" / "uniform_online", 0.60, version=1)  # g 10, not 6
    old = newer.parent / "version_0" / "test_results.json"
    os.utime(old, (old.stat().st_mtime - 100, old.stat().st_mtime - 100))
    assert dose["main"]([*map(str, levels), "--json", str(tmp_path / "out.json")]) == 0
    numbers = json.loads((tmp_path / "out.json").read_text())
    assert numbers["pairs"][0]["gain"] == pytest.approx(10.0)
    err = capsys.readouterr().err
    assert f"dose_response.py: warning: {newer.parent.parent} holds 2 test records: using the newest" in err


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


def _drop_val_acc(scalars: Path) -> None:
    """Rewrite a wide scalars.csv without its val/acc column."""
    rows = list(csv.DictReader(scalars.open()))
    with scalars.open("w", newline="") as f:
        writer = csv.DictWriter(f, [c for c in COLUMNS if c != "val/acc"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.parametrize("case", ["missing", "misnamed", "unpaired", "no val/acc"])
def test_each_error_is_one_line_naming_the_path(tmp_path: Path, case: str) -> None:
    """Through the real command line: exit 2, nothing on stdout, one line on stderr."""
    n30, n60 = study(tmp_path / "study")
    if case == "missing":
        given, expected = [n30, tmp_path / "study" / "n120"], f"no level folder {tmp_path / 'study' / 'n120'}"
    elif case == "misnamed":
        renamed = n30.rename(tmp_path / "study" / "level30")
        given, expected = [renamed, n60], f"{renamed} is not a level folder: its name must be n<N>"
    elif case == "unpaired":
        alone = tmp_path / "other" / "n30"
        fabricate(alone / CELL / "seed0" / "baseline_online", 0.5, [0.5, 0.6], [1.0, 0.9])
        given = [alone]
        expected = f"no seed pair: no <cell>/seed<s> folder of {alone} holds both baseline_online and uniform_online"
    else:
        scalars = next(n60.glob(f"{CELL}/seed1/baseline_online/lightning_logs/version_0/scalars.csv"))
        _drop_val_acc(scalars)
        given, expected = [n30, n60], f"{scalars} has no val/acc column"
    done = run_cli(*map(str, given))
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("dose_response.py: error: ")
    assert expected in done.stderr


def test_a_record_of_another_level_or_a_level_given_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n30, n60 = study(tmp_path / "study")
    assert dose["main"]([str(n30), str(n60), str(tmp_path / "study" / "n30" / ".")]) == 2
    assert f"level 30 is given twice (also {n30})" in capsys.readouterr().err
    record = next(n60.glob(f"{CELL}/seed2/uniform_online/lightning_logs/version_0/test_results.json"))
    record.write_text(json.dumps({**json.loads(record.read_text()), "data": {"train_images_per_class": 30}}))
    assert dose["main"]([str(n30), str(n60)]) == 2
    assert f"{record} was trained with 30 images a class, in the level folder n60" in capsys.readouterr().err


def test_help_says_what_it_computes() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    assert "Pearson's r between g and d" in " ".join(done.stdout.split())
    assert "Holm-adjusted p over the levels" in " ".join(done.stdout.split())


def test_a_p_below_a_thousandth_reads_as_an_inequality() -> None:
    """The primary line says ``p < 0.001``, as the table does, never ``p = < 0.001``; a larger p keeps ``p = ``."""
    correlation = dose["Correlation"]
    small = dose["markdown"](correlation(12, 0.833, 7.6e-4, (0.50, 0.95)), [], [30], [], CELL)
    assert "[+0.50, +0.95], p < 0.001 (two-sided), n = 12 seed pairs" in small
    assert "p = <" not in small
    large = dose["markdown"](correlation(12, 0.4, 0.197, (-0.2, 0.8)), [], [30], [], CELL)
    assert "p = 0.197 (two-sided)" in large

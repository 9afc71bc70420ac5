"""The results table: synthetic run folders with hand-checked bold and † marks, seeds and CSV (the command:
tests/commands/test_report.py)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.analysis.protocols import protocol_of
from lightning_episodes.analysis.report import (
    IGNORED_OPTIONS,
    Column,
    Row,
    RunResult,
    build_table,
    combine,
    read_result,
    sampling_scheme,
)
from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.data import HardTaskMining
from tests.analysis.helpers import CHECKPOINT, DEFAULTS, load, sampling, weighting, write_run, write_runs

MINI_1S = Column("mini-imagenet", "conv4", 5, 1)
MINI_5S = Column("mini-imagenet", "conv4", 5, 5)
CUB_1S = Column("cub200", "conv4", 5, 1)
EUCLIDEAN, COSINE = "ProtoNet (Euclidean)", "ProtoNet (cosine)"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """The column of :func:`~tests.analysis.helpers.write_runs`, worked out by hand, one seed per cell."""
    return write_runs(tmp_path)


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    """The same column, three seeds per cell: the same means and intervals, now over trainings."""
    return write_runs(tmp_path, seeds=3)


def marks(table: Any, column: Column) -> dict[tuple[str, str], str]:
    """``(algorithm, scheme) -> "B" (bold) + "†"`` for the cells of ``column``."""
    return {
        (row.algorithm, row.scheme): ("B" if cell.bold else "") + ("†" if cell.matches_baseline else "")
        for (row, col), cell in table.cells.items()
        if col == column
    }


def test_bold_and_dagger_by_hand(seeded: Path) -> None:
    table = build_table(load(seeded))
    baseline = table.cells[Row(EUCLIDEAN, "baseline"), MINI_1S]
    assert (baseline.seeds, baseline.mean, baseline.ci95) == (3, pytest.approx(0.50), pytest.approx(0.008))
    assert marks(table, MINI_1S) == {
        (EUCLIDEAN, "baseline"): "",
        (EUCLIDEAN, "uniform (online)"): "B†",
        (EUCLIDEAN, "uniform (offline)"): "B†",
        (EUCLIDEAN, "easy (online)"): "",
        (EUCLIDEAN, "hard (online)"): "†",
        (EUCLIDEAN, "curriculum (offline)"): "†",
        ("MAML", "baseline"): "",
        ("MAML", "uniform (online)"): "†",
    }


def test_one_seed_cells_get_no_mark(runs: Path) -> None:
    """Issue 57: the marks of one-seed cells came from their intervals over test episodes, which leave out the spread
    between trainings. The same column, one seed per cell: no mark at all, whichever the bold's scope."""
    for within in ("column", "scenario"):
        table = build_table(load(runs), bold_within=within)
        assert set(marks(table, MINI_1S).values()) == {""}


def test_a_one_seed_cell_neither_sets_the_best_nor_is_a_baseline(seeded: Path) -> None:
    """A one-seed arm above every other (60 ± 0.1) does not take the bold from the best cell of seeds; a one-seed
    baseline gives no †, even to a cell of seeds far above it."""
    write_run(seeded / "pn/lucky", 0.60, 0.001, sampling=sampling(target="uniform", decay=0.5))
    write_run(seeded / "other/baseline", 0.30, 0.001, [weighting("baseline")], dataset="cub200")
    for seed in range(3):
        write_run(seeded / f"other/uniform/seed{seed}", 0.40 + seed / 100, 0.001, [weighting("uniform")],
                  dataset="cub200", seed=seed)  # fmt: skip
    table = build_table(load(seeded))
    got = marks(table, MINI_1S)
    assert got[(EUCLIDEAN, "uniform (online, decay=0.5)")] == ""
    assert got[(EUCLIDEAN, "uniform (online)")] == "B†"  # still the best of the cells over trainings
    assert got[(EUCLIDEAN, "baseline")] == ""
    assert marks(table, CUB_1S) == {(EUCLIDEAN, "baseline"): "", (EUCLIDEAN, "uniform (online)"): "B"}


def test_bold_within_each_scenario(seeded: Path) -> None:
    table = build_table(load(seeded), bold_within="scenario")
    got = marks(table, MINI_1S)
    assert got[("MAML", "baseline")] == "B"
    assert got[("MAML", "uniform (online)")] == "B†"
    assert got[(EUCLIDEAN, "uniform (offline)")] == "B†"
    assert got[(EUCLIDEAN, "baseline")] == ""


def test_rows_and_columns_in_the_papers_order(runs: Path) -> None:
    write_run(runs / "cross/cub", 0.40, 0.01, [weighting("baseline")], dataset="cub200")
    table = build_table(load(runs))
    assert [(row.algorithm, row.scheme) for row in table.rows] == [
        (EUCLIDEAN, "baseline"),
        (EUCLIDEAN, "curriculum (offline)"),
        (EUCLIDEAN, "uniform (offline)"),
        (EUCLIDEAN, "easy (online)"),
        (EUCLIDEAN, "hard (online)"),
        (EUCLIDEAN, "uniform (online)"),
        ("MAML", "baseline"),
        ("MAML", "uniform (online)"),
    ]
    assert table.columns == [MINI_1S, CUB_1S]
    assert CUB_1S.label == "CUB-200, Conv-4, 5-way 1-shot"


def test_markdown(runs: Path) -> None:
    lines = build_table(load(runs)).to_markdown().splitlines()
    assert lines[0] == "| Algorithm | Sampling | Mini-ImageNet, Conv-4, 5-way 1-shot |"
    assert lines[1] == "|---|---|---:|"
    assert lines[2] == "| ProtoNet (Euclidean) | baseline | 50.00 ± 0.80 |"
    # one seed per cell: no mark (issue 57; the legend says why)
    assert "|  | uniform (offline) | 51.00 ± 0.50 |" in lines
    assert "|  | hard (online) | 49.00 ± 0.20 |" in lines
    assert "| MAML | baseline | 47.00 ± 1.00 |" in lines
    legend = "Mean test accuracy (%) ± 95% interval. One seed: the interval over the test episodes"
    (text,) = [line for line in lines if line.startswith(legend)]
    assert text.endswith(
        "Both marks compare cells of two or more seeds only: a claim about trainings needs the interval over "
        "trainings, so a cell of one seed gets no mark (nor sets the best, nor as a baseline gives a †)."
    )


def test_markdown_marks_cells_of_seeds(seeded: Path) -> None:
    lines = build_table(load(seeded)).to_markdown().splitlines()
    assert "|  | uniform (offline) | **51.00 ± 0.50**† (sd 0.16, 3 seeds) |" in lines  # sd = 0.8 · 0.5 √3 / 4.3027
    assert "|  | hard (online) | 49.00 ± 0.20† (sd 0.06, 3 seeds) |" in lines


def test_seeds_are_combined(tmp_path: Path) -> None:
    for seed, accuracy in enumerate((0.60, 0.62, 0.64)):
        write_run(tmp_path / f"seed{seed}", accuracy, 0.006, None, distance="cosine", shots=5, seed=seed)
    (cell,) = build_table(load(tmp_path)).cells.values()
    # sd = 0.02; t(0.975, 2 df) = 4.302653 (tables); half-width = sqrt(0.006^2 + (4.302653 * 0.02 / sqrt(3))^2)
    # = sqrt(3.6e-5 + 2.468377e-3) = 0.0500437
    assert cell.seeds == 3
    assert cell.mean == pytest.approx(0.62)
    assert cell.seed_sd == pytest.approx(0.02)
    assert cell.ci95 == pytest.approx(math.sqrt(0.000036 + 0.002468377), rel=1e-5)
    assert cell.ci95 == pytest.approx(0.0500437, abs=1e-6)
    row = build_table(load(tmp_path)).to_markdown().splitlines()[2]
    assert row == "| ProtoNet (cosine) | baseline | **62.00 ± 5.00** (sd 2.00, 3 seeds) |"
    assert build_table(load(tmp_path)).columns == [MINI_5S]


@given(
    accuracies=st.lists(st.floats(0.2, 0.9), min_size=2, max_size=8).filter(lambda a: max(a) - min(a) > 1e-3),
    test_ci=st.floats(0.0, 0.02),
)
def test_the_seed_interval_is_students_t_over_the_seeds_means(accuracies: list[float], test_ci: float) -> None:
    """Against scipy: without a test-episode interval the cell's interval is scipy's Student-t interval of the seeds'
    mean; with one (shared by every seed), the two add in quadrature."""
    runs = [RunResult(Path(f"s{i}"), Row("ProtoNet", "baseline"), MINI_1S, a, test_ci, 1000, (i, 0)) for i, a in
            enumerate(accuracies)]  # fmt: skip
    cell = combine(runs)
    low, high = stats.t.interval(0.95, len(accuracies) - 1, loc=stats.tmean(accuracies), scale=stats.sem(accuracies))
    assert cell.mean == pytest.approx((low + high) / 2)
    assert cell.ci95 == pytest.approx(math.hypot((high - low) / 2, test_ci), rel=1e-9)
    assert cell.seed_sd == pytest.approx(stats.tstd(accuracies))


def test_two_seeds_take_the_t_quantile_of_one_degree_of_freedom() -> None:
    # 0.50 and 0.54: sd = 0.02 * sqrt(2) = 0.0282843, sd / sqrt(2) = 0.02, t(0.975, 1) = 12.7062 (tables): ± 0.2541
    runs = [RunResult(Path(f"s{i}"), Row("ProtoNet", "baseline"), MINI_1S, a, 0.0, 1000, (i, 0)) for i, a in
            enumerate((0.50, 0.54))]  # fmt: skip
    assert combine(runs).ci95 == pytest.approx(0.2541240, abs=1e-6)


def test_one_seed_tested_twice_counts_once(tmp_path: Path) -> None:
    write_run(tmp_path / "version_0", 0.50, 0.01, None, mtime=1_000)
    write_run(tmp_path / "version_1", 0.55, 0.01, None, mtime=2_000)
    write_run(tmp_path / "version_2", 0.60, 0.01, None, seed=1, mtime=1_500)
    with pytest.warns(UserWarning, match="one seed of one cell"):
        (cell,) = build_table(load(tmp_path)).cells.values()
    assert cell.seeds == 2
    assert cell.mean == pytest.approx((0.55 + 0.60) / 2)  # the newer record of seed 0


def test_sampling_scheme_from_the_saved_config() -> None:
    assert sampling_scheme({}) == ("baseline", None, ())
    assert sampling_scheme({"trainer": {"callbacks": [CHECKPOINT]}}) == ("baseline", None, ())
    assert sampling_scheme({"trainer": {"callbacks": [CHECKPOINT, weighting("hard", "offline")]}}) == (
        "hard",
        "offline",
        (),
    )
    assert sampling_scheme({"trainer": {"callbacks": weighting("baseline", "offline")}}) == ("baseline", None, ())
    custom = weighting({"class_path": "my_project.targets.Triangular", "init_args": {}})
    assert sampling_scheme({"trainer": {"callbacks": [custom]}}) == ("Triangular", "online", ())
    custom = weighting({"class_path": "my_project.targets.Triangular", "init_args": {"peak": 0.25}})
    assert sampling_scheme({"trainer": {"callbacks": [custom]}}) == ("Triangular(peak=0.25)", "online", ())
    # a subclass of the callback is recognised by its arguments; missing ones take the callback's defaults
    subclass = {"class_path": "my_project.MyWeighting", "init_args": {"target": "easy", "proposal": "online"}}
    assert sampling_scheme({"trainer": {"callbacks": [subclass]}}) == ("easy", "online", ())
    bare = {"class_path": "lightning_episodes.callbacks.DifficultyWeightingCallback"}
    assert sampling_scheme({"trainer": {"callbacks": [bare]}}) == ("uniform", "online", ())
    # every option the config names that is not the default is part of the scheme
    clamp = {
        "class_path": bare["class_path"],
        "init_args": {**DEFAULTS, "target": "uniform", "out_of_support": "clamp"},
    }
    assert sampling_scheme({"trainer": {"callbacks": [clamp]}}) == ("uniform", "online", (("out_of_support", "clamp"),))


def test_record_fields_take_precedence(tmp_path: Path) -> None:
    path = write_run(
        tmp_path / "a", 0.5, 0.01, [weighting("uniform")], sampling={"target": "hard", "proposal": "offline"}
    )
    assert read_result(path).row == Row(EUCLIDEAN, "hard", "offline")
    path = write_run(tmp_path / "b", 0.5, 0.01, [weighting("uniform")], seed=3)
    assert read_result(path).seed == (3, 0)  # (seed_everything, data seed)
    path.write_text(json.dumps({**json.loads(path.read_text()), "seed": 7}))
    assert read_result(path).seed == (7, 0)


def test_without_a_config_the_scheme_is_unknown(tmp_path: Path) -> None:
    path = write_run(tmp_path / "bare", 0.5, 0.01, config=False)
    with pytest.warns(UserWarning, match="sampling scheme is unknown"):
        result = read_result(path)
    assert result.row.scheme == "unknown"
    assert result.seed is None


def test_csv(runs: Path) -> None:
    lines = list(csv.DictReader(io.StringIO(build_table(load(runs)).to_csv())))
    assert len(lines) == 8
    first = lines[0]
    assert first["algorithm"] == EUCLIDEAN
    assert first["target"] == "baseline"
    assert (first["estimate"], first["options"]) == ("", "")
    assert (first["dataset"], first["backbone"], first["ways"], first["shots"]) == ("mini-imagenet", "conv4", "5", "1")
    assert float(first["accuracy_pct"]) == pytest.approx(50.0)
    assert float(first["ci95_pct"]) == pytest.approx(0.8)
    assert (first["seeds"], first["seed_sd_pct"], first["episodes"]) == ("1", "", "1000")
    uniform = next(line for line in lines if line["target"] == "uniform" and line["estimate"] == "offline")
    assert (uniform["bold"], uniform["matches_baseline"]) == ("0", "0")  # one seed: no mark


def test_csv_marks_cells_of_seeds(seeded: Path) -> None:
    lines = list(csv.DictReader(io.StringIO(build_table(load(seeded)).to_csv())))
    uniform = next(line for line in lines if line["target"] == "uniform" and line["estimate"] == "offline")
    assert (uniform["seeds"], uniform["bold"], uniform["matches_baseline"]) == ("3", "1", "1")


# -- arms that differ only in the callback's options --------------------------------------------------------------
def test_records_that_differ_only_in_an_option_are_different_rows(tmp_path: Path) -> None:
    """The issue's case: ``uniform`` with ``out_of_support: clamp`` beside ``zero`` (and the placebo) stay apart."""
    clamp = dict(DifficultyWeightingCallback(target="uniform", out_of_support="clamp").options)
    for seed in (0, 1):
        write_run(
            tmp_path / f"zero/seed{seed}", 0.50 + seed / 100, 0.01, seed=seed, sampling=sampling(target="uniform")
        )
        write_run(tmp_path / f"clamp/seed{seed}", 0.40 + seed / 100, 0.01, seed=seed, sampling=clamp)
        write_run(
            tmp_path / f"placebo/seed{seed}",
            0.45,
            0.01,
            seed=seed,
            sampling=sampling(target="uniform", shuffle_weights=True),
        )
        write_run(tmp_path / f"baseline/seed{seed}", 0.47, 0.01, seed=seed, sampling=sampling(target="baseline"))
    table = build_table(load(tmp_path))
    cells = {row.scheme: cell for (row, _), cell in table.cells.items()}
    assert [row.scheme for row in table.rows] == [
        "baseline",
        "uniform (online)",
        "uniform (online, out_of_support=clamp)",
        "uniform (online, shuffle_weights=true)",
    ]
    # identical options across seeds merge: two seeds per row, each row its own mean
    assert {scheme: cell.seeds for scheme, cell in cells.items()} == dict.fromkeys(cells, 2)
    assert cells["uniform (online)"].mean == pytest.approx(0.505)
    assert cells["uniform (online, out_of_support=clamp)"].mean == pytest.approx(0.405)
    # two seeds 1 point apart: t(0.975, 1) makes the interval wide enough to overlap the best (bold)
    assert "|  | uniform (online, out_of_support=clamp) | **40.50 ± " in table.to_markdown()
    line = next(r for r in csv.DictReader(io.StringIO(table.to_csv())) if r["options"])
    assert (line["target"], line["estimate"], line["options"]) == ("uniform", "online", "out_of_support=clamp")


def test_several_options_are_named_in_a_stable_order(tmp_path: Path) -> None:
    record = sampling(
        target="uniform", estimate="offline", support_sigmas=2.0, decay=0.5, reference_checkpoint="a.ckpt"
    )
    row = read_result(write_run(tmp_path / "a", 0.5, 0.01, sampling=record)).row
    assert row == Row(EUCLIDEAN, "uniform", "offline", (("decay", "0.5"), ("support_sigmas", "2")))
    assert row.scheme == "uniform (offline, decay=0.5, support_sigmas=2)"


def test_options_that_do_not_change_training_do_not_split_rows(tmp_path: Path) -> None:
    """Each seed's offline reference lies in its own folder; logging options change nothing that is trained."""
    assert {"reference_checkpoint", "histogram_every_n_steps", "name"} <= IGNORED_OPTIONS
    for seed in (0, 1):
        record = sampling(
            target="uniform", estimate="offline", reference_checkpoint=f"seed{seed}/best.ckpt",
            histogram_every_n_steps=10 * seed,
        )  # fmt: skip
        write_run(tmp_path / f"seed{seed}", 0.5, 0.01, seed=seed, sampling=record)
    ((row, _), cell), *others = build_table(load(tmp_path)).cells.items()
    assert not others
    assert (row.scheme, cell.seeds) == ("uniform (offline)", 2)


def test_old_records_with_proposal_online_or_offline_still_work(tmp_path: Path) -> None:
    """Records and configs of earlier versions: ``proposal`` was the estimate; they merge with new default records."""
    write_run(tmp_path / "old/seed0", 0.50, 0.01, seed=0, sampling={"target": "uniform", "proposal": "online"})
    write_run(tmp_path / "new/seed1", 0.52, 0.01, seed=1, sampling=sampling(target="uniform"))
    write_run(tmp_path / "old_offline", 0.48, 0.01, sampling={"target": "uniform", "proposal": "offline"})
    write_run(tmp_path / "old_config", 0.46, 0.01, [weighting("hard", "offline")])
    write_run(tmp_path / "old_baseline", 0.47, 0.01, sampling={"target": "baseline", "proposal": "offline"})
    cells = {row.scheme: cell for (row, _), cell in build_table(load(tmp_path)).cells.items()}
    assert set(cells) == {"baseline", "uniform (online)", "uniform (offline)", "hard (offline)"}
    assert cells["uniform (online)"].seeds == 2
    assert cells["uniform (online)"].mean == pytest.approx(0.51)


def test_a_record_names_the_options_that_differ_from_its_own_defaults(tmp_path: Path) -> None:
    """A record carries the defaults of the callback that ran (``sampling_defaults``, a subclass's own): an option at
    that default is not named, whatever today's callback's default; a record without them is read with
    ``LEGACY_SAMPLING_DEFAULTS``."""
    record = sampling(target="uniform", decay=0.5, warmup_steps=50)
    own = {**DEFAULTS, "decay": 0.5}  # e.g. a subclass whose default decay is 0.5
    row = read_result(write_run(tmp_path / "own", 0.5, 0.01, sampling=record, sampling_defaults=own)).row
    assert row.options == (("warmup_steps", "50"),)
    row = read_result(write_run(tmp_path / "legacy", 0.5, 0.01, sampling=record)).row
    assert row.options == (("decay", "0.5"), ("warmup_steps", "50"))


def test_a_task_samplers_runs_are_a_row_of_their_own(tmp_path: Path) -> None:
    """Plain weighting with classes chosen by a task sampler is not the baseline: its records name the sampler."""
    data = {"dataset": "mini-imagenet", "ways": 5, "shots": 1, "eval_ways": None, "seed": 0, "test_split": "test"}
    mining = "HardTaskMining(hard_fraction=0.5, buffer_size=50, warmup_steps=32)"
    write_run(tmp_path / "baseline", 0.47, 0.01, sampling=sampling(target="baseline"))
    chosen = {**data, "task_sampler": mining}
    write_run(tmp_path / "mining", 0.49, 0.01, sampling=sampling(target="baseline"), data=chosen)
    write_run(tmp_path / "both", 0.50, 0.01, sampling=sampling(target="uniform"), data=chosen)
    rows = [row.scheme for row in build_table(load(tmp_path)).rows]
    shown = "HardTaskMining (hard_fraction=0.5, buffer_size=50, warmup_steps=32)"
    assert rows == ["baseline", f"baseline + {shown}", f"uniform (online) + {shown}"]
    options = [read_result(path).row.options for path in sorted(tmp_path.rglob("test_results.json"))]
    assert (("task_sampler", mining),) in options  # the CSV's options column keeps the record's text


def test_a_class_path_backbone_is_named_by_its_class(tmp_path: Path) -> None:
    resnet = {"class_path": "torchvision.models.ResNet", "init_args": {"layers": [2, 2, 2, 2]}}
    path = write_run(tmp_path / "resnet", 0.5, 0.01, [weighting("baseline")], hparams={"backbone": resnet})
    assert read_result(path).column.backbone == "ResNet"


def test_a_task_sampler_recorded_by_class_path_and_one_recorded_by_its_repr_are_one_row(tmp_path: Path) -> None:
    """Records keep a sampler as its class path and init_args; older ones kept its repr: both read the same."""
    data = {"dataset": "mini-imagenet", "ways": 5, "shots": 1, "eval_ways": None, "seed": 0, "test_split": "test"}
    config = HardTaskMining(buffer_size=20).config()
    assert config == {
        "class_path": "lightning_episodes.data.task_samplers.HardTaskMining",
        "init_args": {"hard_fraction": 0.5, "buffer_size": 20, "warmup_steps": 32},
    }
    old = "HardTaskMining(hard_fraction=0.5, buffer_size=20, warmup_steps=32)"
    write_run(tmp_path / "new", 0.49, 0.01, sampling=sampling(target="baseline"), data={**data, "task_sampler": config})
    write_run(tmp_path / "old", 0.51, 0.01, sampling=sampling(target="baseline"), data={**data, "task_sampler": old})
    with pytest.warns(UserWarning, match="are one seed of one cell: using the newer"):  # one sampler, two spellings
        rows = build_table(load(tmp_path)).rows
    assert [row.scheme for row in rows] == [
        "baseline + HardTaskMining (hard_fraction=0.5, buffer_size=20, warmup_steps=32)"
    ]
    assert protocol_of(None, {"data": {"ways": 5, "task_sampler": config}}) == (("data.ways", "5"),)

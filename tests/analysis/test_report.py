"""The results table: synthetic run folders with hand-checked bold and † marks, seeds, CSV and the command."""

from __future__ import annotations

import csv
import inspect
import io
import itertools
import json
import math
import os
import runpy
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.analysis.report import (
    IGNORED_OPTIONS,
    Column,
    Row,
    RunResult,
    build_table,
    combine,
    find_results,
    read_result,
    sampling_scheme,
    scheme_of,
)
from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.commands.report import main

MINI_1S = Column("mini-imagenet", "conv4", 5, 1)
MINI_5S = Column("mini-imagenet", "conv4", 5, 5)
CUB_1S = Column("cub200", "conv4", 5, 1)
EUCLIDEAN, COSINE = "ProtoNet (Euclidean)", "ProtoNet (cosine)"


def weighting(target: Any, proposal: str = "online") -> dict[str, Any]:
    return {
        "class_path": "lightning_episodes.callbacks.DifficultyWeightingCallback",
        "init_args": {"target": target, "proposal": proposal, "warmup_steps": 100},
    }


#: Every option of a default weighting callback, as a results record stores them (``options`` is the record's source).
DEFAULTS = DifficultyWeightingCallback().options


def sampling(**changed: Any) -> dict[str, Any]:
    """A record's ``sampling`` field: a callback's options, ``changed`` from the defaults."""
    return {**DEFAULTS, **changed}


CHECKPOINT = {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint", "init_args": {"monitor": "val/acc"}}


def write_run(
    folder: Path,
    accuracy: float,
    ci95: float,
    callbacks: list[dict[str, Any]] | None = None,
    algorithm: str = "ProtoNet",
    distance: str | None = "euclidean",
    dataset: str = "mini-imagenet",
    shots: int = 1,
    seed: int = 0,
    mtime: float | None = None,
    config: bool = True,
    **record: Any,
) -> Path:
    """A run folder as the CLI leaves it: ``test_results.json`` and the saved ``config.yaml`` beside it."""
    folder.mkdir(parents=True)
    hparams = {"backbone": "conv4", **({"distance": distance} if distance else {})}
    data = {"dataset": dataset, "ways": 5, "shots": shots, "eval_ways": None, "seed": 0, "test_split": "test"}
    result = {"algorithm": algorithm, "accuracy": accuracy, "ci95": ci95, "episodes": 1000, "hparams": hparams}
    path = folder / "test_results.json"
    path.write_text(json.dumps({**result, "data": data, **record}))
    if config:
        trainer = {"max_steps": 20000, "callbacks": [CHECKPOINT, *(callbacks or [])]}
        (folder / "config.yaml").write_text(yaml.safe_dump({"seed_everything": seed, "trainer": trainer}))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """One column worked out by hand (accuracies in %, intervals [mean - ci, mean + ci]):

    ProtoNet (Euclidean), Mini-ImageNet conv4 5-way 1-shot:
      baseline             50.0 ± 0.8 [49.2, 50.8]
      uniform (online)     52.0 ± 0.8 [51.2, 52.8]  best -> bold; †
      uniform (offline)    51.0 ± 0.5 [50.5, 51.5]  overlaps the best -> bold; †
      easy (online)        48.5 ± 0.6 [47.9, 49.1]  below the baseline, apart -> no †
      hard (online)        49.0 ± 0.2 [48.8, 49.2]  touches the baseline -> †
      curriculum (offline) 49.5 ± 0.1 [49.4, 49.6]  inside the baseline -> †
    MAML, same column:
      baseline             47.0 ± 1.0 [46.0, 48.0]  bold only within its scenario
      uniform (online)     48.0 ± 1.0 [47.0, 49.0]  †; bold only within its scenario
    """
    write_run(tmp_path / "pn/baseline", 0.50, 0.008, [weighting("baseline")])
    write_run(tmp_path / "pn/uniform_online", 0.52, 0.008, [weighting("uniform")])
    write_run(tmp_path / "pn/uniform_offline", 0.51, 0.005, [weighting("uniform", "offline")])
    write_run(tmp_path / "pn/easy_online", 0.485, 0.006, [weighting("easy")])
    write_run(tmp_path / "pn/hard_online", 0.49, 0.002, [weighting("hard")])
    write_run(tmp_path / "pn/curriculum_offline", 0.495, 0.001, [weighting("curriculum", "offline")])
    write_run(tmp_path / "maml/baseline", 0.47, 0.01, None, algorithm="MAML", distance=None)
    write_run(tmp_path / "maml/uniform_online", 0.48, 0.01, [weighting("uniform")], algorithm="MAML", distance=None)
    return tmp_path


def marks(table: Any, column: Column) -> dict[tuple[str, str], str]:
    """``(algorithm, scheme) -> "B" (bold) + "†"`` for the cells of ``column``."""
    return {
        (row.algorithm, row.scheme): ("B" if cell.bold else "") + ("†" if cell.matches_baseline else "")
        for (row, col), cell in table.cells.items()
        if col == column
    }


def load(root: Path) -> list[Any]:
    return [read_result(path) for path in find_results([root])]


def test_bold_and_dagger_by_hand(runs: Path) -> None:
    table = build_table(load(runs))
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


def test_bold_within_each_scenario(runs: Path) -> None:
    table = build_table(load(runs), bold_within="scenario")
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
    assert "|  | uniform (offline) | **51.00 ± 0.50**† |" in lines
    assert "|  | hard (online) | 49.00 ± 0.20† |" in lines
    assert "| MAML | baseline | 47.00 ± 1.00 |" in lines
    legend = "Mean test accuracy (%) ± 95% interval. One seed: the interval over the test episodes"
    assert any(line.startswith(legend) for line in lines)


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
    assert (uniform["bold"], uniform["matches_baseline"]) == ("1", "1")


def test_command(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (runs / "broken").mkdir()
    (runs / "broken" / "test_results.json").write_text("{not json")
    with pytest.warns(UserWarning, match="skipping"):
        code = main([str(runs), "--markdown", str(tmp_path / "out/table.md"), "--csv", str(tmp_path / "out/t.csv")])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "out/table.md").read_text()
    assert "**52.00 ± 0.80**†" in printed
    (runs / "broken" / "test_results.json").unlink()
    assert (tmp_path / "out/t.csv").read_text() == build_table(load(runs)).to_csv()


def test_the_command_warns_when_records_come_from_different_versions(tmp_path: Path) -> None:
    made = {"python": "3.11.7", "torch": "2.14.1", "numpy": "2.4.6", "cpu": "Intel Xeon"}
    write_run(tmp_path / "a", 0.50, 0.01, environment=made)
    write_run(tmp_path / "b", 0.51, 0.01, seed=1, environment={**made, "cpu": "AMD EPYC"})  # the CPU alone: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main([str(tmp_path)]) == 0
    write_run(tmp_path / "c", 0.52, 0.01, seed=2, environment={**made, "numpy": "2.5.0"})
    write_run(tmp_path / "d", 0.53, 0.01, seed=3)  # an older record, without versions, says nothing
    with pytest.warns(UserWarning, match=r"made with different versions: numpy 2\.4\.6 / 2\.5\.0$"):
        assert main([str(tmp_path)]) == 0


def test_command_without_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no test_results.json" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
def test_runs_as_a_module(runs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["lightning_episodes", "report", str(runs), "--bold-within", "scenario"])
    with pytest.raises(SystemExit) as exit_info:  # python -m lightning_episodes report ...
        runpy.run_module("lightning_episodes", run_name="__main__")
    assert exit_info.value.code == 0
    assert "| MAML | baseline | **47.00 ± 1.00** |" in capsys.readouterr().out


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


def test_best_step_and_convergence_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run a peaks at step 600 of 900 (converged); run b's best is its last (not converged); on a tie the first
    best counts, as the checkpoint callback keeps it (run c peaks at 300); an old record has no curve."""
    curves = {
        "a": [[300, 0.40], [600, 0.47], [900, 0.45]],
        "b": [[300, 0.40], [600, 0.44], [900, 0.46]],
        "c": [[300, 0.45], [600, 0.45], [900, 0.44]],
    }
    for seed, (name, curve) in enumerate(curves.items()):
        write_run(tmp_path / name, 0.45, 0.01, [weighting("uniform")], seed=seed, validation=curve)
    write_run(tmp_path / "old", 0.45, 0.01, [weighting("baseline")])
    runs = {r.path.parent.name: r for r in load(tmp_path)}
    assert [(runs[n].best_step, runs[n].converged) for n in "abc"] == [(600, True), (900, False), (300, True)]
    assert (runs["old"].validation, runs["old"].best_step, runs["old"].converged) == ((), None, None)

    plot = tmp_path / "out/study.png"
    assert main([str(tmp_path), "--plot", str(plot)]) == 0
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if line.startswith("| Mini-ImageNet")]
    benchmark = "| Mini-ImageNet, Conv-4, 5-way 1-shot | uniform (online)"
    assert lines == [  # best and last validation with their steps: a falls 2 points after its peak, c 1
        f"{benchmark} | 0 | 45.00 ± 1.00 | 47.00 | 600 | 45.00 | 900 | yes |",
        f"{benchmark} | 1 | 45.00 ± 1.00 | 46.00 | 900 | 46.00 | 900 | no |",
        f"{benchmark} | 2 | 45.00 ± 1.00 | 45.00 | 300 | 44.00 | 900 | yes |",
    ]
    assert plot.read_bytes().startswith(b"\x89PNG"), "a PNG figure"


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


def test_the_legacy_defaults_are_this_versions_callback_defaults() -> None:
    """The defaults that older records were written with. When a default of the callback changes, this table keeps
    the old value (older records were written with it) and this test lists the difference."""
    from lightning_episodes.evaluation.record import LEGACY_SAMPLING_DEFAULTS

    assert dict(LEGACY_SAMPLING_DEFAULTS) == {
        name: parameter.default
        for name, parameter in inspect.signature(DifficultyWeightingCallback.__init__).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


def test_the_writer_records_the_defaults_of_the_callback_that_ran() -> None:
    from types import SimpleNamespace

    from lightning_episodes.callbacks.test_results import sampling_defaults, sampling_record

    class Slow(DifficultyWeightingCallback):
        def __init__(self, decay: float = 0.5, **kwargs: Any) -> None:
            super().__init__(decay=decay, **kwargs)

    trainer: Any = SimpleNamespace(callbacks=[Slow(warmup_steps=50)])
    defaults = sampling_defaults(trainer)
    assert defaults == {**DEFAULTS, "decay": 0.5}
    record = sampling_record(trainer)
    assert record is not None
    assert defaults is not None
    assert scheme_of(record, defaults) == ("uniform", "online", (("warmup_steps", "50"),))  # decay is at its default
    assert sampling_defaults(SimpleNamespace(callbacks=[])) is None  # type: ignore[arg-type]


def test_study_plot_wraps_long_arm_names_under_the_accuracies(tmp_path: Path) -> None:
    """An arm named by several options (the resampling placebo) wraps into lines of at most ``TICK_WIDTH``
    characters, each break at a space, instead of running into its neighbour's label; the seeds go on the last line."""
    from lightning_episodes.analysis.plots import TICK_WIDTH, plot_study

    write_run(tmp_path / "base", 0.55, 0.01, [weighting("baseline")])
    long = sampling(target="uniform", mode="resample", shuffle_weights=True)
    write_run(tmp_path / "placebo", 0.56, 0.01, sampling=long)
    runs = load(tmp_path)
    figure = plot_study(build_table(runs), runs)
    labels = [tick.get_text() for tick in figure.axes[0].get_xticklabels()]
    assert labels[0] == "baseline\n(1 seed)"
    assert labels[1].split("\n") == ["uniform (online,", "mode=resample,", "shuffle_weights=true)", "(1 seed)"]
    assert all(len(line) <= TICK_WIDTH for label in labels for line in label.split("\n"))


def test_study_plot_labels_do_not_overlap_however_many_arms(tmp_path: Path) -> None:
    """The figure widens with the arms of its fullest benchmark: the rendered labels of six arms with long names
    (the study's four cells hold up to six) stay apart."""
    from lightning_episodes.analysis.plots import plot_study

    arms = [
        {"target": "uniform"},
        {"target": "uniform", "normalization": "psis"},
        {"target": "uniform", "shuffle_weights": True},
        {"target": "uniform", "mode": "resample"},
        {"target": "uniform", "mode": "resample", "shuffle_weights": True},
    ]
    write_run(tmp_path / "base", 0.55, 0.01, [weighting("baseline")])
    for k, options in enumerate(arms):
        write_run(tmp_path / f"arm{k}", 0.5, 0.01, sampling=sampling(**options))
    runs = load(tmp_path)
    figure = plot_study(build_table(runs), runs)
    figure.canvas.draw()
    labels = figure.axes[0].get_xticklabels()
    assert len(labels) == 6
    boxes = sorted((label.get_window_extent() for label in labels), key=lambda box: box.x0)
    assert all(left.x1 < right.x0 for left, right in itertools.pairwise(boxes))


def test_study_plot_puts_at_most_two_benchmarks_side_by_side(tmp_path: Path) -> None:
    """Three benchmarks: two side by side, the third below the first (its accuracies over its curves), the empty
    place beside it hidden; the figure is two columns wide, not three."""
    from lightning_episodes.analysis.plots import COLUMNS_PER_ROW, plot_study

    assert COLUMNS_PER_ROW == 2
    for dataset in ("glyphs", "glyphs-hard", "glyphs-100"):
        write_run(tmp_path / dataset / "base", 0.55, 0.01, [weighting("baseline")], dataset=dataset)
        write_run(tmp_path / dataset / "uniform", 0.50, 0.01, sampling=sampling(target="uniform"), dataset=dataset)
    runs = load(tmp_path)
    table = build_table(runs)
    assert len(table.columns) == 3
    figure = plot_study(table, runs)
    assert figure.get_size_inches() == pytest.approx((2 * 5.0, 2 * 7.0))
    grid = [[figure.axes[2 * row + i] for i in range(2)] for row in range(4)]  # subplots' row-major order, 4 x 2
    titles = [[ax.get_title() for ax in row] for row in grid]
    labels = [column.label for column in table.columns]
    assert titles[0] == labels[:2]
    assert titles[2][0] == labels[2]
    assert [ax.get_ylabel() for ax in grid[3]][0] == "validation accuracy (%)"
    assert [ax.get_visible() for row in grid for ax in row] == [True] * 4 + [True, False, True, False]


def test_a_class_path_backbone_is_named_by_its_class(tmp_path: Path) -> None:
    resnet = {"class_path": "torchvision.models.ResNet", "init_args": {"layers": [2, 2, 2, 2]}}
    path = write_run(tmp_path / "resnet", 0.5, 0.01, [weighting("baseline")], hparams={"backbone": resnet})
    assert read_result(path).column.backbone == "ResNet"

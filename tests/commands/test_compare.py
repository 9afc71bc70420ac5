"""`lightning-episodes compare` on a scenario laid out by scripts/run_scenario.py: its row is paired_difference of
the runs' per-episode test scores, which each run's test wrote (and which scoring its tested checkpoint gives, the
path for runs tested without them); missing or mismatched runs are named."""

from __future__ import annotations

import json
import math
import runpy
import shutil
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy import stats

from lightning_episodes.analysis import DifficultyTable, PairedDifference, paired_difference
from lightning_episodes.analysis.report import combine, format_cell, read_result
from lightning_episodes.cli import entry, run_tool
from lightning_episodes.evaluation import RESULTS_FILE, SCORES_FILE

ROOT = Path(__file__).resolve().parents[2]


TINY_DATA = {
    "seed_everything": 0,
    "data": {
        "class_path": "lightning_episodes.data.EpisodicDataModule",
        "init_args": {"dataset": "tiny", "image_size": 16, "channels": 1, "ways": 5, "shots": 2, "queries": 3,
                      "episodes_per_batch": 2, "eval_episodes_per_batch": 5, "val_episodes": 5, "test_episodes": 12,
                      "seed": 0},
    },
    "trainer": {"max_steps": 6, "val_check_interval": 3, "check_val_every_n_epoch": None, "log_every_n_steps": 1,
                "accelerator": "cpu", "devices": 1, "enable_progress_bar": False, "enable_model_summary": False},
}  # fmt: skip


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two seeds of baseline_online and uniform_online, laid out by scripts/run_scenario.py."""
    from lightning_episodes.cli import main

    root = tmp_path_factory.mktemp("compare")
    data = root / "tiny_5w2s.yaml"
    data.write_text(yaml.safe_dump(TINY_DATA))
    run_scenario = runpy.run_path(str(ROOT / "scripts" / "run_scenario.py"))["run_scenario"]
    run_scenario(data, ROOT / "configs/models/protonet_euclidean_conv4.yaml", root / "runs", main, schemes=["uniform"],
                 online=True, offline=False, seeds=[0, 1], extra=["--trainer.callbacks.warmup_steps=2"])  # fmt: skip
    scenario = root / "runs" / "tiny_5w2s__protonet_euclidean_conv4"
    WRITTEN_BY_TESTS.extend(sorted(scenario.rglob(SCORES_FILE)))  # before any compare could write one
    return scenario


#: the per-episode tables present right after the fits and their tests
WRITTEN_BY_TESTS: list[Path] = []


def _p(p: float) -> str:
    return "–" if math.isnan(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"


#: the columns of a row, in the order printed: over trainings first, then over test episodes only
TRAININGS, PER_SEED, EPISODES = "Over trainings (pp)", "Per-seed differences (pp)", "Over test episodes only (pp)"


def _rows(markdown: str, prefix: str = "| tiny") -> list[dict[str, str]]:
    """The table's rows whose scenario starts with ``prefix``, each by its column's heading, in the printed order."""
    lines = markdown.splitlines()
    header = next(line for line in lines if line.startswith("| Scenario |"))
    headings = [entry.strip() for entry in header.strip("|").split("|")]
    rows = [[entry.strip() for entry in line.strip("|").split("|")] for line in lines if line.startswith(prefix)]
    assert all(len(row) == len(headings) for row in rows), markdown
    return [dict(zip(headings, row, strict=True)) for row in rows]


def _row(markdown: str) -> dict[str, str]:
    (row,) = _rows(markdown)
    return row


@pytest.mark.slow
def test_compare_prints_the_paired_difference_of_the_cached_scores(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "paired.md"
    assert run_tool(["compare", str(scenario), "--markdown", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.read_text() == printed
    records = {arm: [next((scenario / f"seed{s}" / arm).rglob("test_results.json")) for s in (0, 1)]
               for arm in ("baseline_online", "uniform_online")}  # fmt: skip
    tables = {arm: [DifficultyTable.read(p.with_name(SCORES_FILE)) for p in paths] for arm, paths in records.items()}
    expected = paired_difference(tables["baseline_online"], tables["uniform_online"])
    assert isinstance(expected, PairedDifference)
    assert expected.seeds == (2, 2)
    assert expected.std > 0  # the weighting (after its 2-step warm-up) trained other models than plain sampling
    # over trainings first (the seed pairs' mean and t interval), then over test episodes only, then the arms
    assert list(_row(printed).items()) == [
        ("Scenario", "tiny, Conv-4, 5-way 2-shot"),
        ("Algorithm", "ProtoNet (Euclidean)"),
        (TRAININGS, f"{100 * (expected.seed_mean or 0):+.2f} ± {100 * (expected.seed_ci95 or 0):.2f} (2 seeds)"),
        ("p", _p(expected.seed_pvalue or 0.0)),
        (PER_SEED, ", ".join(f"seed{s} {100 * d:+.2f}" for s, d in zip((0, 1), expected.seed_differences or (),
                                                                         strict=True))),
        (EPISODES, f"{100 * expected.mean:+.2f} ± {100 * expected.ci95:.2f}"),
        ("p (test episodes)", _p(expected.pvalue)),
        # the scored episodes are the tested ones: each arm's cell is `report`'s, from the test records
        ("baseline_online", format_cell(combine([read_result(p) for p in records["baseline_online"]]))),
        ("uniform_online", format_cell(combine([read_result(p) for p in records["uniform_online"]]))),
        ("Episodes", "12"),
    ]  # fmt: skip
    for paths in records.values():
        for path in paths:  # each cached table is the run's test: as many episodes, the same mean accuracy
            scores, record = DifficultyTable.read(path.with_name(SCORES_FILE)), json.loads(path.read_text())
            assert len(scores) == record["episodes"]
            assert scores.accuracy.mean() == pytest.approx(record["accuracy"], abs=1e-6)


@pytest.mark.slow
def test_each_test_wrote_the_scores_that_scoring_its_checkpoint_gives(
    scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = sorted(scenario.glob("seed*/*_online"))
    assert len(runs) == 4
    assert sorted(path.relative_to(scenario).parts[:2] for path in WRITTEN_BY_TESTS) == [
        run.relative_to(scenario).parts for run in runs
    ]
    # scoring the tested (best) checkpoint again, as compare does for runs tested without a table, gives the same
    # episodes, difficulties and accuracies: the table is the test's, per episode
    copy = tmp_path / scenario.name
    shutil.copytree(scenario, copy)
    for table in copy.rglob(SCORES_FILE):
        table.unlink()
    assert run_tool(["compare", str(copy)]) == 0
    assert capsys.readouterr().err.count("[compare] scoring") == 4
    for written in WRITTEN_BY_TESTS:
        tested, scored = DifficultyTable.read(written), DifficultyTable.read(copy / written.relative_to(scenario))
        assert len(tested) == len(scored) == 12
        assert all(a.same_episode(b) for a, b in zip(tested, scored, strict=True))
        assert tested.accuracy.tolist() == scored.accuracy.tolist()
        assert tested.difficulty == pytest.approx(scored.difficulty, rel=1e-6, abs=1e-6)

    def fail(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("scored although the run's test wrote its table")

    monkeypatch.setattr("lightning_episodes.commands.compare.score_episodes", fail)
    assert run_tool(["compare", str(scenario)]) == 0


@pytest.mark.slow
def test_compare_reuses_the_cache_and_takes_fewer_episodes(
    scenario: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_tool(["compare", str(scenario)]) == 0  # fills the cache if the test above did not run
    capsys.readouterr()

    def fail(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("scored again although the cache holds the episodes")

    monkeypatch.setattr("lightning_episodes.commands.compare.score_episodes", fail)
    assert run_tool(["compare", str(scenario), "--episodes", "5"]) == 0
    assert _row(capsys.readouterr().out)["Episodes"] == "5"


@pytest.mark.slow
def test_compare_takes_the_seeds_it_is_given(scenario: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = {arm: read_result(next((scenario / "seed1" / arm).rglob("test_results.json")))
               for arm in ("baseline_online", "uniform_online")}  # fmt: skip
    assert run_tool(["compare", str(scenario), "--seeds", "[1]"]) == 0
    row = _row(capsys.readouterr().out)
    assert [row["baseline_online"], row["uniform_online"]] == [
        format_cell(combine([records["baseline_online"]])),
        format_cell(combine([records["uniform_online"]])),
    ]
    assert row[PER_SEED].startswith("seed1 ")
    assert "seed0" not in row[PER_SEED]
    # one seed pair: no interval over trainings, and the one over test episodes says it is the only one
    assert (row[TRAININGS], row["p"]) == ("– (1 seed: no interval over trainings)", "–")
    assert row[EPISODES].endswith(" (1 seed: the only interval)")
    assert run_tool(["compare", str(scenario), "--seeds", "[0,1]"]) == 0
    assert _row(capsys.readouterr().out)[PER_SEED].startswith("seed0 ")
    assert run_tool(["compare", str(scenario), "--seeds", "[1,7]"]) == 2
    assert f"missing seed folder {scenario / 'seed7'} (--seeds 1 7)" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_names_a_missing_run_or_seed_folder(scenario: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_tool(["compare", str(scenario), "--treatment", "easy_online"]) == 2
    assert f"missing run folder {scenario / 'seed0' / 'easy_online'}" in capsys.readouterr().err
    assert run_tool(["compare", str(scenario / "seed0")]) == 2
    assert f"no seed<N> folders in {scenario / 'seed0'}" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_names_the_seeds_that_have_both_arms(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partial = shutil.copytree(scenario, tmp_path / scenario.name)  # a campaign whose seed 1 is still training
    shutil.rmtree(partial / "seed1" / "uniform_online")
    assert run_tool(["compare", str(partial)]) == 2
    hint = "(the seeds with both arms tested: --seeds [0], or --seeds tested)"
    expected = f"missing run folder {partial / 'seed1' / 'uniform_online'} {hint}"
    assert expected in capsys.readouterr().err
    for record in (partial / "seed1" / "baseline_online").rglob(RESULTS_FILE):  # begun, not yet tested
        record.unlink()
    assert run_tool(["compare", str(partial)]) == 2
    assert hint in capsys.readouterr().err
    assert run_tool(["compare", str(partial), "--seeds", "[0]"]) == 0
    assert _row(capsys.readouterr().out)[PER_SEED].startswith("seed0 ")


@pytest.mark.slow
def test_compare_puts_several_treatments_beside_one_baseline_over_their_tested_seeds(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sampling study's table: one row per treatment, each over the seeds where it and the baseline were tested
    (``--seeds tested``); a scenario without the arm gets no row, said on stderr."""
    study = shutil.copytree(scenario, tmp_path / scenario.name)
    shutil.copytree(study / "seed0" / "uniform_online", study / "seed0" / "another_arm")  # tested at seed 0 only
    other = shutil.copytree(scenario, tmp_path / "other" / scenario.name)  # a cell without the new arm
    arms = ["uniform_online", "another_arm"]
    assert run_tool(["compare", str(study), "--treatment", *arms]) == 2  # every seed folder, each required
    assert "--seeds [0], or --seeds tested)" in capsys.readouterr().err
    assert run_tool(["compare", str(study), str(other), "--seeds", "tested", "--treatment", *arms]) == 0
    out, err = capsys.readouterr()
    assert f"[compare] no row: {other}: no seed<N> folder holds both baseline_online and another_arm tested" in err
    assert out.startswith("| Scenario | Algorithm | Treatment | Over trainings (pp) | p | Per-seed differences (pp) |")
    assert "| p (test episodes) | baseline_online | treatment | Episodes |" in out
    rows = _rows(out)
    assert [row["Treatment"] for row in rows] == ["uniform_online", "another_arm", "uniform_online"]
    tables = {(arm, s): DifficultyTable.read(next((scenario / f"seed{s}" / arm).rglob(SCORES_FILE)))
              for arm in ("baseline_online", "uniform_online") for s in (0, 1)}  # fmt: skip
    both = paired_difference(
        [tables["baseline_online", s] for s in (0, 1)], [tables["uniform_online", s] for s in (0, 1)]
    )
    seed0 = paired_difference([tables["baseline_online", 0]], [tables["uniform_online", 0]])
    assert rows[0][EPISODES] == rows[2][EPISODES] == f"{100 * both.mean:+.2f} ± {100 * both.ci95:.2f}"
    assert rows[0][TRAININGS] == f"{100 * (both.seed_mean or 0):+.2f} ± {100 * (both.seed_ci95 or 0):.2f} (2 seeds)"
    # the arm's one seed pair
    assert rows[1][EPISODES] == f"{100 * seed0.mean:+.2f} ± {100 * seed0.ci95:.2f} (1 seed: the only interval)"
    assert (rows[1][PER_SEED], rows[1][TRAININGS]) == (f"seed0 {100 * seed0.mean:+.2f}",
                                                       "– (1 seed: no interval over trainings)")  # fmt: skip
    assert run_tool(["compare", str(other), "--seeds", "tested", "--treatment", "another_arm"]) == 2
    assert "error: no scenario holds baseline_online and another_arm tested" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_tested_seeds_need_not_start_at_seed_0(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An arm tested at seed 1 alone is paired at seed 1 (the seeds kept are not the first ones)."""
    study = shutil.copytree(scenario, tmp_path / scenario.name)
    shutil.rmtree(study / "seed0" / "uniform_online")
    assert run_tool(["compare", str(study), "--seeds", "tested"]) == 0
    row = _row(capsys.readouterr().out)
    tables = [DifficultyTable.read(next((scenario / "seed1" / arm).rglob(SCORES_FILE)))
              for arm in ("baseline_online", "uniform_online")]  # fmt: skip
    seed1 = paired_difference([tables[0]], [tables[1]])
    assert row[PER_SEED] == f"seed1 {100 * seed1.mean:+.2f}"


def test_compare_refuses_the_baseline_as_a_treatment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert entry(["compare", str(tmp_path), "--treatment", "uniform_online", "baseline_online"]) == 2
    assert "--treatment baseline_online is the baseline (--baseline baseline_online)" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_checks_the_cached_scores_against_the_test(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_tool(["compare", str(scenario)]) == 0  # fills the cache if the tests above did not run
    capsys.readouterr()
    copy = tmp_path / scenario.name
    shutil.copytree(scenario, copy)
    # a cache whose accuracies are not the test's is used, with a warning
    cache = next((copy / "seed0" / "baseline_online").rglob(SCORES_FILE))
    scores = DifficultyTable.read(cache)
    first = scores.records[0]
    DifficultyTable((replace(first, accuracy=1 - (first.accuracy or 0)), *scores.records[1:])).write(cache)
    with pytest.warns(UserWarning, match="the scored accuracy .* differs from the tested"):
        assert run_tool(["compare", str(copy)]) == 0
    # a cache of other episodes is refused
    cache = next((copy / "seed1" / "uniform_online").rglob(SCORES_FILE))
    scores = DifficultyTable.read(cache)
    first = scores.records[0]
    DifficultyTable((replace(first, classes=first.classes[::-1]), *scores.records[1:])).write(cache)
    with pytest.warns(UserWarning, match="differs from the tested"):  # seed0's cache, as above
        assert run_tool(["compare", str(copy)]) == 2
    error = capsys.readouterr().err
    assert f"{copy} (seed0, seed1): treatment[1] and baseline[0] do not score the same episodes" in error
    assert "episode id 0 is a different episode" in error


def test_compare_names_a_run_without_test_record_or_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "seed0" / "baseline_online"
    (run / "cross_domain" / "cub200").mkdir(parents=True)
    (run / "cross_domain" / "cub200" / "test_results.json").write_text("{}")  # another dataset's test: not this one
    assert run_tool(["compare", str(tmp_path)]) == 2
    assert f"{run} holds no test_results.json" in capsys.readouterr().err
    (run / "test_results.json").write_text(json.dumps({"accuracy": 0.5, "ci95": 0.1, "episodes": 10}))
    with pytest.warns(UserWarning, match="no config.yaml beside it, so its sampling scheme is unknown"):
        assert run_tool(["compare", str(tmp_path)]) == 2
    assert f"no checkpoints/best-*.ckpt beside {run / 'test_results.json'}" in capsys.readouterr().err


def test_compare_rejects_a_non_positive_episode_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert entry(["compare", str(tmp_path), "--episodes", "0"]) == 2
    assert "lightning-episodes compare: error: --episodes must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_refuses_arms_trained_under_different_protocols(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / scenario.name
    shutil.copytree(scenario, copy)
    config_path = next((copy / "seed0" / "uniform_online").rglob("config.yaml"))
    config = yaml.safe_load(config_path.read_text())
    config["model"]["init_args"]["lr_scheduler"] = {"class_path": "torch.optim.lr_scheduler.StepLR",
                                                    "init_args": {"step_size": 3}}  # fmt: skip
    config_path.write_text(yaml.safe_dump(config))
    assert run_tool(["compare", str(copy)]) == 2
    error = capsys.readouterr().err
    assert f"{copy} mixes training protocols" in error
    assert "(lr_scheduler=none)" in error
    assert "(lr_scheduler=step)" in error


@pytest.mark.slow
def test_compare_tells_apart_scenarios_of_one_benchmark_trained_differently(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two scenario folders of one benchmark, one trained with a step schedule (every run's config says so): each
    row's label names its schedule, as report's columns do; alone, a scenario's label names nothing."""
    constant, step = tmp_path / "constant" / scenario.name, tmp_path / "step" / scenario.name
    shutil.copytree(scenario, constant)
    shutil.copytree(scenario, step)
    for config_path in step.rglob("config.yaml"):
        config = yaml.safe_load(config_path.read_text())
        config["model"]["init_args"]["lr_scheduler"] = {"class_path": "torch.optim.lr_scheduler.StepLR",
                                                        "init_args": {"step_size": 3}}  # fmt: skip
        config_path.write_text(yaml.safe_dump(config))
    assert run_tool(["compare", str(constant), str(step)]) == 0
    rows = _rows(capsys.readouterr().out)
    labels = [row.pop("Scenario") for row in rows]
    assert [label.split(" [", 1)[1] for label in labels] == ["lr_scheduler=none]", "lr_scheduler=step]"]
    assert rows[0] == rows[1], "the same scores: only the label differs"
    assert run_tool(["compare", str(step)]) == 0
    assert "[" not in _row(capsys.readouterr().out)["Scenario"]


def _set_optimizer(scenario: Path, lr: float) -> None:
    """Every run in ``scenario`` as if trained at Adam ``lr`` (its config.yaml: the protocol's source)."""
    for config_path in scenario.rglob("config.yaml"):
        config = yaml.safe_load(config_path.read_text())
        config["model"]["init_args"]["optimizer"] = {"class_path": "torch.optim.Adam", "init_args": {"lr": lr}}
        config_path.write_text(yaml.safe_dump(config))


@pytest.mark.slow
def test_compare_pairs_a_baseline_from_another_scenario_differing_only_where_named(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--baseline-from``: the baseline arm's runs come from another scenario folder (the same cell at another
    learning rate), paired seed by seed on the shared test episodes; the arms' protocols may differ only in the
    settings ``--differing`` names, and the row says how they differ."""
    at_lr = shutil.copytree(scenario, tmp_path / "lr" / scenario.name)
    _set_optimizer(at_lr, 7e-4)
    scenario_copy = shutil.copytree(scenario, tmp_path / "base" / scenario.name)
    _set_optimizer(scenario_copy, 1e-3)
    command = ["compare", str(at_lr), "--baseline-from", str(scenario_copy), "--treatment", "uniform_online"]
    assert run_tool(command) == 2
    error = capsys.readouterr().err
    baseline_record = next((scenario_copy / "seed0" / "baseline_online").rglob(RESULTS_FILE))
    assert f"{at_lr} mixes training protocols: {baseline_record} (optimizer=adam(lr=0.001)), " in error
    assert "(optimizer=adam(lr=0.0007))" in error
    assert error.rstrip().endswith("to pair them anyway, name what differs: --differing model.optimizer.lr")

    assert run_tool([*command, "--differing", "[model.optimizer.lr]"]) == 0
    out = capsys.readouterr().out
    assert "| baseline baseline_online | treatment uniform_online |" in out
    row = _row(out)
    assert (
        row["Algorithm"]
        == "ProtoNet (Euclidean); treatment optimizer=adam(lr=0.0007), baseline optimizer=adam(lr=0.001)"
    )
    tables = {arm: [DifficultyTable.read(next((scenario / f"seed{s}" / arm).rglob(SCORES_FILE))) for s in (0, 1)]
              for arm in ("baseline_online", "uniform_online")}  # fmt: skip
    expected = paired_difference(tables["baseline_online"], tables["uniform_online"])
    assert row[EPISODES] == f"{100 * expected.mean:+.2f} ± {100 * expected.ci95:.2f}"  # the scenario's scores
    assert row[PER_SEED] == ", ".join(
        f"seed{s} {100 * d:+.2f}" for s, d in zip((0, 1), expected.seed_differences or (), strict=True)
    )
    # a whole class names all of its arguments; one arm against itself in another folder is allowed
    assert run_tool([*command[:-1], "baseline_online", "--differing", "[model.optimizer]"]) == 0
    row = _row(capsys.readouterr().out)
    assert (row[TRAININGS], row["p"], row[EPISODES]) == ("+0.00 ± 0.00 (2 seeds)", "–", "+0.00 ± 0.00")


@pytest.mark.slow
def test_compare_differing_frees_only_the_named_settings_between_the_arms(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at_lr = shutil.copytree(scenario, tmp_path / "lr" / scenario.name)
    _set_optimizer(at_lr, 7e-4)
    for config_path in at_lr.rglob("config.yaml"):  # and another schedule: not named, still refused
        config = yaml.safe_load(config_path.read_text())
        config["model"]["init_args"]["lr_scheduler"] = {"class_path": "torch.optim.lr_scheduler.StepLR",
                                                        "init_args": {"step_size": 3}}  # fmt: skip
        config_path.write_text(yaml.safe_dump(config))
    base = shutil.copytree(scenario, tmp_path / "base" / scenario.name)
    _set_optimizer(base, 1e-3)
    command = ["compare", str(at_lr), "--baseline-from", str(base), "--differing", "[model.optimizer.lr]"]
    assert run_tool(command) == 2
    assert capsys.readouterr().err.rstrip().endswith("name what differs: --differing model.lr_scheduler")
    # within an arm, the runs must still share one protocol, whatever --differing says
    for config_path in (base / "seed1" / "baseline_online").rglob("config.yaml"):
        config = yaml.safe_load(config_path.read_text())
        config["model"]["init_args"]["optimizer"]["init_args"]["lr"] = 5e-4
        config_path.write_text(yaml.safe_dump(config))
    assert run_tool(["compare", str(base), "--differing", "[model.optimizer.lr]"]) == 2
    error = capsys.readouterr().err
    assert f"{base} mixes training protocols" in error
    assert "--differing" not in error
    assert run_tool(["compare", str(scenario), "--differing", "[model.optimiser.lr]"]) == 2
    assert "--differing model.optimiser.lr: no setting of the runs' training protocols" in capsys.readouterr().err


def test_compare_refuses_an_arm_paired_with_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "seed0").mkdir()
    command = ["compare", str(tmp_path), "--treatment", "baseline_online", "--baseline-from", str(tmp_path)]
    assert entry(command) == 2
    assert f"--treatment baseline_online is the baseline (--baseline baseline_online of {tmp_path})" in (
        capsys.readouterr().err
    )


def _hand_run(run: Path, accuracies: list[float], target: str, **environment: str) -> Path:
    """A run folder as its test leaves it, written by hand: its record (whose ``sampling`` field names its scheme,
    so it needs no config.yaml) and its per-episode scores, one 2-way 1-shot episode per accuracy."""
    run.mkdir(parents=True)
    n = len(accuracies)
    scores = DifficultyTable.from_arrays(range(n), [[0, 1]] * n, [[[0], [1]]] * n, [[[2], [3]]] * n, [0.5] * n,
                                         accuracies)  # fmt: skip
    scores.write(run / SCORES_FILE)
    record = {"algorithm": "ProtoNet", "accuracy": sum(accuracies) / n, "ci95": 0.1, "episodes": n,
              "hparams": {"backbone": "conv4", "distance": "euclidean"},
              "data": {"dataset": "glyphs", "ways": 2, "shots": 1}, "sampling": {"target": target},
              **({"environment": environment} if environment else {})}  # fmt: skip
    (run / RESULTS_FILE).write_text(json.dumps(record))
    return run / RESULTS_FILE


#: each hand-written arm's scheme
TARGETS = {"baseline_online": "baseline", "uniform_online": "uniform", "easy_online": "easy"}


def _hand_scenario(root: Path, seeds: int, arms: tuple[str, ...] = ("baseline_online", "uniform_online")) -> Path:
    """``seeds`` seed folders of ``arms``, each tested on the same 6 episodes with accuracies of its own."""
    for seed in range(seeds):
        for i, arm in enumerate(arms):
            accuracies = [float((seed + i + e) % 3 == 0) for e in range(6)]
            _hand_run(root / f"seed{seed}" / arm, accuracies, TARGETS[arm])
    return root


#: a record cut short after its first line: what gave the users' `Expecting value: line 2 column 1 (char 32)`
CUT_SHORT = '{"accuracy": 0.5, "episodes": [\n'


def _unreadable_scenario(tmp_path: Path) -> tuple[Path, list[tuple[Path, str]]]:
    """Four seeds of three arms; seed 0's baseline record cut short, seed 1's uniform one corrupt, seed 2's empty."""
    scenario = _hand_scenario(tmp_path / "tiny", 4, ("baseline_online", "uniform_online", "easy_online"))
    cases = [
        (scenario / "seed0/baseline_online" / RESULTS_FILE, "corrupt"),
        (scenario / "seed1/uniform_online" / RESULTS_FILE, "corrupt"),
        (scenario / "seed2/uniform_online" / RESULTS_FILE, "empty"),
    ]
    for record, how in cases:
        record.write_text(CUT_SHORT if how == "corrupt" else "")
    reasons = {
        "corrupt": "is not valid JSON: Expecting value: line 2 column 1 (char 32)",
        "empty": "is empty (0 bytes)",
    }
    return scenario, [(record, reasons[how]) for record, how in cases]


def test_compare_names_every_unreadable_record_and_stops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The users' report: a corrupt or empty record was `error: Expecting value: line 2 column 1 (char 32)`, naming no
    file, and only the first one. Every one is named, each once (the baseline's is both rows'), in one line."""
    scenario, cases = _unreadable_scenario(tmp_path)
    markdown = tmp_path / "compare.md"
    command = ["compare", str(scenario), "--treatment", "uniform_online", "easy_online", "--markdown", str(markdown)]
    assert entry(command) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert not markdown.exists()
    assert err.splitlines() == [
        f"lightning-episodes compare: error: {record} {reason} (--skip-unreadable leaves it out)"
        for record, reason in cases
    ]


def test_compare_skip_unreadable_leaves_their_seeds_out_and_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, cases = _unreadable_scenario(tmp_path)
    markdown = tmp_path / "compare.md"
    command = ["compare", str(scenario), "--treatment", "uniform_online", "easy_online", "--markdown", str(markdown)]
    assert entry([*command, "--skip-unreadable"]) == 0
    printed = capsys.readouterr().out
    assert markdown.read_text() == printed
    rows = _rows(printed, "| Gly")
    # uniform is paired at seed 3 alone (seed 0's baseline, seeds 1 and 2 its own records are unreadable); easy at
    # seeds 1-3, its baseline's
    assert [row["Treatment"] for row in rows] == ["uniform_online", "easy_online"]
    assert [[part.split()[0] for part in row[PER_SEED].split(", ")] for row in rows] == [
        ["seed3"],
        ["seed1", "seed2", "seed3"],
    ]
    tables = {(arm, s): DifficultyTable.read(scenario / f"seed{s}" / arm / SCORES_FILE)
              for arm in TARGETS for s in range(4)}  # fmt: skip
    easy = paired_difference([tables["baseline_online", s] for s in (1, 2, 3)],
                             [tables["easy_online", s] for s in (1, 2, 3)])  # fmt: skip
    assert rows[1][EPISODES] == f"{100 * easy.mean:+.2f} ± {100 * easy.ci95:.2f}"
    note = printed.split("Left out of this table (--skip-unreadable): 3 test records that cannot be read.\n")[1]
    assert note.splitlines() == [f"- {record} {reason}" for record, reason in cases]


def test_compare_refuses_runs_of_different_precision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """From the record's environment (what the Trainer ran), else the config's trainer.precision (short names in
    full); a record with neither, as an older one, is 32-true."""
    scenario = _hand_scenario(tmp_path / "tiny", 1)
    baseline, uniform = (scenario / "seed0" / arm / RESULTS_FILE for arm in ("baseline_online", "uniform_online"))
    record = json.loads(baseline.read_text())
    baseline.write_text(json.dumps(record | {"environment": {"precision": "bf16-mixed"}}))
    assert entry(["compare", str(scenario)]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert line == (
        f"lightning-episodes compare: error: {scenario} mixes training protocols: {baseline} (precision=bf16-mixed), "
        f"{uniform} (precision=32-true); to pair them anyway, name what differs: --differing trainer.precision"
    )
    # saved configs: `precision: null` (Lightning's default), 32 and 32-true are one precision; bf16 is bf16-mixed
    baseline.write_text(json.dumps(record))
    for run, precision in ((baseline, None), (uniform, 32)):
        (run.with_name("config.yaml")).write_text(yaml.safe_dump({"trainer": {"precision": precision}}))
    assert entry(["compare", str(scenario)]) == 0
    capsys.readouterr()
    uniform.with_name("config.yaml").write_text(yaml.safe_dump({"trainer": {"precision": "bf16"}}))
    assert entry(["compare", str(scenario)]) == 2
    assert f"{baseline} (precision=32-true), {uniform} (precision=bf16-mixed)" in capsys.readouterr().err


XEON = {"cpu": "Intel(R) Xeon(R) Gold 6430", "cpu_flags": "avx2 avx512f amx_tile", "accelerator": "cpu"}


@pytest.mark.parametrize(
    ("theirs", "named"),
    [
        (XEON, None),
        ({"cpu": XEON["cpu"]}, None),  # an older record, without flags: compared on what both name
        ({**XEON, "cpu_flags": "avx2"}, "Intel(R) Xeon(R) Gold 6430 [avx2] (cpu)"),
        ({**XEON, "cpu": "AMD EPYC 9654"}, "AMD EPYC 9654 [avx2 avx512f amx_tile] (cpu)"),
        (
            {**XEON, "accelerator": "cuda", "device": "NVIDIA H200"},
            f"{XEON['cpu']} [{XEON['cpu_flags']}] (cuda NVIDIA H200)",
        ),
    ],
)
def test_compare_warns_when_the_arms_ran_on_different_processors(
    theirs: dict[str, str], named: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = _hand_scenario(tmp_path / "tiny", 1)
    for arm, environment in (("baseline_online", XEON), ("uniform_online", theirs)):
        path = scenario / "seed0" / arm / RESULTS_FILE
        path.write_text(json.dumps(json.loads(path.read_text()) | {"environment": environment}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert entry(["compare", str(scenario)]) == 0  # a warning, not an error: the row is printed
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("| Glyphs, Conv-4, 2-way")]
    messages = [str(w.message) for w in caught if "processors" in str(w.message)]
    if named is None:
        assert messages == []
        return
    baseline, uniform = (scenario / "seed0" / arm / RESULTS_FILE for arm in ("baseline_online", "uniform_online"))
    assert messages == [
        f"{scenario}: a seed pair's runs were made on different processors: {baseline} on Intel(R) Xeon(R) Gold 6430 "
        f"[avx2 avx512f amx_tile] (cpu), {uniform} on {named} (a run rounds differently on each)"
    ]


def test_compare_takes_seeds_made_on_different_processors_when_each_pair_shares_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seed 0's pair on a Xeon, seed 1's on an EPYC: another processor is another training, no warning."""
    scenario = _hand_scenario(tmp_path / "tiny", 2)
    for seed, environment in ((0, XEON), (1, {**XEON, "cpu": "AMD EPYC 9654"})):
        for arm in ("baseline_online", "uniform_online"):
            path = scenario / f"seed{seed}" / arm / RESULTS_FILE
            path.write_text(json.dumps(json.loads(path.read_text()) | {"environment": environment}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert entry(["compare", str(scenario)]) == 0
    assert not [w for w in caught if "processors" in str(w.message)]
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("| Glyphs, Conv-4, 2-way")]


# -- over trainings first; a family correction; the forest plot ----------------------------------------------------
def _study(root: Path, accuracies: dict[str, list[list[float]]]) -> Path:
    """A scenario written by hand: ``accuracies[arm][seed]`` are the arm's per-episode test accuracies at that seed
    (an arm not in :data:`TARGETS` samples towards uniform, as the placebo and the scale-only arms do)."""
    for arm, seeds in accuracies.items():
        for seed, scores in enumerate(seeds):
            _hand_run(root / f"seed{seed}" / arm, scores, {**TARGETS, "hard_online": "hard"}.get(arm, "uniform"))
    return root


def _random_study(root: Path, seeds: dict[str, int], shifts: dict[str, float], episodes: int = 40) -> Path:
    """Each arm's accuracies (fifths, as of 5 queries) at each of its seeds: the baseline's plus its ``shift`` and noise
    of its own per seed and episode."""
    rng = np.random.default_rng(7)
    base = [rng.integers(0, 6, size=episodes) / 5 for _ in range(max(seeds.values()))]
    accuracies = {
        arm: [np.clip(base[s] + shifts.get(arm, 0.0) + rng.integers(-1, 2, size=episodes) / 5, 0, 1).tolist()
              for s in range(k)]
        for arm, k in seeds.items()
    }  # fmt: skip
    return _study(root, accuracies)


def _accuracies(scenario: Path, arm: str) -> np.ndarray:
    """``[seeds, episodes]`` accuracies of an arm, read back."""
    seeds = sorted(scenario.glob(f"seed*/{arm}/{SCORES_FILE}"), key=lambda p: int(p.parts[-3][4:]))
    return np.stack([DifficultyTable.read(path).accuracy for path in seeds])


def test_compare_leads_with_the_interval_over_trainings_as_scipy_computes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 57: the per-episode p ("< 0.001") came first, beside an across-seed p of 0.22. Now the first numbers of
    a row of seeds are the seed pairs' mean difference, its t interval with k − 1 degrees of freedom and the one-sample
    t-test's p (scipy's), and the paired per-episode numbers come after, in a column saying they cover test episodes
    only (scipy's paired t-test on the arms' seed means)."""
    scenario = _random_study(tmp_path / "tiny", {"baseline_online": 3, "uniform_online": 3}, {"uniform_online": 0.05})
    assert entry(["compare", str(scenario)]) == 0
    out = capsys.readouterr().out
    (row,) = _rows(out, "| Glyphs")
    baseline, treatment = _accuracies(scenario, "baseline_online"), _accuracies(scenario, "uniform_online")
    per_seed = (treatment - baseline).mean(axis=1)
    across = stats.ttest_1samp(per_seed, 0.0)
    half_width = stats.t.ppf(0.975, 2) * stats.sem(per_seed)
    assert half_width == pytest.approx(4.302652729911275 * per_seed.std(ddof=1) / math.sqrt(3))  # t table, 2 df
    low, high = across.confidence_interval(0.95)
    assert (per_seed.mean() - half_width, per_seed.mean() + half_width) == pytest.approx((low, high), rel=1e-12)
    episodes = stats.ttest_rel(treatment.mean(axis=0), baseline.mean(axis=0))
    numbers = [key for key in row if key not in ("Scenario", "Algorithm")]
    assert numbers[:3] == [TRAININGS, "p", PER_SEED]
    assert numbers.index(EPISODES) > numbers.index(TRAININGS)
    assert row[TRAININGS] == f"{100 * per_seed.mean():+.2f} ± {100 * half_width:.2f} (3 seeds)"
    assert row["p"] == _p(float(across.pvalue))
    assert row[PER_SEED] == ", ".join(f"seed{s} {100 * d:+.2f}" for s, d in enumerate(per_seed))
    low, high = episodes.confidence_interval(0.95)
    assert row[EPISODES] == f"{100 * (low + high) / 2:+.2f} ± {100 * (high - low) / 2:.2f}"
    assert row["p (test episodes)"] == _p(float(episodes.pvalue))
    assert "covers only which test episodes were drawn" in out
    # the statistics themselves, to the last digit
    from lightning_episodes.commands.compare import compare_scenario

    _, comparison, _ = compare_scenario(scenario, "baseline_online", "uniform_online")
    assert comparison.interval == pytest.approx((per_seed.mean(), half_width), rel=1e-12)
    assert comparison.pvalue == pytest.approx(across.pvalue, rel=1e-10)
    assert comparison.difference.pvalue == pytest.approx(episodes.pvalue, rel=1e-10)


def test_compare_adjusts_each_cells_treatments_by_holm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--correction holm --family M``: the header names the family, its size per cell and which p it adjusts; the
    Holm column is :func:`holm` of the rows' p over trainings, or over test episodes (and said) for a row of one
    seed; each cell is a family of its own."""
    from lightning_episodes.analysis.comparison import holm

    seeds = {"baseline_online": 3, "uniform_online": 3, "easy_online": 3, "hard_online": 1}
    shifts = {"uniform_online": 0.06, "easy_online": 0.02, "hard_online": -0.03}
    cells = [_random_study(tmp_path / "study" / name, seeds, shifts) for name in ("cell_a", "cell_b")]
    arms = ["uniform_online", "easy_online", "hard_online"]
    command = ["compare", *map(str, cells), "--seeds", "tested", "--treatment", *arms]
    assert entry([*command, "--correction", "holm", "--family", "M"]) == 0
    out = capsys.readouterr().out
    header = out.split("\n\n")[0]
    assert header.startswith("Family M: Holm's step-down correction over the treatments of each cell: ")
    assert "m = 3 in cell_a, m = 3 in cell_b" in header  # relative to the study folder, never absolute
    assert str(tmp_path) not in header
    assert "p (Holm) adjusts each row's p over trainings" in header
    assert "in a row of one seed, its p over test episodes" in header
    rows = _rows(out, "| Glyphs")
    assert len(rows) == 6
    baseline = _accuracies(cells[0], "baseline_online")
    raw = []
    for arm in arms:
        treatment = _accuracies(cells[0], arm)
        if len(treatment) > 1:
            raw.append(float(stats.ttest_1samp((treatment - baseline).mean(axis=1), 0.0).pvalue))
        else:  # the arm's one seed: paired with the baseline's seed 0 over test episodes
            raw.append(float(stats.ttest_rel(treatment[0], baseline[0]).pvalue))
    adjusted = holm(raw)
    assert [row["p (Holm)"] for row in rows[:2]] == [_p(p) for p in adjusted[:2]]
    assert [row["p"] for row in rows[:3]] == [_p(raw[0]), _p(raw[1]), "–"]
    assert rows[2]["p (Holm)"] == f"{_p(adjusted[2])} (test episodes, raw {_p(raw[2])})"
    assert rows[2]["p (test episodes)"] == _p(raw[2])
    assert [row["p (Holm)"] for row in rows[3:]] == [row["p (Holm)"] for row in rows[:3]]  # the same scores
    # without a correction: no Holm column; a family's name alone says that its p are raw
    assert entry(command) == 0
    out = capsys.readouterr().out
    assert "p (Holm)" not in out
    assert not out.startswith("Family")
    assert entry([*command, "--family", "R"]) == 0
    assert capsys.readouterr().out.startswith("Family R: no correction for multiple comparisons")
    assert entry([*command, "--correction", "bonferroni"]) == 2
    assert "--correction" in capsys.readouterr().err


def test_compare_says_when_a_cell_corrects_over_fewer_treatments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = {"baseline_online": 2, "uniform_online": 2, "easy_online": 2}
    full = _random_study(tmp_path / "study" / "full", seeds, {})
    part = _random_study(tmp_path / "study" / "part", {"baseline_online": 2, "uniform_online": 2}, {})
    command = ["compare", str(full), str(part), "--seeds", "tested", "--treatment", "uniform_online", "easy_online"]
    assert entry([*command, "--correction", "holm"]) == 0
    out, err = capsys.readouterr()
    assert "no seed<N> folder holds both baseline_online and easy_online" in err
    assert out.startswith("Family: Holm's step-down correction over the treatments of each cell (of the 2 treatments "
                          "named, those with a row): m = 2 in full, m = 1 in part.")  # fmt: skip


def test_compare_draws_a_forest_plot_of_the_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--forest``: a PNG of the rows' intervals, over trainings where a row has seeds; its labels relative to the
    study folder; ``--markdown`` writes the printed table."""
    from PIL import Image

    seeds = {"baseline_online": 3, "uniform_online": 3, "easy_online": 1}
    cells = [_random_study(tmp_path / "study" / name, seeds, {"uniform_online": 0.05}) for name in ("a", "b")]
    forest, markdown = tmp_path / "out" / "forest.png", tmp_path / "out" / "compare.md"
    command = ["compare", *map(str, cells), "--seeds", "tested", "--treatment", "uniform_online", "easy_online"]
    assert entry([*command, "--forest", str(forest), "--markdown", str(markdown)]) == 0
    assert markdown.read_text() == capsys.readouterr().out
    assert forest.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert forest.stat().st_size > 10_000
    with Image.open(forest) as image:
        image.verify()
        assert min(image.size) > 300
    assert entry([*command, "--forest", str(tmp_path)]) == 2
    assert "--forest" in capsys.readouterr().err


def test_a_family_of_treatments_each_differing_in_a_setting_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    """The study's regulariser family: weight decay and label smoothing each differ from the baseline in one setting,
    which is no setting of the other's runs; one ``--differing`` names both, each row frees only its own, and a name
    that is a setting of no row is still refused."""
    cell = ROOT / "studies/scarce5/n60_regularisers/glyphs_100_5w5s__protonet_cosine_conv4"
    command = ["compare", str(cell), "--seeds", "[0]", "--treatment", "weight_decay", "label_smoothing"]
    assert run_tool([*command, "--differing", "[model.optimizer.weight_decay,model.label_smoothing]"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| Glyphs-100")]
    assert [row.split(" | ")[2] for row in rows] == ["weight_decay", "label_smoothing"]
    assert run_tool([*command, "--differing", "[model.optimizer.weight_decay]"]) == 2  # label smoothing not freed
    assert "name what differs: --differing model.label_smoothing" in capsys.readouterr().err
    typo = "[model.optimizer.weight_decay,model.label_smoothing,model.label_smothing]"
    assert run_tool([*command, "--differing", typo]) == 2
    assert "--differing model.label_smothing: no setting of the runs' training protocols" in capsys.readouterr().err


# -- contrasts between two treatment arms: one family with the treatments ------------------------------------------
#: per-episode accuracies (fifths) of three arms at seeds 0-2, chosen by hand: uniform − placebo is +8, +8, +4 points
#: per seed, a mean of 6.67 whose t statistic is 5 exactly (sd 2.31, √3 · 6.67 / 2.31 = 5)
HAND = {
    "baseline_online": [[0.4, 0.4, 0.6, 0.4, 0.2], [0.6, 0.4, 0.4, 0.6, 0.4], [0.4, 0.6, 0.4, 0.4, 0.6]],
    "uniform_online_placebo": [[0.6, 0.4, 0.8, 0.6, 0.4], [0.4, 0.6, 0.6, 0.8, 0.6], [0.8, 0.6, 0.4, 0.6, 0.6]],
    "uniform_online": [[0.8, 0.4, 0.8, 0.6, 0.6], [0.6, 0.6, 0.8, 0.8, 0.6], [0.8, 0.8, 0.4, 0.6, 0.6]],
}


def _cell(scenario: Path, arm: str) -> str:
    """An arm's accuracy column: its seeds' scores combined as `report` combines test records."""
    from lightning_episodes.commands.compare import run_scores

    records = sorted(scenario.glob(f"seed*/{arm}/{RESULTS_FILE}"))
    return format_cell(combine([run_scores(record)[1] for record in records]))


def test_a_contrast_row_is_one_arm_minus_another_as_scipy_computes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--contrast uniform_online:uniform_online_placebo``: a row of uniform − placebo paired by seed, beside the
    treatment's row against the baseline; the rows' baselines differ, so each row names both of its arms and the
    accuracy columns are headed baseline and treatment."""
    scenario = _study(tmp_path / "tiny", HAND)
    contrast = "uniform_online:uniform_online_placebo"
    assert entry(["compare", str(scenario), "--treatment", "uniform_online", "--contrast", contrast]) == 0
    out = capsys.readouterr().out
    assert "| Scenario | Algorithm | Treatment − baseline | Over trainings (pp) |" in out
    assert "| p (test episodes) | baseline | treatment | Episodes |" in out
    treatment, row = _rows(out, "| Glyphs")
    assert treatment["Treatment − baseline"] == "uniform_online − baseline_online"
    assert row["Treatment − baseline"] == "uniform_online − uniform_online_placebo"
    uniform, placebo = np.array(HAND["uniform_online"]), np.array(HAND["uniform_online_placebo"])
    per_seed = (uniform - placebo).mean(axis=1)
    assert per_seed == pytest.approx([0.08, 0.08, 0.04])
    across = stats.ttest_1samp(per_seed, 0.0)
    assert float(across.statistic) == pytest.approx(5.0)
    half_width = stats.t.ppf(0.975, 2) * per_seed.std(ddof=1) / math.sqrt(3)
    assert (100 * per_seed.mean(), 100 * half_width) == pytest.approx((6.6667, 5.7369), abs=1e-4)  # by hand
    assert f"{100 * per_seed.mean():+.2f} ± {100 * half_width:.2f} (3 seeds)" == "+6.67 ± 5.74 (3 seeds)"
    assert row[TRAININGS] == "+6.67 ± 5.74 (3 seeds)"
    assert row["p"] == _p(float(across.pvalue)) == "0.038"
    assert row[PER_SEED] == "seed0 +8.00, seed1 +8.00, seed2 +4.00"
    episodes = stats.ttest_rel(uniform.mean(axis=0), placebo.mean(axis=0))
    low, high = episodes.confidence_interval(0.95)
    assert row[EPISODES] == f"{100 * (low + high) / 2:+.2f} ± {100 * (high - low) / 2:.2f}"
    assert row["p (test episodes)"] == _p(float(episodes.pvalue))
    assert (row["baseline"], row["treatment"]) == (_cell(scenario, "uniform_online_placebo"),
                                                   _cell(scenario, "uniform_online"))  # fmt: skip
    assert (treatment["baseline"], treatment["treatment"]) == (_cell(scenario, "baseline_online"),
                                                               _cell(scenario, "uniform_online"))  # fmt: skip
    # the contrast's statistics, to the last digit
    from lightning_episodes.commands.compare import compare_scenario

    _, comparison, _ = compare_scenario(scenario, "uniform_online_placebo", "uniform_online")
    assert comparison.baseline == "uniform_online_placebo"
    assert comparison.interval == pytest.approx((per_seed.mean(), half_width), rel=1e-12)
    assert comparison.pvalue == pytest.approx(across.pvalue, rel=1e-10)
    # --contrast alone: its row only (no default uniform_online − baseline_online), laid out as the same pair named
    # by --baseline and --treatment, byte for byte, the baseline's runs not needed
    shutil.rmtree(scenario / "seed1" / "baseline_online")
    assert entry(["compare", str(scenario), "--contrast", contrast]) == 0
    alone = capsys.readouterr().out
    assert entry(["compare", str(scenario), "--baseline", "uniform_online_placebo"]) == 0
    assert alone == capsys.readouterr().out
    assert "| p (test episodes) | uniform_online_placebo | uniform_online | Episodes |" in alone
    assert _row(alone.replace("| Glyphs", "| tiny"))[TRAININGS] == row[TRAININGS]


def test_holm_adjusts_over_a_cells_treatments_and_contrasts_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--correction holm``: each cell's family is its rows, the treatments against the baseline and the contrasts
    (m = 5 here), adjusted by Holm's step-down procedure, computed here by hand from scipy's raw p (a row of one seed:
    its p over test episodes)."""
    seeds = {"baseline_online": 3, "uniform_online": 3, "easy_online": 3, "hard_online": 1}
    shifts = {"uniform_online": 0.08, "easy_online": 0.03, "hard_online": -0.04}
    cells = [_random_study(tmp_path / "study" / name, seeds, shifts) for name in ("cell_a", "cell_b")]
    command = ["compare", *map(str, cells), "--seeds", "tested", "--treatment", "uniform_online", "easy_online",
               "hard_online", "--contrast", "uniform_online:easy_online", "uniform_online:hard_online",
               "--correction", "holm", "--family", "M"]  # fmt: skip
    assert entry(command) == 0
    out = capsys.readouterr().out
    header = out.split("\n\n")[0]
    assert header.startswith(
        "Family M: Holm's step-down correction over the comparisons of each cell (each row its treatment − its "
        "baseline): m = 5 in cell_a, m = 5 in cell_b."
    )
    rows = _rows(out, "| Glyphs")
    pairs = [(arm, "baseline_online") for arm in ("uniform_online", "easy_online", "hard_online")]
    pairs += [("uniform_online", "easy_online"), ("uniform_online", "hard_online")]
    assert [row["Treatment − baseline"] for row in rows] == [f"{t} − {b}" for t, b in pairs] * 2
    raw = []
    for treatment, baseline in pairs:
        ours, theirs = _accuracies(cells[0], treatment), _accuracies(cells[0], baseline)
        k = min(len(ours), len(theirs))  # --seeds tested: the seeds both arms have
        if k > 1:
            raw.append(float(stats.ttest_1samp((ours[:k] - theirs[:k]).mean(axis=1), 0.0).pvalue))
        else:
            raw.append(float(stats.ttest_rel(ours[0], theirs[0]).pvalue))
    adjusted = _holm_by_hand(raw)  # m = 5
    assert adjusted != _holm_by_hand(raw[:3]) + raw[3:]
    assert [row["p"] for row in rows[:5]] == [_p(raw[0]), _p(raw[1]), "–", _p(raw[3]), "–"]
    assert [row["p (test episodes)"] for row in (rows[2], rows[4])] == [_p(raw[2]), _p(raw[4])]
    assert [row["p (Holm)"].split(" (")[0] for row in rows[:5]] == [_p(p) for p in adjusted]
    assert rows[4]["p (Holm)"] == f"{_p(adjusted[4])} (test episodes, raw {_p(raw[4])})"
    assert [row["p (Holm)"] for row in rows[5:]] == [row["p (Holm)"] for row in rows[:5]]  # the same scores
    # without the contrasts, the treatments alone are the family (m = 3): another adjustment
    assert entry([*command[: command.index("--contrast")], "--correction", "holm"]) == 0
    out = capsys.readouterr().out
    assert "m = 3 in cell_a, m = 3 in cell_b." in out
    alone = _rows(out, "| Glyphs")
    assert [row["p (Holm)"].split(" (")[0] for row in alone[:3]] == [_p(p) for p in _holm_by_hand(raw[:3])]


def _holm_by_hand(raw: list[float]) -> list[float]:
    """Holm's adjusted p: sort ascending, multiply the i-th smallest (from 0) by m − i, carry the running maximum,
    cap at 1."""
    m, adjusted, running = len(raw), [0.0] * len(raw), 0.0
    for i, index in enumerate(sorted(range(m), key=lambda j: raw[j])):
        running = max(running, min(1.0, (m - i) * raw[index]))
        adjusted[index] = running
    return adjusted


def test_the_table_without_contrasts_is_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--contrast`` the output is what it was before contrasts existed, byte for byte (this table was
    printed by that version): docs/hooks and the study's pages parse it."""
    from lightning_episodes.analysis.comparison import LEGEND

    scenario = _study(tmp_path / "tiny", {**{arm: HAND[arm] for arm in ("baseline_online", "uniform_online")},
                                          "easy_online": [HAND["uniform_online_placebo"][0]]})  # fmt: skip
    command = ["compare", str(scenario), "--seeds", "tested", "--treatment", "uniform_online", "easy_online"]
    assert entry([*command, "--correction", "holm", "--family", "M"]) == 0
    assert capsys.readouterr().out == (
        "Family M: Holm's step-down correction over the treatments of each cell: m = 2 in tiny. p (Holm) adjusts "
        "each row's p over trainings (the one-sample t-test of its seed pairs' differences), or, in a row of one "
        'seed, its p over test episodes (marked "test episodes", with that raw p), beside the raw p.\n\n'
        "| Scenario | Algorithm | Treatment | Over trainings (pp) | p | p (Holm) | Per-seed differences (pp) | "
        "Over test episodes only (pp) | p (test episodes) | baseline_online | treatment | Episodes |\n"
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|\n"
        "| Glyphs, Conv-4, 2-way 1-shot | ProtoNet (Euclidean) | uniform_online | +20.00 ± 9.94 (3 seeds) | 0.013 | "
        "0.026 | seed0 +24.00, seed1 +20.00, seed2 +16.00 | +20.00 ± 5.85 | < 0.001 | 45.33 ± 14.89 (sd 4.62, 3 seeds) "
        "| 65.33 ± 13.12 (sd 2.31, 3 seeds) | 5 |\n"
        "| Glyphs, Conv-4, 2-way 1-shot | ProtoNet (Euclidean) | easy_online | – (1 seed: no interval over trainings) "
        "| – | 0.026 (test episodes, raw 0.016) | seed0 +16.00 | +16.00 ± 11.11 (1 seed: the only interval) | 0.016 | "
        "40.00 ± 11.09 | 56.00 ± 13.12 | 5 |\n\n" + LEGEND + "\n"
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--contrast", "uniform_online"], "--contrast uniform_online: a contrast is TREATMENT:BASELINE, two run "
                                           "folders of the scenario joined by one ':' (e.g. "
                                           "uniform_online:uniform_online_placebo)"),
        (["--contrast", "a:b:c"], "--contrast a:b:c: a contrast is TREATMENT:BASELINE"),
        (["--contrast", ":uniform_online_placebo"], "--contrast :uniform_online_placebo: a contrast is"),
        (["--contrast", "uniform_online:"], "--contrast uniform_online:: a contrast is"),
        (["--contrast", "uniform_online:uniform_online"],
         "--contrast uniform_online:uniform_online: its treatment is its baseline; name two different arms"),
        (["--treatment", "uniform_online", "--contrast", "uniform_online:baseline_online"],
         "--contrast uniform_online:baseline_online is the row of --treatment uniform_online (against --baseline "
         "baseline_online): the family would count it twice"),
        (["--treatment", "uniform_online", "--contrast", "baseline_online:uniform_online"],
         "--contrast baseline_online:uniform_online is the row of --treatment uniform_online (against --baseline "
         "baseline_online) reversed: the family would count it twice"),
        (["--contrast", "a:b", "b:a"], "--contrast b:a is --contrast a:b reversed: the family would count it twice"),
        (["--contrast", "a:b", "--baseline-from", "elsewhere"],
         "--contrast a:b takes both arms from each scenario folder, --baseline-from the baseline from another: "
         "compare the contrasts in a command without --baseline-from"),
    ],
)  # fmt: skip
def test_compare_refuses_a_malformed_or_duplicate_contrast_in_one_line_before_reading(
    arguments: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the console script, as every usage error (the usage line, one line of error, the hint to --help),
    before any record is read (the folder holds none: reading it would fail with "no seed<N> folders")."""
    assert entry(["compare", str(tmp_path), *arguments]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert line.startswith(f"lightning-episodes compare: error: {message}")


def test_a_contrast_whose_arms_are_missing_is_a_missing_treatment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = _study(tmp_path / "tiny", HAND)
    shutil.rmtree(scenario / "seed2" / "uniform_online_placebo")
    command = ["compare", str(scenario), "--treatment", "uniform_online", "--contrast"]
    assert entry([*command, "uniform_online:uniform_online_placebo"]) == 2
    hint = "(the seeds with both arms tested: --seeds [0,1], or --seeds tested)"
    assert f"missing run folder {scenario / 'seed2' / 'uniform_online_placebo'} {hint}" in capsys.readouterr().err
    assert entry([*command, "uniform_online:uniform_online_placebo", "--seeds", "tested"]) == 0
    assert _rows(capsys.readouterr().out, "| Glyphs")[1][PER_SEED] == "seed0 +8.00, seed1 +8.00"
    assert entry([*command, "uniform_online:easy_online", "--seeds", "tested"]) == 0
    out, err = capsys.readouterr()
    assert f"[compare] no row: {scenario}: no seed<N> folder holds both easy_online and uniform_online tested" in err
    assert [row["Treatment − baseline"] for row in _rows(out, "| Glyphs")] == ["uniform_online − baseline_online"]
    assert entry(["compare", str(scenario), "--contrast", "uniform_online:easy_online", "--seeds", "tested"]) == 2
    assert "error: no scenario holds easy_online and uniform_online tested" in capsys.readouterr().err


def test_the_forest_plot_draws_the_contrasts_named_as_the_table_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image

    from lightning_episodes.analysis import forest

    drawn = []

    def plot_forest(*args: Any, **kwargs: Any) -> Any:
        figure, rows = real(*args, **kwargs)
        drawn.append((figure, rows))
        return figure, rows

    real = forest.plot_forest
    monkeypatch.setattr(forest, "plot_forest", plot_forest)
    scenario = _study(tmp_path / "tiny", HAND)
    out = tmp_path / "forest.png"
    command = ["compare", str(scenario), "--treatment", "uniform_online", "uniform_online_placebo", "--contrast",
               "uniform_online:uniform_online_placebo", "--forest", str(out)]  # fmt: skip
    assert entry(command) == 0
    table = _rows(capsys.readouterr().out, "| Glyphs")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as image:
        image.verify()
    ((figure, rows),) = drawn
    assert [row.label for row in rows] == [f"{entry['Treatment − baseline']} (3 trainings)" for entry in table]
    assert rows[2].label == "uniform_online − uniform_online_placebo (3 trainings)"
    assert rows[2].mean == pytest.approx(100 * 0.2 / 3)
    (ax,) = [ax for ax in figure.axes if ax.get_xlabel()]
    assert ax.get_xlabel() == "test accuracy, treatment − its baseline (percentage points)"
    assert [label.get_text() for label in ax.get_yticklabels()] == [row.label for row in rows]
    colours = [container[0].get_color() for container in ax.containers]
    assert len(set(colours)) == 3  # uniform_online against two baselines: two colours

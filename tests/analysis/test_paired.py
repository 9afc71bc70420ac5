"""The paired per-episode difference of two sampling schemes: hand-computed, against scipy, its properties, and
`lightning-episodes compare` end to end on a scenario folder of tiny runs."""

from __future__ import annotations

import json
import math
import runpy
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.loading import load_episodic_module
from lightning_episodes.analysis import DifficultyTable, EpisodeRecord, PairedDifference, paired_difference
from lightning_episodes.analysis.report import combine, format_cell, read_result
from lightning_episodes.analysis.scoring import checkpoint_datamodule, score_episodes
from lightning_episodes.cli import entry, run_tool
from lightning_episodes.commands.compare import SCORES_FILE
from tests.helpers import tiny_datamodule, tiny_trainer

ROOT = Path(__file__).resolve().parents[2]


def table(accuracies: Sequence[float | None], ids: Sequence[int] | None = None, data_seed: int = 0) -> DifficultyTable:
    """Episodes whose identity is a function of (data seed, id): equal ids of equal seeds are the same episode."""
    ids = range(len(accuracies)) if ids is None else ids
    records = (
        EpisodeRecord(i, (i + data_seed, i + 1), ((2 * i,), (2 * i + 1,)), ((3 * i,), (3 * i + 1,)), 1.0, accuracy)
        for i, accuracy in zip(ids, accuracies, strict=True)
    )
    return DifficultyTable(tuple(records))


def reversed_table(t: DifficultyTable) -> DifficultyTable:
    return DifficultyTable(tuple(reversed(t.records)))


# -- the statistics -------------------------------------------------------------------------------------------


def test_hand_computed_two_seeds_per_arm() -> None:
    baseline = [table([0.5, 0.4, 0.8, 0.6]), table([0.7, 0.6, 0.8, 0.4])]  # per-episode mean 0.6 0.5 0.8 0.5
    treatment = [table([0.8, 0.6, 0.8, 0.6]), table([0.6, 0.6, 1.0, 0.4])]  # per-episode mean 0.7 0.6 0.9 0.5
    # d = 0.1 0.1 0.1 0.0: mean 0.075, sd = sqrt((3 * 0.025^2 + 0.075^2) / 3) = 0.05, se = 0.025, t = 3
    result = paired_difference(baseline, [reversed_table(t) for t in treatment])  # aligned by id, not by row
    assert result.mean == pytest.approx(0.075, abs=1e-12)
    assert result.std == pytest.approx(0.05, abs=1e-12)
    assert result.statistic == pytest.approx(3.0, abs=1e-9)
    assert result.ci95 == pytest.approx(3.182446305284263 * 0.025, abs=1e-12)  # t_{0.975, 3}, from a t table
    # Student's t with 3 degrees of freedom in closed form: F(t) = 1/2 + (t / (√3 (1 + t²/3)) + atan(t / √3)) / π
    cdf = 0.5 + (3 / (math.sqrt(3) * 4) + math.atan(3 / math.sqrt(3))) / math.pi
    assert result.pvalue == pytest.approx(2 * (1 - cdf), abs=1e-12)
    assert (result.episodes, result.seeds) == (4, (2, 2))
    # seed pairs: (0.3 + 0.2 + 0 + 0) / 4 and (-0.1 + 0 + 0.2 + 0) / 4
    assert result.seed_differences == pytest.approx((0.125, 0.025), abs=1e-12)
    assert result.seed_sd == pytest.approx(0.1 / math.sqrt(2), abs=1e-12)


def test_one_seed_per_arm_equals_scipys_paired_t_test() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 16, size=300) / 15  # accuracies of 15 queries
    b = np.clip(a + rng.integers(-2, 4, size=300) / 15, 0, 1)
    result = paired_difference(table(a.tolist()), table(b.tolist()))
    reference = stats.ttest_rel(b, a)
    assert result.statistic == pytest.approx(reference.statistic, rel=1e-10)
    assert result.pvalue == pytest.approx(reference.pvalue, rel=1e-8)
    d = b - a
    half_width = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)  # the t interval by hand
    assert result.ci95 == pytest.approx(half_width, rel=1e-12)
    low, high = reference.confidence_interval(0.95)
    assert (result.mean - result.ci95, result.mean + result.ci95) == pytest.approx((low, high), rel=1e-10)
    assert result.seed_differences == pytest.approx((d.mean(),), rel=1e-12)
    assert result.seed_sd is None


def test_unequal_seed_counts_average_each_arm_and_pair_no_seeds() -> None:
    baseline = [table([0.2, 0.4, 0.6]), table([0.4, 0.4, 0.2]), table([0.6, 0.1, 0.4])]  # mean 0.4 0.3 0.4
    result = paired_difference(baseline, table([0.5, 0.5, 0.3]))
    assert result.mean == pytest.approx(np.mean([0.1, 0.2, -0.1]), abs=1e-12)
    assert result.seeds == (3, 1)
    assert result.seed_differences is None
    assert result.seed_sd is None


def test_identical_arms_have_no_difference_and_an_undefined_t() -> None:
    result = paired_difference(table([0.2, 0.4, 0.6]), table([0.2, 0.4, 0.6]))
    assert (result.mean, result.ci95, result.std) == (0.0, 0.0, 0.0)
    assert math.isnan(result.statistic)
    assert math.isnan(result.pvalue)


accuracy_lists = st.lists(st.integers(0, 15).map(lambda q: q / 15), min_size=3, max_size=30)


@st.composite
def arms(draw: Any) -> tuple[list[DifficultyTable], list[DifficultyTable]]:
    """Two arms of 1-3 seeds on the same n episodes."""
    n = draw(st.integers(3, 30))
    accuracies = st.lists(st.integers(0, 15).map(lambda q: q / 15), min_size=n, max_size=n)
    seeds = st.lists(accuracies, min_size=1, max_size=3)
    return [table(a) for a in draw(seeds)], [table(a) for a in draw(seeds)]


@settings(max_examples=50, deadline=None)
@given(arms(), st.floats(-1, 1))
def test_shifting_the_treatment_shifts_the_mean_and_leaves_the_interval(
    tables: tuple[list[DifficultyTable], list[DifficultyTable]], shift: float
) -> None:
    baseline, treatment = tables
    shifted = [table((t.accuracy + shift).tolist()) for t in treatment]
    before, after = paired_difference(baseline, treatment), paired_difference(baseline, shifted)
    assert after.mean == pytest.approx(before.mean + shift, abs=1e-9)
    assert after.ci95 == pytest.approx(before.ci95, abs=1e-9)
    assert after.std == pytest.approx(before.std, abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(arms())
def test_swapping_the_arms_negates_the_difference(tables: tuple[list[DifficultyTable], list[DifficultyTable]]) -> None:
    baseline, treatment = tables
    forward, backward = paired_difference(baseline, treatment), paired_difference(treatment, baseline)
    assert backward.mean == pytest.approx(-forward.mean, abs=1e-12)
    assert (backward.ci95, backward.std, backward.episodes) == pytest.approx(
        (forward.ci95, forward.std, forward.episodes)
    )
    assert backward.seeds == forward.seeds[::-1]
    if forward.seed_differences is not None:
        assert backward.seed_differences == pytest.approx([-d for d in forward.seed_differences], abs=1e-12)
        assert np.mean(forward.seed_differences) == pytest.approx(forward.mean, abs=1e-12)
    if forward.std > 0:
        assert backward.statistic == pytest.approx(-forward.statistic, rel=1e-9)
        assert backward.pvalue == pytest.approx(forward.pvalue, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(accuracy_lists, st.data())
def test_a_missing_episode_is_named(accuracies: list[float], data: Any) -> None:
    dropped = data.draw(st.integers(0, len(accuracies) - 1))
    ids = [i for i in range(len(accuracies)) if i != dropped]
    with pytest.raises(ValueError, match=rf"do not score the same episodes.*only in table_a \[{dropped}\]"):
        paired_difference(table(accuracies), table([accuracies[i] for i in ids], ids))


@pytest.mark.parametrize(
    ("baseline", "treatment", "message"),
    [
        ([table([0.1, 0.2, 0.3])], [table([0.1, 0.2, 0.3], data_seed=1)], r"treatment\[0\].*id 0 is a different"),
        ([table([0.1, 0.2]), table([0.1, 0.2, 0.3])], [table([0.1, 0.2])], r"baseline\[1\].*only in table_b \[2\]"),
        ([table([0.1, 0.2, 0.3])], [table([0.1, 0.2, 0.3]), table([0.1, None, 0.3])], r"treatment\[1\].*1 episode"),
        ([], [table([0.1, 0.2])], "`baseline` needs at least one table"),
        ([table([0.1, 0.2])], [], "`treatment` needs at least one table"),
        ([table([0.5])], [table([0.6])], "at least 2 episodes"),
    ],
)
def test_mismatched_tables_are_named(baseline: list, treatment: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_difference(baseline, treatment)


def test_a_table_cannot_repeat_an_episode() -> None:
    with pytest.raises(ValueError, match="repeated"):
        table([0.1, 0.2, 0.3], ids=[0, 1, 1])


# -- the scored test episodes are the tested ones ------------------------------------------------------------------


def test_scoring_the_test_split_reproduces_the_test_metric(tmp_path: Path) -> None:
    pl.seed_everything(0)
    datamodule = tiny_datamodule(test_episodes=30, eval_episodes_per_batch=4)
    trainer = tiny_trainer(max_steps=3, limit_val_batches=0)
    trainer.fit(ProtoNet(image_size=16), datamodule)
    checkpoint = tmp_path / "protonet.ckpt"
    trainer.save_checkpoint(checkpoint)
    metrics = tiny_trainer().test(load_episodic_module(checkpoint), tiny_datamodule(test_episodes=30))[0]
    # scored as `compare` does: the checkpoint's data settings, the test split, as many episodes as the test
    scores = score_episodes(load_episodic_module(checkpoint), checkpoint_datamodule(checkpoint), 30, "test", 7)
    assert scores.accuracy.mean() == pytest.approx(metrics["test/acc"], abs=1e-6)
    assert 1.96 * scores.accuracy.std() / math.sqrt(30) == pytest.approx(metrics["test/acc_ci95"], abs=1e-6)
    assert 0 < scores.accuracy.mean() < 1


# -- `lightning-episodes compare` ----------------------------------------------------------------------------------

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
    return root / "runs" / "tiny_5w2s__protonet_euclidean_conv4"


def _row(markdown: str) -> list[str]:
    rows = [line for line in markdown.splitlines() if line.startswith("| tiny")]
    assert len(rows) == 1, markdown
    return [entry.strip() for entry in rows[0].strip("|").split("|")]


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
    assert _row(printed) == [
        "tiny, Conv-4, 5-way 2-shot",
        "ProtoNet (Euclidean)",
        # the scored episodes are the tested ones: each arm's cell is `report`'s, from the test records
        format_cell(combine([read_result(p) for p in records["baseline_online"]])),
        format_cell(combine([read_result(p) for p in records["uniform_online"]])),
        f"{100 * expected.mean:+.2f} ± {100 * expected.ci95:.2f}",
        "< 0.001" if expected.pvalue < 0.001 else f"{expected.pvalue:.3f}",
        ", ".join(f"seed{s} {100 * d:+.2f}" for s, d in zip((0, 1), expected.seed_differences or (), strict=True)),
        "12",
    ]
    for paths in records.values():
        for path in paths:  # each cached table is the run's test: as many episodes, the same mean accuracy
            scores, record = DifficultyTable.read(path.with_name(SCORES_FILE)), json.loads(path.read_text())
            assert len(scores) == record["episodes"]
            assert scores.accuracy.mean() == pytest.approx(record["accuracy"], abs=1e-6)


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
    assert _row(capsys.readouterr().out)[-1] == "5"


@pytest.mark.slow
def test_compare_names_a_missing_run_or_seed_folder(scenario: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_tool(["compare", str(scenario), "--treatment", "easy_online"]) == 1
    assert f"missing run folder {scenario / 'seed0' / 'easy_online'}" in capsys.readouterr().err
    assert run_tool(["compare", str(scenario / "seed0")]) == 1
    assert f"no seed<N> folders in {scenario / 'seed0'}" in capsys.readouterr().err


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
        assert run_tool(["compare", str(copy)]) == 1
    error = capsys.readouterr().err
    assert f"{copy} (seed0, seed1): treatment[1] and baseline[0] do not score the same episodes" in error
    assert "episode id 0 is a different episode" in error


def test_compare_names_a_run_without_test_record_or_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "seed0" / "baseline_online"
    (run / "cross_domain" / "cub200").mkdir(parents=True)
    (run / "cross_domain" / "cub200" / "test_results.json").write_text("{}")  # another dataset's test: not this one
    assert run_tool(["compare", str(tmp_path)]) == 1
    assert f"{run} holds no test_results.json" in capsys.readouterr().err
    (run / "test_results.json").write_text(json.dumps({"accuracy": 0.5, "ci95": 0.1, "episodes": 10}))
    assert run_tool(["compare", str(tmp_path)]) == 1
    assert f"no checkpoints/best-*.ckpt beside {run / 'test_results.json'}" in capsys.readouterr().err


def test_compare_rejects_a_non_positive_episode_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert entry(["compare", str(tmp_path), "--episodes", "0"]) == 2
    assert "lightning-episodes compare: error: --episodes must be >= 1, got 0" in capsys.readouterr().err

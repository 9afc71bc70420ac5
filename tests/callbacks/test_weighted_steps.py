"""A run records how many of its training steps the weighting acted in (``weighted_steps``: steps whose weights came
from ``q``, not the online warm-up's 1s), so that a run whose warm-up outlasted it is never taken for the weighted
arm: ``report`` gives it a row of its own and ``compare`` refuses to pair it as the treatment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_episodes.analysis.report import build_table, find_results, read_result
from lightning_episodes.callbacks import DifficultyWeightingCallback, ResumableCheckpoint
from lightning_episodes.commands.compare import main as compare
from tests.helpers import fit_and_test_record


def _record(folder: Path, steps: int, warmup: int, target: str = "uniform", test_best: bool = False) -> dict[str, Any]:
    callbacks: list[Any] = [DifficultyWeightingCallback(target=target, warmup_steps=warmup)]
    if test_best:
        callbacks.append(ResumableCheckpoint(dirpath=folder / "checkpoints", monitor="val/acc", mode="max"))
    return fit_and_test_record(
        folder, callbacks, "best" if test_best else None,
        max_steps=steps, val_check_interval=2, limit_val_batches=1, enable_checkpointing=test_best,
    )  # fmt: skip


@pytest.mark.parametrize(("steps", "warmup", "weighted"), [(6, 4, 2), (7, 2, 5), (3, 4, 0)])
def test_the_record_counts_the_steps_after_the_warm_up(tmp_path: Path, steps: int, warmup: int, weighted: int) -> None:
    # online: the first `warmup` steps train with weight 1, every later step with p/q
    assert _record(tmp_path, steps, warmup)["weighted_steps"] == weighted


def test_a_tested_checkpoint_carries_the_count_of_its_own_step(tmp_path: Path) -> None:
    """Testing the best checkpoint (saved at a validation step) reports the steps weighted up to that step, from the
    callback's state in the checkpoint, not the count at the end of the fit."""
    record = _record(tmp_path, steps=8, warmup=3, test_best=True)
    best_step = torch.load(record["ckpt_path"], weights_only=True)["global_step"]
    assert best_step in (2, 4, 6, 8)
    assert record["weighted_steps"] == max(0, best_step - 3)
    # last.ckpt, at the end of the fit, counts every weighted step
    callbacks = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]
    (state,) = (value for key, value in callbacks.items() if key.startswith("DifficultyWeightingCallback"))
    assert state["weighted_steps"] == 8 - 3


def test_without_a_weighting_callback_the_count_is_absent(tmp_path: Path) -> None:
    assert fit_and_test_record(tmp_path, [], max_steps=2)["weighted_steps"] is None


def _campaign(root: Path, treatment_warmup: int) -> Path:
    scenario = root / "scenario"
    for arm, target, warmup in (("baseline_online", "baseline", 2), ("uniform_online", "uniform", treatment_warmup)):
        _record(scenario / "seed0" / arm, steps=4, warmup=warmup, target=target)
    return scenario


def test_report_gives_a_run_that_never_weighted_a_row_of_its_own(tmp_path: Path) -> None:
    """The same options, one run weighted and one not (the warm-up outlasted it): two rows, never one cell."""
    _record(tmp_path / "weighted", steps=6, warmup=3)
    _record(tmp_path / "never", steps=3, warmup=3)
    runs = {path.parent.name: read_result(path) for path in find_results([tmp_path])}
    assert runs["weighted"].row.scheme == "uniform (online, warmup_steps=3)"
    assert runs["never"].row.scheme == "uniform (online, never_weighted=true, warmup_steps=3)"
    table = build_table(runs.values())
    assert len(table.rows) == 2
    assert all(cell.seeds == 1 for cell in table.cells.values())


def test_compare_refuses_a_treatment_that_never_weighted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = _campaign(tmp_path, treatment_warmup=100)
    assert compare([str(scenario)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("lightning-episodes compare: error: ")
    assert "uniform_online" in error
    assert "never weighted its episodes (weighted_steps 0" in error
    assert "\n" not in error


def test_compare_pairs_a_treatment_that_weighted(tmp_path: Path) -> None:
    assert compare([str(_campaign(tmp_path, treatment_warmup=2))]) == 0

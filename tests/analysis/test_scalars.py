"""A run's scalars table in both of its layouts, written by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lightning_episodes.analysis.scalars import read_scalar_table


def test_the_exported_layout_is_read_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "scalars.csv"
    path.write_text("tag,step,value\ntrain/acc,49,0.5\nval/acc,249,0.61\nweighting/pareto_k,49,nan\nepoch,249,0.0\n")
    rows = read_scalar_table(path)
    assert [row[:2] for row in rows] == [
        ("train/acc", 49),
        ("val/acc", 249),
        ("weighting/pareto_k", 49),
        ("epoch", 249),
    ]
    assert [rows[0][2], rows[1][2], rows[3][2]] == [0.5, 0.61, 0.0]
    assert math.isnan(rows[2][2])  # kept: a reader decides what a non-finite value means


def test_the_csv_loggers_layout_gives_the_same_rows(tmp_path: Path) -> None:
    """Lightning's ``metrics.csv``: a ``step`` column and one per tag, empty where a tag was not logged at the step
    (the layout of ``studies/scarce5``'s first seeds, which ``scripts/study_diagnostics.py`` could not read)."""
    path = tmp_path / "scalars.csv"
    path.write_text("step,epoch,train/acc,val/acc\n0,,,\n49,0.0,0.5,\n249,0.0,,0.61\n")
    assert read_scalar_table(path) == [
        ("epoch", 49, 0.0), ("train/acc", 49, 0.5), ("epoch", 249, 0.0), ("val/acc", 249, 0.61)
    ]  # fmt: skip


def test_a_table_of_neither_layout_is_named(tmp_path: Path) -> None:
    path = tmp_path / "scalars.csv"
    path.write_text("name,value\nacc,0.5\n")
    with pytest.raises(ValueError, match=r"scalars\.csv is not a scalars table: its header has neither tag,step,value"):
        read_scalar_table(path)

"""The comparisons' table (the command: tests/commands/test_compare.py): Holm's step-down adjustment by hand and
against statsmodels where it is installed, each cell's family, the study-relative labels and the order of a row's
numbers."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lightning_episodes.analysis import DifficultyTable, EpisodeRecord, paired_difference
from lightning_episodes.analysis.comparison import (
    Comparison,
    adjusted_pvalues,
    comparison_markdown,
    holm,
    relative_labels,
)
from lightning_episodes.analysis.report import Cell


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04: 3 × 0.01 = 0.03; max(0.03, 2 × 0.03) = 0.06; max(0.06, 1 × 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06], abs=1e-15)
    # sorted 0.01, 0.04, 0.2, 0.5: 4 × 0.01, 3 × 0.04, 2 × 0.2, 1 × 0.5, each above the one before
    assert holm([0.5, 0.2, 0.01, 0.04]) == pytest.approx([0.5, 0.4, 0.04, 0.12], abs=1e-15)
    # 2 × 0.7 = 1.4 is capped at 1, and the running maximum lifts 0.9 to 1
    assert holm([0.7, 0.9]) == pytest.approx([1.0, 1.0])
    # the running maximum: 3 × 0.02 = 0.06 is above 2 × 0.025 = 0.05, so both are 0.06
    assert holm([0.02, 0.025, 0.5]) == pytest.approx([0.06, 0.06, 0.5], abs=1e-15)
    assert holm([0.02]) == [0.02]  # a family of one: uncorrected
    assert holm([]) == []


def test_holm_counts_a_test_without_p_in_the_family() -> None:
    adjusted = holm([0.01, math.nan, 0.02])
    assert adjusted[0] == pytest.approx(0.03)
    assert adjusted[2] == pytest.approx(0.04)
    assert math.isnan(adjusted[1])


def test_holm_refuses_what_is_no_p_value() -> None:
    with pytest.raises(ValueError, match=r"a p-value must be in \[0, 1\] \(or nan\), got 1.5"):
        holm([0.1, 1.5])


@pytest.mark.skipif(importlib.util.find_spec("statsmodels") is None, reason="statsmodels is not installed")
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
def test_holm_against_statsmodels(pvalues: list[float]) -> None:
    """statsmodels as a reference where it is installed (not a dependency)."""
    from statsmodels.stats.multitest import multipletests

    _, reference, _, _ = multipletests(pvalues, method="holm")
    assert holm(pvalues) == pytest.approx(list(reference), abs=1e-12)


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
def test_holm_properties(pvalues: list[float]) -> None:
    """At least the raw p, at most 1 and at most m times the raw p (Bonferroni), in the raw p's order."""
    adjusted = holm(pvalues)
    m = len(pvalues)
    for p, q in zip(pvalues, adjusted, strict=True):
        assert p - 1e-15 <= q <= min(1.0, m * p) + 1e-15
    ranked = [q for _, q in sorted(zip(pvalues, adjusted, strict=True))]
    assert all(a <= b + 1e-15 for a, b in zip(ranked, ranked[1:], strict=False))


def _table(accuracies: list[float]) -> DifficultyTable:
    return DifficultyTable(
        tuple(EpisodeRecord(i, (0, 1), ((2,), (3,)), ((4,), (5,)), 1.0, a) for i, a in enumerate(accuracies))
    )


def _comparison(folder: str, treatment: str, shifts: list[float]) -> Comparison:
    """A comparison of ``len(shifts)`` seeds, each seed's treatment its baseline plus a shift on one episode."""
    base = [0.4, 0.6, 0.8, 0.2]
    baseline = [_table(base) for _ in shifts]
    treated = [_table([base[0] + shift, *base[1:]]) for shift in shifts]
    difference = paired_difference(baseline, treated)
    cell = Cell(0.5, 0.01)
    seeds = tuple(f"seed{s}" for s in range(len(shifts)))
    return Comparison(folder, "Glyphs", "ProtoNet", treatment, cell, cell, difference, seeds)


def test_each_cells_treatments_are_a_family() -> None:
    rows = [_comparison("a", "u", [0.1, 0.2, 0.3]), _comparison("a", "e", [0.1]), _comparison("b", "u", [0.1, 0.3])]
    assert adjusted_pvalues(rows, "none") is None
    adjusted = adjusted_pvalues(rows, "holm")
    assert adjusted is not None
    # a: its seeds' p, and the one-seed row's p over episodes; b: a family of one
    assert adjusted[:2] == pytest.approx(holm([rows[0].difference.seed_pvalue or 0, rows[1].difference.pvalue]))
    assert adjusted[2] == pytest.approx(rows[2].difference.seed_pvalue)


def test_a_rows_leading_interval_is_over_trainings_where_it_has_seeds() -> None:
    seeds, one = _comparison("a", "u", [0.1, 0.2, 0.3]), _comparison("a", "e", [0.2])
    # d per seed: 0.025, 0.05, 0.075; mean 0.05, sd 0.025, t(0.975, 2) = 4.302653 (tables): ± 0.0621
    assert seeds.interval == pytest.approx((0.05, 4.302652729911275 * 0.025 / math.sqrt(3)), rel=1e-9)
    assert seeds.over_trainings
    assert not one.over_trainings
    assert one.interval == (one.difference.mean, one.difference.ci95)
    assert one.pvalue == one.difference.pvalue


def test_the_markdown_puts_trainings_before_test_episodes() -> None:
    rows = [_comparison("a", "u", [0.1, 0.2, 0.3]), _comparison("a", "e", [0.1])]
    text = comparison_markdown(rows, ["base", "treatment"], several=True, correction="holm", family="M")
    header, table, legend = text.split("\n\n")
    assert header.startswith("Family M: Holm's step-down correction over the treatments of each cell: m = 2 in a.")
    lines = table.splitlines()
    assert lines[0] == (
        "| Scenario | Algorithm | Treatment | Over trainings (pp) | p | p (Holm) | Per-seed differences (pp) | "
        "Over test episodes only (pp) | p (test episodes) | base | treatment | Episodes |"
    )
    assert lines[1].count("|") == lines[0].count("|")
    first, second = ([e.strip() for e in line.strip("|").split("|")] for line in lines[2:])
    assert first[3:5] == ["+5.00 ± 6.21 (3 seeds)", f"{rows[0].difference.seed_pvalue:.3f}"]
    assert second[3:5] == ["– (1 seed: no interval over trainings)", "–"]
    assert second[7].endswith("(1 seed: the only interval)")
    assert second[5].endswith(f"(test episodes, raw {rows[1].difference.pvalue:.3f})")
    assert legend.startswith("Over trainings: treatment − baseline in percentage points, paired by seed")


def test_labels_are_relative_to_the_study_folder(tmp_path: Path) -> None:
    a, b = tmp_path / "study" / "n60" / "cell_a", tmp_path / "study" / "n60" / "cell_b"
    assert relative_labels([a, b]) == ("n60", ["cell_a", "cell_b"])
    assert relative_labels([a]) == ("n60", ["cell_a"])
    assert relative_labels([a, tmp_path / "other" / "n60" / "cell_a"]) == (
        tmp_path.name,
        ["study/n60/cell_a", "other/n60/cell_a"],
    )
    assert relative_labels([a.parent, a]) == ("study", ["n60", "n60/cell_a"])
    assert np.all([not label.startswith("/") for label in relative_labels([Path("x"), Path("y")])[1]])


def test_rows_of_different_baselines_each_name_both_arms() -> None:
    """A contrast between two treatment arms beside a treatment against the baseline: the column
    ``Treatment − baseline`` names both arms of each row, the family is the cell's comparisons (m = 2), and a cell
    without one of the rows named says so."""
    treatment = replace(_comparison("a", "uniform_online", [0.1, 0.2, 0.3]), baseline="baseline_online")
    contrast = replace(_comparison("a", "uniform_online", [0.1, 0.1, 0.2]), baseline="uniform_online_placebo")
    assert (treatment.label(), treatment.label(with_baseline=True)) == ("uniform_online",
                                                                       "uniform_online − baseline_online")  # fmt: skip
    assert _comparison("a", "u", [0.1]).baseline == ""  # unnamed: a table of one baseline heads a column with it
    named = ["uniform_online − baseline_online", "uniform_online − uniform_online_placebo"]
    text = comparison_markdown([treatment, contrast], ["baseline", "treatment"], several=False, correction="holm",
                               family="M", treatments=named, baselines=True)  # fmt: skip
    header, table, _ = text.split("\n\n")
    assert header.startswith(
        "Family M: Holm's step-down correction over the comparisons of each cell (each row its treatment − its "
        "baseline): m = 2 in a."
    )
    lines = table.splitlines()
    assert lines[0].startswith("| Scenario | Algorithm | Treatment − baseline | Over trainings (pp) | p | p (Holm) |")
    assert lines[0].endswith("| baseline | treatment | Episodes |")
    assert [line.split(" | ")[2] for line in lines[2:]] == named
    adjusted = holm([treatment.pvalue, contrast.pvalue])
    assert [line.split(" | ")[5] for line in lines[2:]] == [f"{p:.3f}" for p in adjusted]
    text = comparison_markdown([contrast], ["baseline", "treatment"], several=True, correction="holm",
                               treatments=named, baselines=True)  # fmt: skip
    expected = ("Family: Holm's step-down correction over the comparisons of each cell (each row its treatment − "
                "its baseline; of the 2 comparisons named, those with a row): m = 1 in a.")  # fmt: skip
    assert text.startswith(expected)

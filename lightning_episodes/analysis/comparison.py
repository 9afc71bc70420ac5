"""The table of a sampling study's comparisons: each treatment against one baseline (and contrasts between two
treatment arms), led by the interval over trainings, with a family correction (Holm's step-down procedure) over the
rows of each cell.

A claim about trainings needs the interval over trainings: the Student-t interval of the seed pairs' mean
difference, with ``k − 1`` degrees of freedom (``k = 3``: t = 4.30, not 1.96). The paired per-episode interval holds
the trained models fixed and covers only which test episodes were drawn, so it comes second and says so. From the
command line: ``lightning-episodes compare`` (:mod:`lightning_episodes.commands.compare`); the same comparisons drawn:
:func:`~lightning_episodes.analysis.forest.plot_forest`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lightning_episodes.analysis.paired import PairedDifference
from lightning_episodes.analysis.report import Cell, format_cell

#: ``--correction``: no correction, or Holm's step-down procedure within each cell's family of treatments
Correction = Literal["none", "holm"]

#: The legend printed under the table.
LEGEND = (
    "Over trainings: treatment − baseline in percentage points, paired by seed (seed s of one arm against seed s of "
    "the other): the mean of the k seed pairs' differences ± the 95% Student-t half-width over them (t with k − 1 "
    "degrees of freedom), and the two-sided one-sample t-test's p over them. It is the interval for a claim about "
    "trainings; with one seed it is not measured (–). Over test episodes only: the difference per test episode (each "
    "arm averaged over its seeds) ± the 95% Student-t half-width over the shared test episodes, and the paired "
    "t-test's p. It holds the trained models fixed, so it covers only which test episodes were drawn, not the variance "
    "between trainings: a small p there says these models differ, not that other trainings would. Accuracies (%): "
    "each arm's mean over seeds ± 95% interval, combined as `lightning-episodes report` does (sd: over seeds)."
)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family's p-values (Holm 1979, "A simple sequentially rejective multiple test
    procedure"), in the order given.

    With the ``m`` p-values sorted ascending, ``p_(1) ≤ … ≤ p_(m)``, the adjusted ``p_(i)`` is
    ``max_{j ≤ i} min(1, (m − j + 1) p_(j))``: rejecting where it is at most α controls the family-wise error rate at
    α, whatever the dependence between the tests. A ``nan`` (a test without a p) counts in ``m``, ranks last and stays
    ``nan``.

    Args:
        pvalues: the family's raw p-values, each in [0, 1] or ``nan``.

    Returns:
        The adjusted p-values, one per raw p-value, in the same order.

    Raises:
        ValueError: naming the value, if one is outside [0, 1].

    Example::

        >>> holm([0.01, 0.04, 0.03])  # sorted 0.01, 0.03, 0.04: 3 × 0.01, max(0.03, 2 × 0.03), max(0.06, 1 × 0.04)
        [0.03, 0.06, 0.06]
    """
    for p in pvalues:
        if not (math.isnan(p) or 0.0 <= p <= 1.0):
            raise ValueError(f"a p-value must be in [0, 1] (or nan), got {p}")
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (math.isnan(pvalues[i]), pvalues[i]))
    adjusted = [math.nan] * m
    running = 0.0
    for rank, i in enumerate(order):
        if math.isnan(pvalues[i]):
            break
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Comparison:
    """One treatment against a baseline in one cell (a scenario folder): a row of :func:`comparison_markdown`.

    Args:
        folder: the cell's folder, relative to the study's (:func:`relative_labels`).
        scenario: the benchmark's label (``Glyphs-100, Conv-4, 5-way 5-shot``, with what sets its protocol apart).
        algorithm: the algorithm, and how the arms' protocols differ where they may.
        treatment: the treatment arm's run folder name.
        baseline_cell: the baseline arm's accuracy over its seeds.
        treatment_cell: the treatment arm's.
        difference: their paired difference, treatment − baseline.
        seeds: the seeds paired (``seed0``, ...), in the order of :attr:`PairedDifference.seed_differences`.
        baseline: the baseline arm's run folder name (``""``: unnamed; a table of one baseline names it in a heading).
    """

    folder: str
    scenario: str
    algorithm: str
    treatment: str
    baseline_cell: Cell
    treatment_cell: Cell
    difference: PairedDifference
    seeds: tuple[str, ...]
    baseline: str = ""

    def label(self, with_baseline: bool = False) -> str:
        """The row's name: its treatment, or with ``with_baseline`` its treatment − its baseline
        (``uniform_online − uniform_online_placebo``), for a table whose rows have different baselines."""
        return f"{self.treatment} − {self.baseline}" if with_baseline else self.treatment

    @property
    def over_trainings(self) -> bool:
        """Whether the row has an interval over trainings (two or more seed pairs)."""
        return self.difference.seed_ci95 is not None

    @property
    def pvalue(self) -> float:
        """The row's leading p: over trainings (the seed pairs') with two or more seed pairs, else over test
        episodes. The one a family correction adjusts."""
        seed_p = self.difference.seed_pvalue
        return self.difference.pvalue if seed_p is None else seed_p

    @property
    def interval(self) -> tuple[float, float]:
        """``(mean, half-width)`` of the row's leading interval, as fractions: over trainings with two or more seed
        pairs, else the one over test episodes."""
        if self.difference.seed_ci95 is None or self.difference.seed_mean is None:
            return self.difference.mean, self.difference.ci95
        return self.difference.seed_mean, self.difference.seed_ci95


def adjusted_pvalues(comparisons: Sequence[Comparison], correction: Correction) -> list[float] | None:
    """Each row's :attr:`Comparison.pvalue` adjusted within its cell's family (the rows of one folder: the plans'
    families are per cell), or ``None`` without a correction."""
    if correction == "none":
        return None
    adjusted = [math.nan] * len(comparisons)
    for folder in dict.fromkeys(c.folder for c in comparisons):
        members = [i for i, c in enumerate(comparisons) if c.folder == folder]
        for i, p in zip(members, holm([comparisons[i].pvalue for i in members]), strict=True):
            adjusted[i] = p
    return adjusted


def relative_labels(folders: Sequence[Path]) -> tuple[str, list[str]]:
    """The study folder's name and each folder's path relative to it: the deepest folder above them all (one
    folder: its parent), so that no label is an absolute path.

    Example::

        >>> relative_labels([Path("studies/scarce/n60/a"), Path("studies/scarce5/n60/a")])
        ('studies', ['scarce/n60/a', 'scarce5/n60/a'])
    """
    resolved = [folder.resolve() for folder in folders]
    distinct = list(dict.fromkeys(resolved))
    study = distinct[0].parent if len(distinct) == 1 else Path(os.path.commonpath(distinct))
    if study in distinct:  # a folder inside another given one: both relative to the outer one's parent
        study = study.parent
    return study.name, [folder.relative_to(study).as_posix() for folder in resolved]


def _p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _seeds(k: int) -> str:
    return f"{k} seed" if k == 1 else f"{k} seeds"


def _cells(comparison: Comparison, adjusted: float | None, correction: Correction) -> list[str]:
    """The row's entries after its labels: over trainings first, then the per-seed differences, then over test
    episodes only, then each arm's accuracy and the episodes."""
    d = comparison.difference
    per_seed = ", ".join(
        f"{seed} {100 * x:+.2f}" for seed, x in zip(comparison.seeds, d.seed_differences or (), strict=True)
    )
    episodes = f"{100 * d.mean:+.2f} ± {100 * d.ci95:.2f}"
    if comparison.over_trainings:
        mean, half_width = comparison.interval
        trainings = [f"{100 * mean:+.2f} ± {100 * half_width:.2f} ({_seeds(d.trainings)})", _p(d.seed_pvalue)]
    else:  # one seed pair: the interval over test episodes is the only one, and says so
        trainings = [f"– ({_seeds(max(d.trainings, 1))}: no interval over trainings)", "–"]
        episodes += f" ({_seeds(max(d.trainings, 1))}: the only interval)"
    if correction != "none":
        # a row of one seed: the raw p it adjusts is the one over test episodes, named beside it
        marked = "" if comparison.over_trainings else f" (test episodes, raw {_p(d.pvalue)})"
        trainings.append(_p(adjusted) + marked)
    arms = [format_cell(comparison.baseline_cell), format_cell(comparison.treatment_cell)]
    return [*trainings, per_seed, episodes, _p(d.pvalue), *arms, str(d.episodes)]


def comparison_header(
    comparisons: Sequence[Comparison],
    correction: Correction,
    family: str | None,
    treatments: int,
    baselines: bool = False,
) -> str:
    """The line above the table naming the family and its correction (``""`` with neither): which p is adjusted,
    and over how many tests in each cell (``treatments``: the rows named; ``baselines``: the rows have different
    baselines, each named in its row, so the family is the cell's comparisons, not its treatments)."""
    if correction == "none" and family is None:
        return ""
    name = f"Family {family}" if family is not None else "Family"
    if correction == "none":
        return f"{name}: no correction for multiple comparisons (--correction none); the p beside each row is raw.\n\n"
    sizes = {
        folder: sum(c.folder == folder for c in comparisons) for folder in dict.fromkeys(c.folder for c in comparisons)
    }
    counted = ", ".join(f"m = {m} in {folder}" for folder, m in sizes.items())
    missing = any(m < treatments for m in sizes.values())
    rows = "comparisons" if baselines else "treatments"
    notes = [
        *(["each row its treatment − its baseline"] if baselines else []),
        *([f"of the {treatments} {rows} named, those with a row"] if missing else []),
    ]
    short = f" ({'; '.join(notes)})" if notes else ""
    return (
        f"{name}: Holm's step-down correction over the {rows} of each cell{short}: {counted}. p (Holm) adjusts "
        "each row's p over trainings (the one-sample t-test of its seed pairs' differences), or, in a row of one "
        'seed, its p over test episodes (marked "test episodes", with that raw p), beside the raw p.\n\n'
    )


def comparison_markdown(
    comparisons: Sequence[Comparison],
    arm_columns: Sequence[str],
    several: bool,
    correction: Correction = "none",
    family: str | None = None,
    treatments: Sequence[str] = (),
    baselines: bool = False,
) -> str:
    """The comparisons as a Markdown table with its header (:func:`comparison_header`) and legend.

    Args:
        comparisons: the rows, in order.
        arm_columns: the headings of the two accuracy columns (the baseline's, the treatment's).
        several: whether a column names each row's treatment (several treatments).
        correction: ``"holm"``: a ``p (Holm)`` column beside the raw p (:func:`adjusted_pvalues`).
        family: the family's name, printed in the header.
        treatments: the rows named, each as its row names it (:meth:`Comparison.label`; default: those of
            ``comparisons``): a cell with fewer rows is said to be corrected over those it has.
        baselines: the rows have different baselines (a contrast between two treatment arms beside the treatments
            against the baseline): the column ``Treatment − baseline`` names both arms of each row
            (``uniform_online − uniform_online_placebo``); ``several`` is implied.
    """
    adjusted = adjusted_pvalues(comparisons, correction)
    holm_column = ["p (Holm)"] if correction != "none" else []
    several = several or baselines
    named_column = "Treatment − baseline" if baselines else "Treatment"
    headings = ["Scenario", "Algorithm", *([named_column] if several else []), "Over trainings (pp)", "p",
                *holm_column, "Per-seed differences (pp)", "Over test episodes only (pp)", "p (test episodes)",
                *arm_columns, "Episodes"]  # fmt: skip
    alignment = ["---"] * (3 if several else 2) + ["---:"] * (2 + len(holm_column)) + ["---", "---:", "---:"]
    alignment += ["---:"] * (len(arm_columns) + 1)
    lines = ["| " + " | ".join(headings) + " |", "|" + "|".join(alignment) + "|"]
    for i, comparison in enumerate(comparisons):
        labels = [comparison.scenario, comparison.algorithm, *([comparison.label(baselines)] if several else [])]
        entries = _cells(comparison, None if adjusted is None else adjusted[i], correction)
        lines.append("| " + " | ".join([*labels, *entries]) + " |")
    named = len(dict.fromkeys([*treatments, *(c.label(baselines) for c in comparisons)]))
    header = comparison_header(comparisons, correction, family, named, baselines)
    return header + "\n".join(lines) + "\n\n" + LEGEND + "\n"

"""A forest plot of a sampling study's comparisons: every treatment − baseline with its 95% interval over trainings,
a row per treatment (or contrast between two treatment arms), grouped by cell (``lightning-episodes compare
--forest``).

Drawn without pyplot on a :class:`~matplotlib.figure.Figure` rendered by the Agg backend, as
:mod:`lightning_episodes.analysis.plots` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from lightning_episodes.analysis.comparison import Comparison

#: inches of figure height per drawn row (a treatment or a cell's heading)
ROW_HEIGHT = 0.32
#: the markers: filled circles over trainings, hollow diamonds over test episodes only (one seed)
MARKERS = {"trainings": "o", "test episodes": "D"}


@dataclass(frozen=True)
class ForestRow:
    """A row as drawn, in percentage points: its label, its height on the y axis (the first row on top), the
    interval's centre and ends, the trainings it rests on and what it covers; ``baseline``: the row's baseline arm
    where the rows have different baselines (named in the label), else ``""``."""

    folder: str
    treatment: str
    label: str
    y: float
    mean: float
    low: float
    high: float
    trainings: int
    over: Literal["trainings", "test episodes"]
    baseline: str = ""


def forest_rows(comparisons: Sequence[Comparison], baselines: bool = False) -> list[ForestRow]:
    """The rows :func:`plot_forest` draws: the comparisons grouped by cell (in the order of their first row), each
    at its own height, with a heading row above each cell when there are several; with ``baselines``, each labelled
    with its treatment − its baseline (:meth:`~lightning_episodes.analysis.comparison.Comparison.label`)."""
    folders = list(dict.fromkeys(c.folder for c in comparisons))
    rows, y = [], 0.0
    for folder in folders:
        if len(folders) > 1:
            y -= 1  # the cell's heading
        for comparison in (c for c in comparisons if c.folder == folder):
            mean, half_width = comparison.interval
            k = max(comparison.difference.trainings, 1)
            over: Literal["trainings", "test episodes"] = "trainings" if comparison.over_trainings else "test episodes"
            label = f"{comparison.label(baselines)} ({k} training{'s' if k > 1 else ''})"
            baseline = comparison.baseline if baselines else ""
            y -= 1
            rows.append(ForestRow(folder, comparison.treatment, label, y, 100 * mean, 100 * (mean - half_width),
                                  100 * (mean + half_width), k, over, baseline))  # fmt: skip
        y -= 0.5  # a gap between cells
    return rows


def plot_forest(
    comparisons: Sequence[Comparison], baseline: str, study: str = "", baselines: bool | None = None
) -> tuple[Figure, list[ForestRow]]:
    """Each comparison's treatment − baseline (percentage points) with its 95% interval as a horizontal error bar:
    over trainings (the t interval of the seed pairs' mean difference) where it has two or more seed pairs, else,
    in a hollow marker of its own, over test episodes only. One row per treatment, labelled with its trainings,
    under a heading per cell when there are several; a treatment keeps its colour in every cell; a vertical line at
    0; the legend, saying what each marker covers, below the axes. Rows of different baselines (a contrast between
    two treatment arms beside the treatments) are each labelled with their treatment − their baseline, and each such
    pair keeps its colour.

    Args:
        comparisons: the rows (:class:`~lightning_episodes.analysis.comparison.Comparison`), their ``folder`` a label
            relative to the study's (never an absolute path).
        baseline: the baseline arm's name, for the axis label (unused where each row names its own).
        study: the study folder's name, for the title.
        baselines: whether each row names its baseline (default: where the comparisons have more than one).

    Returns:
        The figure (``figure.savefig(path)`` renders it with Agg) and the rows it drew (:func:`forest_rows`).

    Raises:
        ValueError: if there is no comparison.
    """
    if not comparisons:
        raise ValueError("a forest plot needs at least one comparison")
    if baselines is None:
        baselines = len({comparison.baseline for comparison in comparisons}) > 1
    rows = forest_rows(comparisons, baselines)
    treatments = list(dict.fromkeys((row.treatment, row.baseline) for row in rows))
    palette = colormaps["tab10" if len(treatments) <= 10 else "tab20"]
    colours = {name: palette(k % palette.N) for k, name in enumerate(treatments)}
    folders = list(dict.fromkeys(row.folder for row in rows))
    lowest = min(row.y for row in rows)
    figure = Figure(figsize=(9.0, 1.8 + ROW_HEIGHT * (len(rows) + len(folders))), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    ticks: list[float] = []
    labels: list[str] = []
    headings: list[int] = []  # the indices of the cells' headings among the ticks
    for folder in folders:
        members = [row for row in rows if row.folder == folder]
        if len(folders) > 1:
            headings.append(len(ticks))
            ticks.append(members[0].y + 1)
            labels.append(folder)
        for row in members:
            hollow, colour = row.over == "test episodes", colours[row.treatment, row.baseline]
            _, _, (bar,) = ax.errorbar(row.mean, row.y, xerr=[[row.mean - row.low], [row.high - row.mean]],
                                       fmt=MARKERS[row.over], color=colour, capsize=3, ms=6,
                                       mfc="white" if hollow else colour)  # fmt: skip
            if hollow:
                bar.set_linestyle("--")
            ticks.append(row.y)
            labels.append(row.label)
    ax.set_yticks(ticks, labels)
    for index in headings:
        ax.get_yticklabels()[index].set_fontweight("bold")
    ax.set_ylim(lowest - 0.7, -0.3)
    # each row's numbers at the right edge, so that the figure reads without the table
    right = ax.secondary_yaxis("right")
    right.set_yticks([row.y for row in rows], [f"{row.mean:+.2f} [{row.low:+.2f}, {row.high:+.2f}]" for row in rows])
    right.tick_params(labelsize=8, length=0)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.grid(axis="x", alpha=0.3)
    against = "its baseline" if baselines else baseline
    ax.set_xlabel(f"test accuracy, treatment − {against} (percentage points)")
    ax.set_title(f"Each treatment − {against}, 95% interval" + (f" ({study})" if study else ""), fontsize=10)
    handles = [
        Line2D([], [], color="0.3", marker="o", label="95% t interval over trainings (k − 1 degrees of freedom)"),
        Line2D([], [], color="0.3", marker="D", mfc="white", linestyle="--",
               label="one training: 95% interval over test episodes only (the spread between trainings unmeasured)"),
    ]  # fmt: skip
    present = {row.over for row in rows}
    figure.legend(
        handles=[h for h, over in zip(handles, MARKERS, strict=True) if over in present],
        loc="outside lower center",
        fontsize=8,
        frameon=False,
    )
    return figure, rows

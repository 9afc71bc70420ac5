"""Plots of the paper's episode-difficulty analyses (Arnold et al., NeurIPS 2021, §4.2).

Every function draws on ``ax`` when one is given (e.g. from ``plt.subplots`` in a notebook) and
otherwise on a new :class:`matplotlib.figure.Figure` created without pyplot: nothing is registered
with pyplot's global state or shown, and saving renders with the Agg backend
(``ax.figure.savefig("plot.png")``). Each returns the :class:`~matplotlib.axes.Axes` it drew on.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from scipy import stats

from lightning_episodes.analysis._arrays import ArrayLike, as_indices, as_matrix, as_vector
from lightning_episodes.analysis.correlation import paired_vectors, rank_correlation
from lightning_episodes.analysis.normality import fit_normal
from lightning_episodes.analysis.report import ResultsTable, RunResult, distinguish_protocols

EASY_COLOR = "tab:blue"
HARD_COLOR = "tab:red"


def _new_axes(figsize: tuple[float, float] = (5.0, 4.0)) -> Axes:
    """One Axes on a fresh pyplot-free Figure (rendered with Agg when saved)."""
    return Figure(figsize=figsize, layout="constrained").add_subplot()


def plot_density(values: ArrayLike, ax: Axes | None = None, label: str | None = None, bins: int | str = "auto") -> Axes:
    """Histogram and KDE of the difficulties with the fitted normal N(μ, σ²) overlaid (§4.2).

    Draws a density histogram (patches), a Gaussian KDE line and the fitted normal's density line
    (μ and σ from :func:`~lightning_episodes.analysis.fit_normal`), with a legend.

    Args:
        values: 1-d difficulties (at least 2, finite, not all equal).
        ax: Axes to draw on; a new Figure's Axes when ``None``.
        label: legend label of the histogram and KDE, e.g. the model's name.
        bins: histogram bins, as for :func:`numpy.histogram` (default ``"auto"``).

    Returns:
        The Axes drawn on.

    Raises:
        ValueError: if ``values`` is not 1-d, has fewer than 2 values, holds NaN/inf or is constant.

    Example::

        >>> ax = plot_density(np.random.default_rng(0).normal(2.0, 0.5, size=500), label="ProtoNet")
        >>> len(ax.lines), ax.get_xlabel()
        (2, 'episode difficulty')
    """
    array = _non_constant(values)
    mean, std = fit_normal(array)
    ax = _new_axes() if ax is None else ax
    name = "difficulty" if label is None else label
    ax.hist(array, bins=bins, density=True, alpha=0.35, label=f"{name} (histogram)")
    grid = np.linspace(array.min() - std, array.max() + std, 256)
    ax.plot(grid, stats.gaussian_kde(array)(grid), label=f"{name} (KDE)")
    ax.plot(grid, stats.norm.pdf(grid, mean, std), "k--", label=f"N(μ={mean:.3g}, σ={std:.3g})")
    ax.set_xlabel("episode difficulty")
    ax.set_ylabel("density")
    ax.legend()
    return ax


def plot_qq(values: ArrayLike, ax: Axes | None = None) -> Axes:
    """Q-Q plot of the difficulties against N(μ, σ²) with their own mean and std (§4.2).

    Both axes are in difficulty units: x holds the fitted normal's quantiles (Filliben's plotting
    positions, as :func:`scipy.stats.probplot`), y the sorted difficulties, so normal values lie on
    the dashed identity line y = x and departures show as bends away from it.

    Args:
        values: 1-d difficulties (at least 2, finite, not all equal).
        ax: Axes to draw on; a new Figure's Axes when ``None``.

    Returns:
        The Axes drawn on: a marker line of the points, then the identity line.

    Raises:
        ValueError: if ``values`` is not 1-d, has fewer than 2 values, holds NaN/inf or is constant.

    Example::

        >>> ax = plot_qq(np.random.default_rng(0).normal(size=200))
        >>> len(ax.lines)
        2
    """
    array = _non_constant(values)
    mean, std = fit_normal(array)
    (theoretical, ordered), _ = stats.probplot(array, sparams=(mean, std), dist="norm")
    ax = _new_axes() if ax is None else ax
    ax.plot(theoretical, ordered, "o", markersize=3, alpha=0.7, label="episodes")
    ends = [min(theoretical[0], ordered[0]), max(theoretical[-1], ordered[-1])]
    ax.plot(ends, ends, "k--", label="y = x (normal)")
    ax.set_xlabel(f"quantiles of N(μ={mean:.3g}, σ={std:.3g})")
    ax.set_ylabel("ordered episode difficulty")
    ax.legend()
    return ax


def plot_transfer(
    a: ArrayLike,
    b: ArrayLike,
    ax: Axes | None = None,
    labels: Sequence[str] = ("model A", "model B"),
) -> Axes:
    """Scatter of two models' difficulties of the same episodes, least-squares line and ρ (§4.2).

    Args:
        a: 1-d difficulties under the first model (x axis).
        b: 1-d difficulties under the second model (y axis), same episodes in the same order.
        ax: Axes to draw on; a new Figure's Axes when ``None``.
        labels: names of the two models, used for the axis labels.

    Returns:
        The Axes drawn on: one scatter collection and one regression line; Spearman's ρ is in the
        title.

    Raises:
        ValueError: as :func:`~lightning_episodes.analysis.rank_correlation`, or if ``labels`` does not
            hold two names.

    Example::

        >>> a = np.random.default_rng(0).normal(size=100)
        >>> ax = plot_transfer(a, 2 * a + 1, labels=("ProtoNet", "MAML"))
        >>> ax.get_title()
        'Spearman ρ = 1.000 (n = 100)'
    """
    if isinstance(labels, str) or len(labels) != 2:
        raise ValueError(f"`labels` must hold two names (x, y), got {labels!r}")
    x, y = paired_vectors(a, b)
    rho, _ = rank_correlation(x, y)
    slope, intercept = np.polyfit(x, y, deg=1)
    ax = _new_axes() if ax is None else ax
    ax.scatter(x, y, s=8, alpha=0.5, label="episodes")
    grid = np.array([x.min(), x.max()])
    ax.plot(grid, slope * grid + intercept, "k-", label=f"least squares (slope {slope:.3g})")
    ax.set_xlabel(f"difficulty under {labels[0]}")
    ax.set_ylabel(f"difficulty under {labels[1]}")
    ax.set_title(f"Spearman ρ = {rho:.3f} (n = {x.size})")
    ax.legend()
    return ax


def plot_trajectories(
    steps: ArrayLike,
    scores: ArrayLike,
    easy_idx: ArrayLike,
    hard_idx: ArrayLike,
    ax: Axes | None = None,
) -> Axes:
    """Difficulty of the easiest and hardest episodes over training, one line per episode (§4.2).

    Args:
        steps: 1-d training step of each checkpoint (x axis).
        scores: ``[checkpoints, episodes]`` difficulties.
        easy_idx: columns of the easy episodes (drawn in blue), e.g. from
            :func:`~lightning_episodes.analysis.extreme_episodes`.
        hard_idx: columns of the hard episodes (drawn in red).
        ax: Axes to draw on; a new Figure's Axes when ``None``.

    Returns:
        The Axes drawn on: ``len(easy_idx)`` easy lines, then ``len(hard_idx)`` hard lines, and a
        legend with one entry per group.

    Raises:
        ValueError: if ``scores`` is not a finite 2-d array, ``steps`` does not have one entry per
            checkpoint, or an index set is empty, repeated or out of range.

    Example::

        >>> scores = np.array([[2.0, 1.0, 3.0], [1.5, 0.5, 2.5]])
        >>> ax = plot_trajectories([0, 100], scores, easy_idx=[1], hard_idx=[0, 2])
        >>> len(ax.lines), [t.get_text() for t in ax.get_legend().get_texts()]
        (3, ['easiest 1', 'hardest 2'])
    """
    matrix = as_matrix(scores, "scores")
    x = as_vector(steps, "steps")
    if x.size != matrix.shape[0]:
        raise ValueError(f"`steps` has {x.size} entries but `scores` has {matrix.shape[0]} checkpoints")
    easy = as_indices(easy_idx, "easy_idx", matrix.shape[1])
    hard = as_indices(hard_idx, "hard_idx", matrix.shape[1])
    ax = _new_axes() if ax is None else ax
    for group, color, name in ((easy, EASY_COLOR, "easiest"), (hard, HARD_COLOR, "hardest")):
        for k, column in enumerate(group):
            label = f"{name} {group.size}" if k == 0 else "_nolegend_"
            ax.plot(x, matrix[:, column], color=color, alpha=0.6, linewidth=1.0, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("episode difficulty")
    ax.legend()
    return ax


def _non_constant(values: ArrayLike) -> np.ndarray:
    array = as_vector(values, "values", min_size=2)
    if np.ptp(array) == 0.0:
        raise ValueError("`values` is constant: there is no spread to compare with a normal")
    return array


def _seeds(count: int) -> str:
    return f"{count} seed" if count == 1 else f"{count} seeds"


#: characters per line of an arm's label under the study plot's accuracies: longer names wrap at their spaces
TICK_WIDTH = 22
#: inches of figure width per arm in a benchmark's column (a wrapped label at 7 pt takes about 1.3), at least 5 a column
ARM_WIDTH = 1.35
#: benchmark columns side by side in the study plot; more go on further rows, so that the figure stays page-wide
COLUMNS_PER_ROW = 2
#: inches of figure height per row of the legend below the panels
LEGEND_ROW = 0.2
#: the arms' colours: Okabe & Ito's palette, told apart with every colour vision (yellow, faint on white, last)
ARM_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442")
#: the arms' markers: 7, prime to the 8 colours, so that arms 0 to 55 each have a (colour, marker) pair of their own
ARM_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
#: the arms' validation curves: solid for the first 8 arms, then dashed, dotted, dash-dotted
ARM_LINESTYLES = ("-", "--", ":", "-.")
#: an absolute path in an arm's name (a task sampler's reference checkpoint): after a quote, a space, ``=`` or ``(``
_ABSOLUTE_PATH = re.compile(r"(?<=['\"=( ])/[^'\"\s,)]+")


@dataclass(frozen=True)
class ArmStyle:
    """How an arm is drawn in every panel of the study plot: its colour, marker and validation curves' line style."""

    colour: str
    marker: str
    linestyle: str


def arm_style(index: int) -> ArmStyle:
    """The style of the ``index``-th arm (0-based): a distinct (colour, marker) pair for each of the first 56."""
    colours = len(ARM_COLOURS)
    linestyle = ARM_LINESTYLES[(index // colours) % len(ARM_LINESTYLES)]
    return ArmStyle(ARM_COLOURS[index % colours], ARM_MARKERS[index % len(ARM_MARKERS)], linestyle)


def relative_paths(text: str, root: Path | None) -> str:
    """``text`` with each absolute path in it relative to ``root`` (the study folder), or, outside it (the machine that
    made the record, another's folder), cut to ``…/<file name>``."""

    def shorten(match: re.Match[str]) -> str:
        path = Path(match.group(0))
        if root is not None and path.is_relative_to(root.absolute()):
            return path.relative_to(root.absolute()).as_posix()
        return f"…/{path.name}"

    return _ABSOLUTE_PATH.sub(shorten, text)


def _arm_label(scheme: str, seeds: int) -> str:
    # a name longer than a line (a path without spaces) is cut: it would run into its neighbour's label
    lines = textwrap.wrap(scheme, TICK_WIDTH, break_long_words=True, break_on_hyphens=False)
    return "\n".join([*lines, f"({_seeds(seeds)})"])


def _interval(mean: float, ci95: float) -> tuple[float, list[list[float]]]:
    """An accuracy and its 95% interval in %, the interval clipped to [0, 100]: ``(mean, [[below], [above]])``."""
    centre = 100 * mean
    low, high = max(0.0, centre - 100 * ci95), min(100.0, centre + 100 * ci95)
    return centre, [[centre - low], [high - centre]]


def plot_study(table: ResultsTable, runs: Sequence[RunResult], root: Path | None = None) -> Figure:
    """A study at a glance: per scenario (an algorithm in a column of ``table``: a benchmark), each arm's test
    accuracy with its 95% interval, clipped to [0, 100] (top) and each run's validation curve, with its best step
    marked (bottom). At most ``COLUMNS_PER_ROW`` scenarios side by side; the others below them, in the table's order.
    An arm has the same colour, marker and line style (:func:`arm_style`) in every panel, and one legend below the
    panels names them all.

    Args:
        table: the results table of the runs (:func:`~lightning_episodes.analysis.report.build_table`).
        runs: the runs themselves (their validation curves; runs without one are left out of the bottom row).
        root: the study folder: absolute paths in the arms' names are shown relative to it (:func:`relative_paths`).

    Returns:
        The figure (pyplot-free; ``figure.savefig(path)`` renders it).
    """
    runs = distinguish_protocols(runs)
    algorithms = list(dict.fromkeys(row.algorithm for row in table.rows))
    arms = {
        (column, algorithm): [row for row in table.rows if row.algorithm == algorithm and (row, column) in table.cells]
        for column in table.columns
        for algorithm in algorithms
    }
    scenarios = [scenario for scenario, present in arms.items() if present]
    width = max(5.0, ARM_WIDTH * max(map(len, arms.values()), default=1))
    across = min(COLUMNS_PER_ROW, max(1, len(scenarios)))
    down = max(1, math.ceil(len(scenarios) / across))
    schemes = list(dict.fromkeys(replace(row, algorithm="") for row in table.rows))
    legend_columns = max(1, min(2 * across, len(schemes)))
    legend_height = LEGEND_ROW * math.ceil(len(schemes) / legend_columns)
    figure = Figure(figsize=(width * across, 7.0 * down + legend_height), layout="constrained")
    axes = figure.subplots(2 * down, across, squeeze=False)
    # each scenario's place: its accuracies over its curves, row by row
    places = [(axes[2 * r, c], axes[2 * r + 1, c]) for r in range(down) for c in range(across)]
    for unused in places[max(1, len(scenarios)) :]:
        for ax in unused:
            ax.set_visible(False)
    styles = {scheme: arm_style(k) for k, scheme in enumerate(schemes)}
    names = {scheme: relative_paths(scheme.scheme, root) for scheme in schemes}
    for (column, algorithm), (top, bottom) in zip(scenarios, places, strict=False):
        present = arms[column, algorithm]
        for k, row in enumerate(present):
            style, cell = styles[replace(row, algorithm="")], table.cells[row, column]
            mean, error = _interval(cell.mean, cell.ci95)
            top.errorbar(k, mean, yerr=error, fmt=style.marker, capsize=4, color=style.colour)
        labels = [_arm_label(names[replace(row, algorithm="")], table.cells[row, column].seeds) for row in present]
        top.set_xticks(range(len(present)), labels)
        top.tick_params(axis="x", labelsize=7)
        top.set_ylabel("test accuracy (%) ± 95% CI")
        top.set_title("\n".join(textwrap.wrap(f"{algorithm}: {column.label}", 60)), fontsize=9)
        _within_percent(top)
        for run in runs:
            best = run.best_validation
            if run.column != column or run.row.algorithm != algorithm or best is None:
                continue
            steps, accuracies = zip(*run.validation, strict=True)
            style = styles.get(replace(run.row, algorithm=""), ArmStyle("k", "o", "-"))
            bottom.plot(steps, [100 * a for a in accuracies], color=style.colour, ls=style.linestyle, alpha=0.8, lw=1)
            bottom.plot([best[0]], [100 * best[1]], style.marker, color=style.colour, ms=5)
        bottom.set_xlabel("step")
        bottom.set_ylabel("validation accuracy (%)")
    handles = [
        Line2D([], [], color=style.colour, marker=style.marker, ls=style.linestyle, label=names[scheme])
        for scheme, style in styles.items()
    ]
    if handles:  # below every panel: it covers no curve
        figure.legend(handles=handles, loc="outside lower center", ncols=legend_columns, fontsize=8)
    return figure


def _within_percent(ax: Axes) -> None:
    """Keep the y-axis of accuracies in % inside [0, 100]."""
    low, high = ax.get_ylim()
    ax.set_ylim(max(0.0, low), min(100.0, high))

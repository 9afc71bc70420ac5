"""Tests for the §4.2 plots: the artists drawn, their data against independent references, PNG output; the study's
figure of a results table (its labels and layout)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from scipy import stats  # noqa: E402

from lightning_episodes.analysis import (  # noqa: E402
    plot_density,
    plot_qq,
    plot_trajectories,
    plot_transfer,
    rank_correlation,
)
from lightning_episodes.analysis.report import build_table  # noqa: E402
from tests.analysis.helpers import load, sampling, weighting, write_run  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def values() -> np.ndarray:
    return np.random.default_rng(0).normal(2.0, 0.5, size=400)


def saves_png(ax: Axes, path: Path) -> None:
    assert isinstance(ax.figure, Figure)
    ax.figure.savefig(path)
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_plot_density_artists(values: np.ndarray, tmp_path: Path) -> None:
    ax = plot_density(values, label="ProtoNet")
    assert isinstance(ax, Axes)
    assert len(ax.lines) == 2  # KDE, fitted normal
    heights = np.array([p.get_height() for p in ax.patches])
    widths = np.array([p.get_width() for p in ax.patches])
    assert len(ax.patches) > 5
    assert float((heights * widths).sum()) == pytest.approx(1.0)  # a density histogram
    kde, normal = ax.lines
    x = normal.get_xdata()
    np.testing.assert_allclose(normal.get_ydata(), stats.norm.pdf(x, values.mean(), values.std()))
    np.testing.assert_allclose(kde.get_ydata(), stats.gaussian_kde(values)(kde.get_xdata()))
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("ProtoNet" in t for t in texts)
    assert any(f"{values.mean():.3g}" in t for t in texts)
    saves_png(ax, tmp_path / "density.png")


def test_plot_density_draws_on_the_given_axes(values: np.ndarray) -> None:
    fig = Figure()
    ax = fig.add_subplot()
    assert plot_density(torch.tensor(values), ax=ax) is ax
    assert len(fig.axes) == 1


def test_plot_qq_against_the_fitted_normal(values: np.ndarray, tmp_path: Path) -> None:
    ax = plot_qq(values)
    assert len(ax.lines) == 2
    points, identity = ax.lines
    n = values.size
    # Filliben's plotting positions, by hand
    positions = (np.arange(1, n + 1) - 0.3175) / (n + 0.365)
    positions[0], positions[-1] = 1 - 0.5 ** (1 / n), 0.5 ** (1 / n)
    expected_x = values.mean() + values.std() * stats.norm.ppf(positions)
    np.testing.assert_allclose(points.get_xdata(), expected_x, rtol=1e-10)
    np.testing.assert_array_equal(points.get_ydata(), np.sort(values))
    np.testing.assert_array_equal(identity.get_xdata(), identity.get_ydata())
    # normal values hug the identity line; skewed ones do not
    assert np.mean(np.abs(points.get_ydata() - points.get_xdata())) < 0.1 * values.std()
    skewed_values = np.random.default_rng(1).exponential(size=400)
    skewed = plot_qq(skewed_values).lines[0]
    assert np.mean(np.abs(skewed.get_ydata() - skewed.get_xdata())) > 0.2 * skewed_values.std()
    saves_png(ax, tmp_path / "qq.png")


def test_plot_transfer(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    a = rng.normal(size=200)
    b = 0.8 * a + 0.3 * rng.normal(size=200)
    ax = plot_transfer(a, b, labels=("ProtoNet", "ANIL"))
    assert len(ax.collections) == 1
    np.testing.assert_allclose(ax.collections[0].get_offsets(), np.column_stack([a, b]))
    assert len(ax.lines) == 1
    line = ax.lines[0]
    fit = stats.linregress(a, b)
    np.testing.assert_allclose(line.get_ydata(), fit.slope * line.get_xdata() + fit.intercept)
    assert f"{rank_correlation(a, b).rho:.3f}" in ax.get_title()
    assert "ρ" in ax.get_title()
    assert "ProtoNet" in ax.get_xlabel()
    assert "ANIL" in ax.get_ylabel()
    saves_png(ax, tmp_path / "transfer.png")


@pytest.mark.parametrize(
    ("a", "b", "labels", "match"),
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0], ("x", "y"), "same episodes"),
        ([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], ("x",), "labels"),
        ([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], "xy", "labels"),
    ],
)
def test_plot_transfer_validation(a, b, labels, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plot_transfer(a, b, labels=labels)


def test_plot_trajectories(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    steps = np.arange(0, 5000, 1000)
    scores = rng.normal(size=(5, 30))
    easy, hard = [0, 1, 2], [10, 11, 12, 13]
    ax = plot_trajectories(steps, scores, easy, hard)
    assert len(ax.lines) == 7
    for line, column in zip(ax.lines, easy + hard, strict=True):
        np.testing.assert_array_equal(line.get_xdata(), steps)
        np.testing.assert_array_equal(line.get_ydata(), scores[:, column])
    colors = {matplotlib.colors.to_hex(line.get_color()) for line in ax.lines[:3]}
    assert colors == {matplotlib.colors.to_hex("tab:blue")}
    assert matplotlib.colors.to_hex(ax.lines[3].get_color()) == matplotlib.colors.to_hex("tab:red")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["easiest 3", "hardest 4"]
    saves_png(ax, tmp_path / "trajectories.png")


def test_plot_trajectories_validation() -> None:
    with pytest.raises(ValueError, match="steps"):
        plot_trajectories([0, 1], np.zeros((3, 4)), [0], [1])
    with pytest.raises(ValueError, match="hard_idx"):
        plot_trajectories([0, 1, 2], np.zeros((3, 4)), [0], [4])


@pytest.mark.parametrize("plot", [plot_density, plot_qq])
@pytest.mark.parametrize(
    ("bad", "match"), [([1.0, 1.0, 1.0], "constant"), ([1.0], "at least 2"), ([1.0, np.nan], "non-finite")]
)
def test_normality_plot_validation(plot, bad: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plot(bad)


def test_plots_leave_pyplot_alone(values: np.ndarray) -> None:
    before = plt.get_fignums()
    plot_density(values)
    plot_qq(values)
    plot_transfer(values, values**2)
    plot_trajectories([0, 1], np.stack([values, values]), [0], [1])
    assert plt.get_fignums() == before


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
    from lightning_episodes.analysis.plots import COLUMNS_PER_ROW, LEGEND_ROW, plot_study

    assert COLUMNS_PER_ROW == 2
    for dataset in ("glyphs", "glyphs-hard", "glyphs-100"):
        write_run(tmp_path / dataset / "base", 0.55, 0.01, [weighting("baseline")], dataset=dataset)
        write_run(tmp_path / dataset / "uniform", 0.50, 0.01, sampling=sampling(target="uniform"), dataset=dataset)
    runs = load(tmp_path)
    table = build_table(runs)
    assert len(table.columns) == 3
    figure = plot_study(table, runs)
    assert figure.get_size_inches() == pytest.approx((2 * 5.0, 2 * 7.0 + LEGEND_ROW))  # a legend of 2 arms: one row
    grid = [[figure.axes[2 * row + i] for i in range(2)] for row in range(4)]  # subplots' row-major order, 4 x 2
    titles = [[ax.get_title().replace("\n", " ") for ax in row] for row in grid]
    labels = [f"ProtoNet (Euclidean): {column.label}" for column in table.columns]
    assert titles[0] == labels[:2]
    assert titles[2][0] == labels[2]
    assert [ax.get_ylabel() for ax in grid[3]][0] == "validation accuracy (%)"
    assert [ax.get_visible() for row in grid for ax in row] == [True] * 4 + [True, False, True, False]


def test_study_plot_gives_each_algorithm_of_a_benchmark_its_own_panel(tmp_path: Path) -> None:
    """Two algorithms share a benchmark's column in the table; the plot draws each apart (its arms, its curves), an
    arm in the same colour in both."""
    from lightning_episodes.analysis.plots import plot_study

    curve = {"validation": [[250, 0.5], [500, 0.6]]}
    for name, distance in (("ProtoNet", "cosine"), ("MAML", None)):
        write_run(tmp_path / name / "base", 0.55, 0.01, [weighting("baseline")], name, distance, **curve)
        write_run(tmp_path / name / "uniform", 0.58, 0.01, [weighting("uniform")], name, distance, **curve)
    runs = load(tmp_path)
    table = build_table(runs)
    assert len(table.columns) == 1
    figure = plot_study(table, runs)
    tops, bottoms = figure.axes[:2], figure.axes[2:]
    assert [ax.get_title().split(":")[0] for ax in tops] == ["ProtoNet (cosine)", "MAML"]
    for top, bottom in zip(tops, bottoms, strict=True):
        assert [tick.get_text() for tick in top.get_xticklabels()] == [
            "baseline\n(1 seed)",
            "uniform (online)\n(1 seed)",
        ]
        assert len(bottom.lines) == 4  # two runs: a curve and its best step each
    colours = [[matplotlib.colors.to_hex(line.get_color()) for line in ax.lines[::2]] for ax in bottoms]
    assert colours[0] == colours[1]
    assert colours[0][0] != colours[0][1]


def _dozen_arms(root: Path) -> list[Any]:
    """Twelve arms of one benchmark, each with a validation curve: one whose interval reaches below 0, and two of a
    task sampler whose reference checkpoint is an absolute path (in the study folder, on another machine)."""
    curve = {"validation": [[250, 0.4], [500, 0.5]]}
    for k, target in enumerate(("baseline", "uniform", "easy", "hard")):
        write_run(root / target, 0.5 + 0.01 * k, 0.01, [weighting(target)], **curve)
    for target in ("uniform", "easy"):
        write_run(root / f"{target}_offline", 0.5, 0.01, [weighting(target, "offline")], **curve)
    options: list[dict[str, Any]] = [{"normalization": "psis"}, {"shuffle_weights": True}, {"mode": "resample"}]
    for k, changed in enumerate(options):
        write_run(root / f"option{k}", 0.5, 0.01, sampling=sampling(target="uniform", **changed), **curve)
    write_run(root / "wide", 0.1, 0.3, sampling=sampling(target="uniform", mode="resample", shuffle_weights=True),
              **curve)  # fmt: skip
    data = {"dataset": "mini-imagenet", "ways": 5, "shots": 1, "eval_ways": None, "seed": 0, "test_split": "test"}
    for name, reference in (("here", root / "refs" / "a.ckpt"), ("elsewhere", Path("/home/someone/refs/b.ckpt"))):
        sampler = {**data, "task_sampler": f"StaticDPP(reference_checkpoint='{reference}', images_per_class=5)"}
        write_run(root / name, 0.5, 0.01, sampling=sampling(target="baseline"), data=sampler, **curve)
    return load(root)


def test_study_plot_tells_a_dozen_arms_apart(tmp_path: Path) -> None:
    """Every arm has a (colour, marker) pair of its own, in its accuracy and its curves' best steps (issue 60)."""
    from lightning_episodes.analysis.plots import arm_style, plot_study

    assert len({(arm_style(k).colour, arm_style(k).marker) for k in range(56)}) == 56
    assert len({arm_style(k).colour for k in range(8)}) == 8
    runs = _dozen_arms(tmp_path)
    figure = plot_study(build_table(runs), runs, tmp_path)
    top, bottom = figure.axes[:2]
    points = [container.lines[0] for container in top.containers]
    assert len(points) == 12
    assert len({(matplotlib.colors.to_hex(p.get_color()), p.get_marker()) for p in points}) == 12
    best = [line for line in bottom.lines if len(line.get_xdata()) == 1]
    assert len({(matplotlib.colors.to_hex(b.get_color()), b.get_marker()) for b in best}) == 12


def test_study_plot_legend_is_outside_the_axes(tmp_path: Path) -> None:
    from lightning_episodes.analysis.plots import plot_study

    runs = _dozen_arms(tmp_path)
    figure = plot_study(build_table(runs), runs, tmp_path)
    figure.draw_without_rendering()  # lays the figure out (constrained layout), as saving it does
    assert not any(ax.get_legend() for ax in figure.axes)
    (legend,) = figure.legends
    assert len(legend.get_texts()) == 12
    box = legend.get_window_extent()
    assert not any(box.overlaps(ax.get_tightbbox()) for ax in figure.axes if ax.get_visible())


def test_study_plot_clips_intervals_to_0_100(tmp_path: Path) -> None:
    """An arm at 10% ± 30 draws its interval from 0 to 40, and the axis stays within [0, 100]."""
    from lightning_episodes.analysis.plots import plot_study

    runs = _dozen_arms(tmp_path)
    figure = plot_study(build_table(runs), runs, tmp_path)
    top = figure.axes[0]
    low, high = top.get_ylim()
    assert 0 <= low < high <= 100
    ends = [y for container in top.containers for segment in container.lines[2][0].get_segments() for _, y in segment]
    assert min(ends) == pytest.approx(0.0)
    assert all(0 <= y <= 100 for y in ends)


def test_study_plot_labels_hold_no_absolute_path(tmp_path: Path) -> None:
    """A path in the study folder is shown relative to it, another machine's as its file name."""
    from lightning_episodes.analysis.plots import plot_study, relative_paths

    assert relative_paths("x='/a/b/c.ckpt', y=1", Path("/a")) == "x='b/c.ckpt', y=1"
    assert relative_paths("x='/elsewhere/c.ckpt')", Path("/a")) == "x='…/c.ckpt')"
    runs = _dozen_arms(tmp_path)
    figure = plot_study(build_table(runs), runs, tmp_path)
    ticks = [tick.get_text().replace("\n", "") for tick in figure.axes[0].get_xticklabels()]
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    for label in ticks + legend:
        assert str(tmp_path) not in label, label
        assert "'/" not in label, label
    assert any("reference_checkpoint='refs/a.ckpt'" in label for label in legend)
    assert any("reference_checkpoint='…/b.ckpt'" in label for label in legend)

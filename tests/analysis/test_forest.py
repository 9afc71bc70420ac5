"""The forest plot of a study's comparisons: the values it draws against the intervals (scipy's t over the seed
pairs), its markers and colours, its legend outside the axes, labels that do not overlap with a dozen arms, and PNG
output (the command's option: tests/commands/test_compare.py)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from PIL import Image  # noqa: E402
from scipy import stats  # noqa: E402

from lightning_episodes.analysis import DifficultyTable, EpisodeRecord, paired_difference  # noqa: E402
from lightning_episodes.analysis.comparison import Comparison  # noqa: E402
from lightning_episodes.analysis.forest import plot_forest  # noqa: E402
from lightning_episodes.analysis.report import Cell  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _table(accuracies: np.ndarray) -> DifficultyTable:
    return DifficultyTable(
        tuple(EpisodeRecord(i, (0, 1), ((2,), (3,)), ((4,), (5,)), 1.0, float(a)) for i, a in enumerate(accuracies))
    )


def _study(arms: int = 12, cells: tuple[str, ...] = ("n60/cell_a", "n60/cell_b")) -> list[Comparison]:
    """``arms`` treatments in each cell, long names like the study's; every third has one seed, the others three."""
    rng = np.random.default_rng(3)
    comparisons = []
    for folder in cells:
        baseline = [rng.integers(0, 6, size=50) / 5 for _ in range(3)]
        for arm in range(arms):
            k = 1 if arm % 3 == 2 else 3
            shift = (arm - arms / 2) / 100
            treated = [np.clip(b + shift + rng.integers(-1, 2, size=50) / 5, 0, 1) for b in baseline[:k]]
            difference = paired_difference([_table(b) for b in baseline[:k]], [_table(t) for t in treated])
            seeds = tuple(f"seed{s}" for s in range(k))
            name = f"baseline_online__arm_{arm}_with_a_long_name"
            comparisons.append(Comparison(folder, "Glyphs", "ProtoNet", name, Cell(0.5, 0.01), Cell(0.5, 0.01),
                                          difference, seeds))  # fmt: skip
    return comparisons


def test_the_plotted_values_are_the_intervals_over_trainings() -> None:
    comparisons = _study()
    figure, rows = plot_forest(comparisons, "baseline_online", "n60")
    assert len(rows) == len(comparisons) == 24
    for comparison, row in zip(comparisons, rows, strict=True):
        d = comparison.difference
        if d.trainings >= 2:  # scipy's one-sample t interval of the seed pairs' differences
            low, high = stats.ttest_1samp(d.seed_differences or (), 0.0).confidence_interval(0.95)
            assert (row.over, row.trainings) == ("trainings", d.trainings)
            assert row.label == f"{comparison.treatment} (3 trainings)"
        else:  # one seed pair: scipy's paired t interval over the test episodes
            low, high = d.mean - d.ci95, d.mean + d.ci95
            assert (row.over, row.trainings) == ("test episodes", 1)
            assert row.label == f"{comparison.treatment} (1 training)"
        assert (row.low, row.high) == pytest.approx((100 * low, 100 * high), rel=1e-9)
        assert row.mean == pytest.approx(100 * (low + high) / 2, rel=1e-9)
    # what is drawn is what is returned: each error bar's centre, height and ends, and its marker
    (ax,) = [ax for ax in figure.axes if ax.get_xlabel()]
    assert len(ax.containers) == 24
    for container, row in zip(ax.containers, rows, strict=True):
        line, _, (bars,) = container
        assert (line.get_xdata()[0], line.get_ydata()[0]) == pytest.approx((row.mean, row.y))
        ((x0, y0), (x1, y1)) = bars.get_segments()[0]
        assert (x0, x1, y0, y1) == pytest.approx((row.low, row.high, row.y, row.y))
        assert line.get_marker() == ("o" if row.over == "trainings" else "D")
        assert to_hex(line.get_markerfacecolor()) == ("#ffffff" if row.over == "test episodes" else
                                                      to_hex(line.get_color()))  # fmt: skip
    zero = [line for line in ax.lines if np.asarray(line.get_xdata()).tolist() == [0, 0]]
    assert len(zero) == 1


def test_cells_group_their_rows_and_each_treatment_keeps_its_colour() -> None:
    figure, rows = plot_forest(_study(), "baseline_online")
    (ax,) = [ax for ax in figure.axes if ax.get_xlabel()]
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert labels[0] == "n60/cell_a"
    assert labels[13] == "n60/cell_b"
    assert all(not label.startswith("/") for label in labels)
    assert [ax.get_yticklabels()[i].get_fontweight() for i in (0, 13)] == ["bold", "bold"]
    assert [row.folder for row in rows] == ["n60/cell_a"] * 12 + ["n60/cell_b"] * 12
    assert all(a.y > b.y for a, b in itertools.pairwise(rows))  # the first row on top
    colours = [to_hex(container[0].get_color()) for container in ax.containers]
    assert len(set(colours[:12])) == 12, "a dozen arms, a dozen colours"
    assert colours[:12] == colours[12:]


def test_the_legend_is_outside_the_axes_and_no_labels_overlap(tmp_path: Path) -> None:
    figure, _ = plot_forest(_study(), "baseline_online", "n60")
    path = tmp_path / "forest.png"
    figure.savefig(path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert path.stat().st_size > 20_000
    with Image.open(path) as image:
        image.verify()
        assert image.size[1] > image.size[0] > 500  # a row per arm: taller than wide
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    (ax,) = [ax for ax in figure.axes if ax.get_xlabel()]
    (legend,) = figure.legends
    texts = [text.get_text() for text in legend.get_texts()]
    assert texts == [
        "95% t interval over trainings (k − 1 degrees of freedom)",
        "one training: 95% interval over test episodes only (the spread between trainings unmeasured)",
    ]
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    for ticks in (ax.get_yticklabels(), figure.axes[-1].get_yticklabels()):  # the labels, and the numbers at right
        boxes = sorted((tick.get_window_extent(renderer) for tick in ticks), key=lambda box: box.y0)
        assert all(low.y1 <= high.y0 for low, high in itertools.pairwise(boxes))
    # nothing cut off: the labels inside the figure on the left, the legend above its bottom
    assert all(tick.get_window_extent(renderer).x0 >= 0 for tick in ax.get_yticklabels())
    assert legend.get_window_extent(renderer).y0 >= 0


def test_one_kind_of_row_shows_one_legend_entry() -> None:
    figure, _ = plot_forest([c for c in _study(3, ("cell",)) if c.over_trainings], "baseline_online")
    assert [text.get_text() for text in figure.legends[0].get_texts()] == [
        "95% t interval over trainings (k − 1 degrees of freedom)"
    ]
    labels = [tick.get_text() for tick in figure.axes[0].get_yticklabels()]
    assert labels == [f"baseline_online__arm_{k}_with_a_long_name (3 trainings)" for k in (0, 1)]  # no heading


def test_the_forest_leaves_pyplot_alone_and_needs_a_row() -> None:
    before = plt.get_fignums()
    plot_forest(_study(2, ("cell",)), "baseline_online")
    assert plt.get_fignums() == before
    with pytest.raises(ValueError, match="at least one comparison"):
        plot_forest([], "baseline_online")


def test_rows_of_different_baselines_are_labelled_with_both_arms() -> None:
    """A contrast between two treatment arms beside the treatments (``compare --contrast``): where the rows have more
    than one baseline, each is labelled treatment − baseline, each pair keeps a colour of its own (one treatment
    against two baselines: two colours) and the axis says each row has its own baseline."""
    treatments = _study(2, ("cell",))
    comparisons = [
        *(replace(c, baseline="baseline_online") for c in treatments),
        replace(treatments[0], baseline="uniform_online_placebo"),
    ]
    figure, rows = plot_forest(comparisons, "baseline_online")
    name = treatments[0].treatment
    assert [row.label for row in rows] == [
        f"{name} − baseline_online (3 trainings)",
        f"{treatments[1].treatment} − baseline_online (3 trainings)",
        f"{name} − uniform_online_placebo (3 trainings)",
    ]
    assert [row.baseline for row in rows] == ["baseline_online", "baseline_online", "uniform_online_placebo"]
    (ax,) = [ax for ax in figure.axes if ax.get_xlabel()]
    assert ax.get_xlabel() == "test accuracy, treatment − its baseline (percentage points)"
    assert ax.get_title() == "Each treatment − its baseline, 95% interval"
    assert [tick.get_text() for tick in ax.get_yticklabels()] == [row.label for row in rows]
    assert len({to_hex(container[0].get_color()) for container in ax.containers}) == 3
    # one baseline (or told so): the labels name the treatments alone, as before
    _, rows = plot_forest(comparisons[:2], "baseline_online")
    assert [row.label for row in rows] == [f"{c.treatment} (3 trainings)" for c in treatments]
    _, rows = plot_forest(comparisons, "baseline_online", baselines=False)
    assert [row.label for row in rows] == [f"{name} (3 trainings)", f"{treatments[1].treatment} (3 trainings)",
                                           f"{name} (3 trainings)"]  # fmt: skip

"""Tests for the §4.2 plots: the artists drawn, their data against independent references, PNG output."""

from __future__ import annotations

from pathlib import Path

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

"""The CI-safe ``--quick`` modes of the benchmarks this package's performance claims rest on run end to end."""

from __future__ import annotations

import re

import pytest


@pytest.mark.slow
def test_the_mini_imagenet_shaped_comparison_runs_quick_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import miniimagenet_fit

    rows = miniimagenet_fit.main(["--quick"])
    assert [row[1] for row in rows] == ["lightning-episodes", "learn2learn"]
    ours, theirs = (float(row[2].replace(",", "")) for row in rows)
    assert ours > 0
    assert theirs > 0
    assert rows[1][3] == "1.00x"
    assert re.fullmatch(r"\d+\.\d+x", rows[0][3])
    assert all(re.fullmatch(r"\d+\.\d ± \d+\.\d", row[4]) for row in rows)  # accuracies scored on the same episodes
    assert "| conv4 5w1s5q x 2 | lightning-episodes |" in capsys.readouterr().out


def test_the_benchmarks_refuse_cuda_graphs_without_cuda() -> None:
    from benchmarks import miniimagenet_fit, step_overhead

    for main in (miniimagenet_fit.main, step_overhead.main):
        with pytest.raises(SystemExit):
            main(["--cuda-graphs"])


@pytest.mark.slow
def test_the_task_sampler_cost_runs_quick(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import task_sampler_cost

    rows = task_sampler_cost.main(["--quick"])
    assert [row[0] for row in rows] == list(task_sampler_cost.CONTENDERS)
    assert rows[0][2] == "1.00x"
    assert all(float(row[1]) > 0 and re.fullmatch(r"\d+\.\d\dx", row[2]) for row in rows)
    assert "| adaptive |" in capsys.readouterr().out

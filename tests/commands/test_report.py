"""`lightning-episodes report`: the table it prints and writes (Markdown, CSV, the figure), as `python -m`, its
warnings and errors; the table itself is tested in tests/analysis/test_report.py."""

from __future__ import annotations

import runpy
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from matplotlib.figure import Figure

from lightning_episodes.analysis.report import build_table
from lightning_episodes.commands.report import main
from tests.analysis.helpers import load, weighting, write_run, write_runs


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """The column of :func:`~tests.analysis.helpers.write_runs`, worked out by hand."""
    return write_runs(tmp_path)


def test_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = write_runs(tmp_path / "runs", seeds=3)  # marks need cells of two or more seeds
    code = main([str(runs), "--markdown", str(tmp_path / "out/table.md"), "--csv", str(tmp_path / "out/t.csv")])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "out/table.md").read_text()
    assert "**52.00 ± 0.80**† (sd 0.26, 3 seeds)" in printed
    assert "Left out" not in printed
    assert (tmp_path / "out/t.csv").read_text() == build_table(load(runs)).to_csv()


def _unreadable_study(runs: Path) -> list[tuple[Path, str]]:
    """:func:`write_runs`'s study with a corrupt record, an empty one, and its ProtoNet baseline cut short (the
    users' report: its row and every † it gave vanished from the table, with a warning and exit status 0)."""
    (runs / "pn/broken").mkdir()
    cases = [
        (runs / "pn/baseline/test_results.json", "is not valid JSON: "),
        (runs / "pn/broken/test_results.json", "is not valid JSON: "),
        (runs / "pn/empty/test_results.json", "is empty (0 bytes)"),
    ]
    baseline = cases[0][0]
    baseline.write_text(baseline.read_text()[:40])  # a test killed while writing it
    cases[1][0].write_text("{not json")
    (runs / "pn/empty").mkdir()
    cases[2][0].write_text("")
    return cases


def test_an_unreadable_record_stops_the_report_naming_each_one(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _unreadable_study(runs)
    markdown = tmp_path / "out/table.md"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said as errors, not warnings
        assert main([str(runs), "--markdown", str(markdown)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert not markdown.exists()
    lines = err.splitlines()
    assert len(lines) == len(cases), err  # one line per record
    for line, (path, reason) in zip(lines, sorted(cases), strict=True):  # in path order
        assert line.startswith(f"lightning-episodes report: error: {path} {reason}"), line
        assert line.endswith("(--skip-unreadable leaves it out)"), line


def test_skip_unreadable_leaves_them_out_and_says_so_under_the_table(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _unreadable_study(runs)
    markdown = tmp_path / "out/table.md"
    assert main([str(runs), "--markdown", str(markdown), "--skip-unreadable"]) == 0
    printed = capsys.readouterr().out
    assert markdown.read_text() == printed
    # the baseline's row is gone, and with it every †; the table says why, naming each record it left out
    assert "| ProtoNet (Euclidean) | baseline |" not in printed
    assert "†" not in printed.split("| MAML |")[0]
    table, note = printed.split("Left out of this table (--skip-unreadable): 3 test records that cannot be read.\n")
    assert "| Algorithm | Sampling |" in table
    for line, (path, reason) in zip(note.splitlines(), sorted(cases), strict=True):
        assert line.startswith(f"- {path} {reason}"), line
    assert main([str(runs / "pn/empty"), "--skip_unreadable"]) == 2  # nothing readable left: no table
    assert "error: no readable test_results.json under" in capsys.readouterr().err


def test_the_command_warns_when_records_come_from_different_versions(tmp_path: Path) -> None:
    made = {"python": "3.11.7", "torch": "2.14.1", "numpy": "2.4.6", "cpu": "Intel Xeon"}
    write_run(tmp_path / "a", 0.50, 0.01, environment=made)
    write_run(tmp_path / "b", 0.51, 0.01, seed=1, environment={**made, "cpu": "AMD EPYC"})  # the CPU alone: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main([str(tmp_path)]) == 0
    write_run(tmp_path / "c", 0.52, 0.01, seed=2, environment={**made, "numpy": "2.5.0"})
    write_run(tmp_path / "d", 0.53, 0.01, seed=3)  # an older record, without versions, says nothing
    with pytest.warns(UserWarning, match=r"made with different versions: numpy 2\.4\.6 / 2\.5\.0$"):
        assert main([str(tmp_path)]) == 0


def test_command_without_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no test_results.json" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
def test_runs_as_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs = write_runs(tmp_path, seeds=2)
    monkeypatch.setattr(sys, "argv", ["lightning_episodes", "report", str(runs), "--bold-within", "scenario"])
    with pytest.raises(SystemExit) as exit_info:  # python -m lightning_episodes report ...
        runpy.run_module("lightning_episodes", run_name="__main__")
    assert exit_info.value.code == 0
    assert "| MAML | baseline | **47.00 ± 1.00** (sd " in capsys.readouterr().out


def test_best_step_and_convergence_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run a peaks at step 600 of 900 (converged); run b's best is its last (not converged); on a tie the first
    best counts, as the checkpoint callback keeps it (run c peaks at 300); an old record has no curve."""
    curves = {
        "a": [[300, 0.40], [600, 0.47], [900, 0.45]],
        "b": [[300, 0.40], [600, 0.44], [900, 0.46]],
        "c": [[300, 0.45], [600, 0.45], [900, 0.44]],
    }
    for seed, (name, curve) in enumerate(curves.items()):
        write_run(tmp_path / name, 0.45, 0.01, [weighting("uniform")], seed=seed, validation=curve)
    write_run(tmp_path / "old", 0.45, 0.01, [weighting("baseline")])
    runs = {r.path.parent.name: r for r in load(tmp_path)}
    assert [(runs[n].best_step, runs[n].converged) for n in "abc"] == [(600, True), (900, False), (300, True)]
    assert (runs["old"].validation, runs["old"].best_step, runs["old"].converged) == ((), None, None)

    plot = tmp_path / "out/study.png"
    assert main([str(tmp_path), "--plot", str(plot)]) == 0
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if line.startswith("| Mini-ImageNet")]
    benchmark = "| Mini-ImageNet, Conv-4, 5-way 1-shot | ProtoNet (Euclidean) | uniform (online)"
    assert lines == [  # best and last validation with their steps: a falls 2 points after its peak, c 1
        f"{benchmark} | 0 | 45.00 ± 1.00 | 47.00 | 600 | 45.00 | 900 | yes |",
        f"{benchmark} | 1 | 45.00 ± 1.00 | 46.00 | 900 | 46.00 | 900 | no |",
        f"{benchmark} | 2 | 45.00 ± 1.00 | 45.00 | 300 | 44.00 | 900 | yes |",
    ]
    assert plot.read_bytes().startswith(b"\x89PNG"), "a PNG figure"

    # --validation-at: each run's validation at those steps, – where it did not validate (no run did at 750)
    assert main([str(tmp_path), "--validation-at", "[300,900,750]"]) == 0
    printed = capsys.readouterr().out
    assert "| Converged | Val. acc. at 300 (%) | Val. acc. at 900 (%) | Val. acc. at 750 (%) |" in printed
    assert "|---|---:|---:|---:|\n" in printed
    lines = [line for line in printed.splitlines() if line.startswith("| Mini-ImageNet")]
    assert [line.split(" | ")[-4:] for line in lines] == [
        ["yes", "40.00", "45.00", "– |"],
        ["no", "40.00", "46.00", "– |"],
        ["yes", "45.00", "44.00", "– |"],
    ]


def test_the_runs_table_names_each_runs_processor_only_where_they_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seeds trained on different machines (each pair on one) are read with the processor beside each run; runs of
    one processor get no such column."""
    intel = {"cpu": "Intel(R) Xeon(R) Gold 6430", "cpu_flags": "avx2 avx512f amx_bf16", "accelerator": "cpu"}
    amd = {"cpu": "AMD EPYC 7B13", "cpu_flags": "avx2", "accelerator": "cpu"}
    curve = [[300, 0.40], [600, 0.45]]
    for seed, made in enumerate((intel, amd)):
        write_run(tmp_path / f"seed{seed}", 0.45, 0.01, [weighting("uniform")], seed=seed, validation=curve,
                  environment={**made, "torch": "2.14.1"})  # fmt: skip
    assert main([str(tmp_path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "| Converged |" in line or "| no |" in line]
    assert lines[0].endswith("| Converged | Made on |")
    assert [line.split(" | ")[-1] for line in lines[1:]] == [
        "Intel(R) Xeon(R) Gold 6430 [avx2 avx512f amx_bf16] (cpu) |",
        "AMD EPYC 7B13 [avx2] (cpu) |",
    ]

    assert main([str(tmp_path / "seed1")]) == 0  # one processor: nothing to tell apart
    assert "Made on" not in capsys.readouterr().out


def test_headers_and_plot_titles_name_what_differs_in_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[lr_scheduler=cosine]``, not the object text ``CosineToZero(last_epoch=-1, max_steps=none, start=0)``."""
    cosine = {"class_path": "lightning_episodes.algorithms.schedules.CosineToZero",
              "init_args": {"start": 0, "last_epoch": -1, "max_steps": None}}  # fmt: skip
    for name, schedule in (("constant", None), ("cosine", cosine)):
        path = write_run(tmp_path / name, 0.5, 0.01, validation=[[100, 0.4], [200, 0.5]])
        config = yaml.safe_load(path.with_name("config.yaml").read_text())
        config["model"] = {"class_path": "lightning_episodes.algorithms.ProtoNet",
                           "init_args": {"lr_scheduler": schedule}}  # fmt: skip
        path.with_name("config.yaml").write_text(yaml.safe_dump(config))
    titles: list[str] = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, *_, **__: titles.extend(a.get_title() for a in figure.axes))
    assert main([str(tmp_path), "--plot", str(tmp_path / "study.png")]) == 0
    printed = capsys.readouterr().out
    columns = [f"Mini-ImageNet, Conv-4, 5-way 1-shot [lr_scheduler={word}]" for word in ("cosine", "none")]
    assert printed.splitlines()[0] == f"| Algorithm | Sampling | {' | '.join(columns)} |"
    assert "CosineToZero" not in printed
    assert [" ".join(title.split()) for title in titles if title] == [f"ProtoNet (Euclidean): {c}" for c in columns]

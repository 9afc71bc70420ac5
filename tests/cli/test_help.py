"""``lightning-episodes --help`` lists every subcommand with one line, and every listed subcommand works; a tool's
``--help`` has an example and says its types in words."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import lightning_episodes
from lightning_episodes.cli import TOOLS, EpisodicCLI, run_tool

BIN = Path(sys.executable).parent / "lightning-episodes"
EXPECTED = ["fit", "validate", "test", "predict", "difficulty", "report", "compare", "configs"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=300)


def _listed(help_text: str) -> dict[str, str]:
    """``name -> one-line help`` of the indented command lines of the top-level help."""
    return dict(re.findall(r"^  ([a-z]+) +(\S.*)$", help_text, flags=re.MULTILINE))


def test_help_lists_every_subcommand_with_one_line() -> None:
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    listed = _listed(done.stdout)
    assert list(listed) == EXPECTED
    assert all(len(text) > 20 for text in listed.values())
    # the commands the console script dispatches are exactly those listed
    assert sorted(listed) == sorted([*EpisodicCLI.subcommands(), *TOOLS])
    assert "LIGHTNING_EPISODES_DEBUG" in done.stdout


def test_no_arguments_prints_the_help_and_fails() -> None:
    done = _run()
    assert done.returncode == 2
    assert list(_listed(done.stderr)) == EXPECTED


def test_version() -> None:
    done = _run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"lightning-episodes {lightning_episodes.__version__}"


def test_lightnings_predict_is_not_a_trainer_subcommand() -> None:
    """Lightning's ``predict`` needs a ``predict_step`` that no episodic algorithm has; ours is a tool."""
    assert set(EpisodicCLI.subcommands()) == {"fit", "validate", "test"}
    assert TOOLS["predict"][0] == "lightning_episodes.commands.predict"


@pytest.mark.slow
@pytest.mark.parametrize("command", EXPECTED)
def test_every_listed_subcommand_has_working_help(command: str) -> None:
    done = _run(command, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.match(rf"usage: lightning-episodes (\[options\] )?{command} ", done.stdout), done.stdout[:200]
    if command == "predict":
        assert "--support" in done.stdout
        assert "--query" in done.stdout
        assert "--trainer" not in done.stdout  # not Lightning's predict


@pytest.mark.parametrize("command", sorted(TOOLS))
def test_a_tools_help_has_an_example_and_types_in_words(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_tool([command, "--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    assert re.search(rf"^examples?:\n  lightning-episodes {command}( |$)", shown, flags=re.MULTILINE), shown
    for python in ("<class", "Literal[", "| null", "NoneType", "Optional["):
        assert python not in shown, python
    words = " ".join(shown.split())  # the help wraps its lines
    assert re.search(r"\((required, )?type: (path|string)[,)]", words), words  # configs requires nothing

"""`lightning_episodes.analysis` is a library of statistics and reports: the command-line programs built on it live
in `lightning_episodes.commands`, and no import runs back from the library to them. Scoring and the per-episode
tables live in `lightning_episodes.evaluation`; the package still exports the tables' names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ANALYSIS = Path(__file__).resolve().parents[2] / "lightning_episodes" / "analysis"
#: What only a command line needs.
FORBIDDEN = ("argparse", "jsonargparse", "lightning_episodes.commands", "lightning_episodes.cli")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(ANALYSIS.glob("*.py")), ids=lambda p: p.name)
def test_an_analysis_module_imports_no_command_line(path: Path) -> None:
    imported = _imports(path)
    assert not {name for name in imported if name.split(".")[0] in FORBIDDEN or name.startswith(FORBIDDEN)}
    assert "main" not in {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}


def test_the_names_that_moved_to_evaluation_still_import_from_analysis() -> None:
    import lightning_episodes.analysis as analysis
    import lightning_episodes.evaluation as evaluation

    for name in ("DifficultyTable", "EpisodeRecord", "JoinedDifficulties", "join_on_episode"):
        assert getattr(analysis, name) is getattr(evaluation, name)

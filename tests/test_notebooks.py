"""Every notebook in notebooks/ runs top to bottom (fast setting), and the committed copies show a full run."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
FAST = "LIGHTNING_EPISODES_NOTEBOOK_FAST"
OUTPUT = "LIGHTNING_EPISODES_NOTEBOOK_OUTPUT"


def _code_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _text(cell: nbformat.NotebookNode) -> str:
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")


def test_there_are_notebooks() -> None:
    assert [path.name for path in NOTEBOOKS] == ["episode_difficulty.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_the_committed_notebook_shows_one_in_order_run_without_errors(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    cells = _code_cells(notebook)
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1)), "run it top to bottom"
    for cell in cells:
        assert cell.outputs, f"cell {cell.execution_count} has no output"
        assert not [o for o in cell.outputs if o.output_type == "error"], f"cell {cell.execution_count} failed"
    assert sum(o.output_type == "display_data" for cell in cells for o in cell.outputs) >= 3  # the figures
    assert "setting 'full'" in _text(cells[0]), "commit the outputs of a full run, not of the fast setting"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_the_notebook_runs_top_to_bottom_in_the_fast_setting(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the kernel inherits this process's environment
    monkeypatch.setenv(FAST, "1")
    monkeypatch.setenv(OUTPUT, str(tmp_path))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, if a cell fails
    texts = "\n".join(_text(cell) for cell in _code_cells(notebook))
    assert "setting 'fast'" in texts
    if path.stem == "episode_difficulty":
        assert "command and function agree on every episode: True" in texts
        assert "Spearman ρ" in texts
        assert "lines cross:" in texts
        assert (tmp_path / "protonet-conv4-tracking.npz").is_file()

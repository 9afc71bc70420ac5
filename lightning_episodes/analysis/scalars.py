"""A run's logged scalars kept beside its records as a CSV table, ``scalars.csv`` (a study keeps its curves without
its binary event files), read in either of its two layouts."""

from __future__ import annotations

import csv
from pathlib import Path

#: the table's name beside a run's ``test_results.json``
SCALARS_FILE = "scalars.csv"

#: a run's scalars by tag: ``(step, value)`` pairs
Scalars = dict[str, list[tuple[int, float]]]


def read_scalar_table(path: str | Path) -> list[tuple[str, int, float]]:
    """``(tag, step, value)`` for every filled cell of a scalars table, in the file's order (non-finite values kept).
    Its rows are ``tag,step,value`` (``scripts/study_diagnostics.py --export`` writes them from the event files), or
    a ``step`` column and one column per tag (Lightning's ``CSVLogger`` ``metrics.csv``), whose empty cells are the
    tags not logged at that step.

    Raises:
        ValueError: naming the file, if its header is neither layout's.
    """
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        if fields[:3] == ["tag", "step", "value"]:
            cells = [(row["tag"], row["step"], row["value"]) for row in reader]
        elif "step" in fields:
            cells = [(tag, row["step"], value) for row in reader for tag, value in row.items() if tag != "step"]
        else:
            raise ValueError(f"{path} is not a scalars table: its header has neither tag,step,value nor step")
    return [(tag, int(float(step)), float(value)) for tag, step, value in cells if value]

"""``lightning-episodes report RUN_DIRS... [--markdown PATH] [--csv PATH] [--bold-within column|scenario] [--plot
FILE] [--validation-at [STEP,...]] [--skip-unreadable]``: the paper's results tables from the ``test_results.json``
files of test runs (:mod:`lightning_episodes.analysis.report` says how runs become rows, columns and cells), then a
line per run with its best validation step, whether it converged and its validation accuracy at the steps of
``--validation-at``, and with ``--plot`` a figure of the arms and the runs'
validation curves. A record that cannot be read stops it, named; ``--skip-unreadable`` leaves such records out and
names them under the table."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jsonargparse.typing import PositiveInt

from lightning_episodes.analysis.report import (
    BoldWithin,
    build_table,
    find_results,
    mixed_versions,
    read_result,
    runs_markdown,
)
from lightning_episodes.commands._common import (
    add_skip_unreadable_argument,
    arguments,
    command_parser,
    probe_output,
    refuse_unreadable,
    unreadable_note,
)
from lightning_episodes.evaluation.record import RESULTS_FILE, UnreadableRecord

DESCRIPTION = """\
Results tables in the paper's format from test runs: every test_results.json under the given folders, one
row per algorithm and sampling scheme, one column per benchmark (where one algorithm was trained on a
benchmark in several ways, each way is a column named by what differs: [lr_scheduler=cosine]), seeds
combined; then a line per run with its best validation step (and, with --validation-at, its validation
accuracy at those steps). A record that cannot be read (empty, corrupt) stops it, each such record named;
--skip-unreadable leaves them out and names them under the table.

examples:
  lightning-episodes report runs/study --markdown table.md --plot study.png
  lightning-episodes report runs/study --validation-at [1000,2000,3000]
"""


def parser() -> Any:
    """The ``report`` parser."""
    parser = command_parser("report", DESCRIPTION)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (searched recursively) or result files")
    parser.add_argument("--markdown", type=Path | None, default=None, help="also write the Markdown table here")
    parser.add_argument("--csv", type=Path | None, default=None, help="write the table as CSV (a line per cell)")
    # --bold_within too: the spelling of every other option, and the one an error message names
    parser.add_argument(
        "--bold-within",
        "--bold_within",
        type=BoldWithin,
        default="column",
        help="where the best entry is bold: per column, or per algorithm in each column",
    )
    parser.add_argument(
        "--plot",
        type=Path | None,
        default=None,
        help="also draw each arm's test accuracy with its interval and each run's validation curve (PNG, PDF, SVG)",
    )
    parser.add_argument(
        "--validation-at",
        "--validation_at",
        type=list[PositiveInt],
        default=[],
        help="steps at which each run's line also shows its validation accuracy, e.g. [1000,2000,3000] (– where a "
        "run did not validate at that step)",
    )
    add_skip_unreadable_argument(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the Markdown table of the runs and write the requested files.

    Returns:
        0, or 2 (a usage error, as every command's) when no result is found, or when a record cannot be read and
        ``--skip-unreadable`` is not given (each such record named on stderr, one line each).

    Raises:
        argparse.ArgumentError: for an unknown option or a value of the wrong type.
    """
    args = parser().parse_args(arguments(argv))
    probe_output(args.markdown, "--markdown")
    probe_output(args.csv, "--csv")
    probe_output(args.plot, "--plot")
    results, unreadable = [], []
    for path in find_results(args.runs):
        try:
            results.append(read_result(path))
        except UnreadableRecord as error:
            unreadable.append(error)
    # a record left out silently takes its run out of its cell, and a baseline's its row and every † it gives
    if unreadable and not args.skip_unreadable:
        return refuse_unreadable("report", unreadable)
    if not results:
        found = f"no readable {RESULTS_FILE}" if unreadable else f"no {RESULTS_FILE}"
        print(f"lightning-episodes report: error: {found} under {', '.join(map(str, args.runs))}", file=sys.stderr)
        return 2
    mixed = mixed_versions(results)
    if mixed is not None:
        warnings.warn(f"the records of this table were made with different versions: {mixed}", stacklevel=1)
    table = build_table(results, args.bold_within)
    markdown = table.to_markdown()
    runs = runs_markdown(results, args.validation_at)
    if runs:  # the runs that recorded their validation curve: where each peaked, and whether it converged
        markdown += "\n" + runs
    markdown += unreadable_note(unreadable)
    print(markdown, end="")
    if args.plot is not None:
        from lightning_episodes.analysis.plots import plot_study

        # the study folder: the arms' names show paths relative to it
        root = Path(os.path.commonpath([(p if p.is_dir() else p.parent).absolute() for p in args.runs]))
        plot_study(table, results, root).savefig(args.plot)
    for path, text in ((args.markdown, markdown), (args.csv, table.to_csv() if args.csv else "")):
        if path is not None:
            path.write_text(text)
    return 0

#!/usr/bin/env python
"""Are two run trees the same computation, bit for bit?

A study that runs its later arms from a newer commit than its first ones (a faster evaluation, a refactor) can say
that the newer code computes what the older did only if short runs of each kind agree bit for bit. This compares two
trees of run folders (the same runs made twice: from two commits, two machines, two worker counts), file by file
under matching relative paths:

* every checkpoint (``*.ckpt``, loaded with ``weights_only=True``: no code runs): every tensor (``torch.equal``,
  dtype included), number and string of the model, optimiser, loops and callbacks;
* every CSV (``scalars.csv``, ``metrics.csv``, ``test_episodes.csv``) line by line, and every ``test_results.json``;

with the two trees' own folders written as ``<run>`` in both, and the wall-clock timings (``*_ms``, ``*_seconds``,
``*_time``) left out, as are the keys, tags and columns that match ``--ignore`` (e.g. a setting that the newer
commit added, at the default that does what the older one did, and the record's hash of the settings). A file in
one tree only is a difference. Prints the first differences and a summary; exits 0 when the trees agree, 1 when
they differ::

    python scripts/same_runs.py runs/check/old runs/check/new --ignore 'drop_head|config_hash'
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

#: names of wall-clock measurements (the last part of a key or tag), which differ between any two runs
TIMING = re.compile(r"(^|_)(ms|seconds|time)$")
COMPARED = ("*.ckpt", "*.csv", "test_results.json")


def leaves(value: Any, root: str, key: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, leaf)`` of a nested checkpoint or record, with ``root`` written as ``<run>`` in keys and strings."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from leaves(item, root, f"{key}/{str(name).replace(root, '<run>')}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from leaves(item, root, f"{key}/{index}")
    elif isinstance(value, str):
        yield key, value.replace(root, "<run>")
    else:
        yield key, value


def same_leaf(a: Any, b: Any) -> bool:
    """Bit-for-bit equality of two leaves (NaN equals NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and bool(a == b)


def nested_differences(a: Any, b: Any, roots: tuple[str, str], skip: Callable[[str], bool]) -> list[str]:
    """The paths at which two nested values differ, those that match ``skip`` left out."""
    left, right = dict(leaves(a, roots[0])), dict(leaves(b, roots[1]))
    keys = sorted(k for k in set(left) | set(right) if not skip(k))
    return [k for k in keys if k not in left or k not in right or not same_leaf(left[k], right[k])]


def csv_rows(text: str, root: str, skip: Callable[[str], bool]) -> list[list[str]]:
    """A CSV's rows without what ``skip`` matches: the rows of a long table (``tag,step,value``) by their tag, the
    columns of a wide table by their header."""
    rows = list(csv.reader(io.StringIO(text.replace(root, "<run>"))))
    if not rows:
        return rows
    if rows[0][:1] == ["tag"]:
        return [row for row in rows if not skip(row[0])]
    kept = [i for i, name in enumerate(rows[0]) if not skip(name)]
    return [[row[i] for i in kept if i < len(row)] for row in rows]


def compare_file(relative: Path, roots: tuple[Path, Path], skip: Callable[[str], bool]) -> list[str]:
    """What differs in one file present in both trees: the keys of a checkpoint or record, the first row of a CSV."""
    a, b = (root / relative for root in roots)
    names = (str(roots[0]), str(roots[1]))
    if relative.suffix == ".ckpt":
        loaded = [torch.load(path, map_location="cpu", weights_only=True) for path in (a, b)]
    elif relative.suffix == ".json":
        loaded = [json.loads(path.read_text()) for path in (a, b)]
    else:
        left, right = csv_rows(a.read_text(), names[0], skip), csv_rows(b.read_text(), names[1], skip)
        if left == right:
            return []
        pairs = enumerate(zip(left, right, strict=False))
        first = next((i for i, (x, y) in pairs if x != y), min(len(left), len(right)))
        return [f"row {first} ({len(left)} and {len(right)} rows)"]
    return nested_differences(loaded[0], loaded[1], names, skip)


def compare_trees(old: Path, new: Path, ignore: Sequence[str] = ()) -> tuple[int, dict[Path, list[str]]]:
    """``(files compared, {file: what differs})`` of two run trees, timings and what matches a regular expression of
    ``ignore`` left out."""
    patterns = [re.compile(pattern) for pattern in ignore]

    def skip(key: str) -> bool:
        return bool(TIMING.search(key.rsplit("/", 1)[-1])) or any(p.search(key) for p in patterns)

    found = [{p.relative_to(root) for pattern in COMPARED for p in root.rglob(pattern)} for root in (old, new)]
    differences = {p: [f"only in {old}"] for p in sorted(found[0] - found[1])}
    differences |= {p: [f"only in {new}"] for p in sorted(found[1] - found[0])}
    both = sorted(found[0] & found[1])
    for relative in both:
        if what := compare_file(relative, (old, new), skip):
            differences[relative] = what
    return len(both), differences


def summarize(what: list[str]) -> str:
    """One line for what differs in a file: the count of differing values per top-level section of a checkpoint or
    record, and the first of them (``state_dict 12, loops 3; first /state_dict/backbone.0.weight``)."""
    if not all(key.startswith("/") for key in what):
        return "; ".join(what)
    sections = Counter(key.split("/")[1] for key in what)
    counts = ", ".join(f"{section} {count}" for section, count in sections.most_common())
    first = next(key for key in what if key.split("/")[1] == sections.most_common(1)[0][0])
    verb = "values differ" if len(what) > 1 else "value differs"
    return f"{len(what)} {verb} ({counts}; first {first})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a tree of run folders")
    parser.add_argument("new", type=Path, help="the same runs made again")
    parser.add_argument(
        "--ignore", action="append", default=[], metavar="REGEX", help="also leave out what this matches (repeatable)"
    )
    args = parser.parse_args(argv)
    for root in (args.old, args.new):
        if not root.is_dir():
            parser.error(f"{root} is not a folder")
    for pattern in args.ignore:
        try:
            re.compile(pattern)
        except re.error as error:
            parser.error(f"--ignore {pattern!r} is not a regular expression: {error}")
    compared, differences = compare_trees(args.old.resolve(), args.new.resolve(), args.ignore)
    if compared == 0 and not differences:
        parser.error(f"no checkpoint, CSV or test record under {args.old} or {args.new}")
    for relative, what in differences.items():
        print(f"{relative}: {summarize(what)}")
    verdict = "the same, bit for bit" if not differences else f"{len(differences)} files differ"
    print(f"{compared} files in both trees: {verdict}")
    return 0 if not differences else 1


if __name__ == "__main__":
    sys.exit(main())

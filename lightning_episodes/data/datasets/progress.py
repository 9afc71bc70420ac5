"""What a dataset says while it does its long first-time work (rendering an embedded dataset into its cache): a
line naming the work and where it goes, a progress bar per phase, and the time it took, on stderr and from the
process of rank 0 alone (the others wait for its cache, or do the same work silently).

The bars show only inside :func:`reporting` (the loader's first-time work), so a function that renders part of a
dataset (a test, a figure) stays quiet when called on its own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from lightning_fabric.utilities.rank_zero import rank_zero_only
from tqdm import tqdm

__all__ = ["bar", "reporting"]

#: The dataset whose first-time work is being reported, while it is.
_REPORTING: ContextVar[str | None] = ContextVar("lightning_episodes_dataset_progress", default=None)


def _rank_zero() -> bool:
    return int(getattr(rank_zero_only, "rank", 0) or 0) == 0


@contextmanager
def reporting(dataset: str, what: str) -> Iterator[None]:
    """Report the work done inside: ``<dataset>: <what>`` first, the :func:`bar` of each phase, then the time taken
    (nothing on a rank other than 0)."""
    if not _rank_zero():
        yield
        return
    print(f"{dataset}: {what}", file=sys.stderr, flush=True)
    start = time.monotonic()
    token = _REPORTING.set(dataset)
    try:
        yield
    finally:
        _REPORTING.reset(token)
    print(f"{dataset}: done in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)


def bar(total: int, description: str) -> tqdm:
    """A progress bar of ``total`` steps, ``<dataset>: <description>``, on stderr inside :func:`reporting`; a silent
    one elsewhere (its ``update`` does nothing)."""
    dataset = _REPORTING.get()
    if dataset is None:
        return tqdm(total=total, disable=True)
    # at most one update a second: a log file that is not a terminal gets a line a second, not hundreds
    return tqdm(total=total, desc=f"{dataset}: {description}", file=sys.stderr, mininterval=1.0, dynamic_ncols=True)

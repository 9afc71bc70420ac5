"""Shared helpers of the benchmarks: round-robin timing, medians, the machine's state, markdown tables.

The machine these numbers come from is shared (2 cores, other processes running tests), so every
benchmark alternates its contenders within each repeat (a busy moment slows all of them alike), reports
medians over repeats, and prints the load average before and after with the thread count.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch


def add_round_arguments(parser: argparse.ArgumentParser, steps: int, skip: int) -> None:
    """The options of a benchmark whose contenders take turns fitting: ``--device``, ``--threads`` (default 1),
    ``--rounds`` (3), ``--steps`` per fit and ``--skip`` (steps left out at the start of each fit)."""
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all contenders (default 3)")
    parser.add_argument("--steps", type=int, default=steps, help=f"steps per fit (default {steps})")
    parser.add_argument("--skip", type=int, default=skip, help=f"steps left out at the start of a fit (default {skip})")


def round_settings(
    parser: argparse.ArgumentParser, args: argparse.Namespace, quick: tuple[int, int, int], min_skip: int
) -> tuple[int, int, int]:
    """``(rounds, steps, skip)`` of :func:`add_round_arguments`'s options, ``quick`` with ``--quick``; a skip below
    ``min_skip``, fewer than 2 measured steps or ``--device cuda`` without CUDA is a parser error."""
    rounds, steps, skip = quick if getattr(args, "quick", False) else (args.rounds, args.steps, args.skip)
    if steps - skip < 2 or skip < min_skip:
        parser.error(f"--skip must be >= {min_skip} and --steps exceed it by 2, got {steps} and {skip}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available")
    return rounds, steps, skip


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads (``None``: leave the default) and return the count in use."""
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    """One line: CPU, cores, torch threads, torch version, load average now."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} "
        f"thread(s), load average {load}"
    )


class Rate(NamedTuple):
    """Items per second of one measurement, by the wall clock and by the process's CPU time.

    On a machine shared with other processes the wall clock also counts the time this process waited for
    a core; CPU time does not (it still counts the slowdown from caches and memory bandwidth shared with
    them), so its ratios are the steadier ones.
    """

    wall: float
    cpu: float


def rates(
    contenders: dict[str, Callable[[], int]], repeats: int, seconds: float, warmup: float
) -> dict[str, list[Rate]]:
    """Items per second of each contender, once per repeat, the contenders taking turns.

    Each contender is a function that does one unit of work and returns how many items (episodes) it
    produced. A measurement calls it until ``seconds`` have passed (at least twice) and divides.
    """
    for work in contenders.values():
        _run_for(work, warmup)
    measured: dict[str, list[Rate]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, work in contenders.items():
            measured[name].append(_run_for(work, seconds))
    return measured


def _run_for(work: Callable[[], int], seconds: float) -> Rate:
    items, calls = 0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while True:
        items += work()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= 2:
            return Rate(items / elapsed, items / max(time.process_time() - cpu_start, 1e-9))


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float]) -> str:
    """``min–max`` of the repeats, to show how noisy the machine was."""
    return f"{min(values):,.0f}–{max(values):,.0f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)

"""Wall time of the command line's quick answers against importing Lightning, in the same run.

``lightning-episodes --help``, ``--version`` and a wrong command import nothing beyond the standard library (the
LightningCLI and the tools are imported when a command runs), so they take the interpreter's start-up time, not
the seconds that ``import pytorch_lightning`` takes. Each command is a fresh process (``python -m
lightning_episodes``, what the console script runs); the commands take turns in every round and the table gives
the median over rounds and its ratio to ``python -c "import pytorch_lightning"``.

    python -m benchmarks.cli_startup --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS: dict[str, list[str]] = {
    "python -c pass (the interpreter alone)": ["-c", "pass"],
    "lightning-episodes --help": ["-m", "lightning_episodes", "--help"],
    "lightning-episodes --version": ["-m", "lightning_episodes", "--version"],
    "lightning-episodes frobnicate (a wrong command)": ["-m", "lightning_episodes", "frobnicate"],
    'python -c "import pytorch_lightning"': ["-c", "import pytorch_lightning"],
}
REFERENCE = 'python -c "import pytorch_lightning"'


def wall_time(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], capture_output=True, check=False)
    return time.perf_counter() - start


def measure(rounds: int) -> dict[str, list[float]]:
    """Seconds per run of each command, the commands taking turns in every round (after one warm-up round)."""
    for args in COMMANDS.values():
        wall_time(args)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(rounds):
        for name, args in COMMANDS.items():
            times[name].append(wall_time(args))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs of each command (median reported)")
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    args = parser.parse_args(argv)
    rounds = 2 if args.quick else args.rounds
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    times = measure(rounds)
    reference = statistics.median(times[REFERENCE])
    print(f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, {rounds} rounds, load average {load} before")
    print("| command | median s | min–max s | / import pytorch_lightning |")
    print("|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| `{name}` | {median:.3f} | {min(values):.3f}–{max(values):.3f} | {median / reference:.3f} |")
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

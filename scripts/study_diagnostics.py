#!/usr/bin/env python
"""What the weighting callback's diagnostics said in each arm of a study: one Markdown table per scenario.

For every run folder of ``scripts/run_scenario.py`` (``<root>/<scenario>/seed<N>/<arm>``) it reads the test record
(``test_results.json``: test accuracy, and the step of the tested ``best-<step>-...`` checkpoint) and the TensorBoard
scalars the callback logs at the loggers' cadence, averaged over the logged steps after the warm-up (``--after``):
``weighting/ess_over_batch`` (ESS/|B|: 1 = equal weights), ``weighting/loss_scale`` (the factor the normalisation
applied to the self-normalised loss: Σw/ESS under the paper's, 1 under ``self``; logged since 2026-12-07),
``weighting/outside_support`` (share of episodes outside the proposal's support, weight 0 with ``out_of_support:
zero``), ``weighting/pareto_k`` (the tail index of the recent weights: above 0.7 the weights' variance is effectively
infinite), ``weighting/skewness`` and, from
``weighting/normality_p`` (the Shapiro-Wilk p-value of the callback's window of recent difficulties, up to ``window``
= 1,000 of them: the paper's normal proposal assumes normality), the share of logged steps where normality is rejected
at 5%. That window is far larger than the paper's 50-episode subsamples, so the test rejects small departures from
normality there. Resampling arms also log ``weighting/ks`` and ``weighting/ks_plain``: the Kolmogorov-Smirnov
distance from the target of the recent chosen episodes' difficulties, and of the plain candidates'. Last, how far
the model had specialised to its base classes when its tested checkpoint was saved:
``train/acc`` (the training episodes' mean accuracy, base classes, over the logged steps since the validation before)
minus ``val/acc`` (novel classes) at the validation nearest the tested checkpoint's step, in points. It compares like
with like only for arms that train on plain samples (the baseline and the re-weighting arms, whose ``train/acc`` is
unweighted); a resampling arm trains on episodes picked by their difficulty. Then it prints, per scenario and arm,
the mean over seeds. The scalars come from the event files, or from each run's ``scalars.csv`` where a study's records
keep no event files (``--export`` writes it beside them)::

    python scripts/study_diagnostics.py runs/study --after 100
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_episodes.analysis.scalars import SCALARS_FILE, Scalars, read_scalar_table

TAGS = {
    "ESS/\\|B\\|": "weighting/ess_over_batch",  # the pipes escaped: the header is a markdown table row
    "loss scale": "weighting/loss_scale",
    "outside support (%)": "weighting/outside_support",
    "Pareto k": "weighting/pareto_k",
    "skewness": "weighting/skewness",
    "normal rejected (%)": "weighting/normality_p",
    "ks chosen": "weighting/ks",
    "ks plain": "weighting/ks_plain",
}


GAP = "base - novel accuracy (points)"


def read_scalars(folder: Path) -> Scalars:
    """Every scalar logged in ``folder``: from its TensorBoard event files, else from its :data:`SCALARS_FILE`."""
    scalars: Scalars = defaultdict(list)
    if any(folder.glob("events.out.tfevents.*")):
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            scalars[tag] = [(e.step, e.value) for e in events.Scalars(tag)]
    elif (folder / SCALARS_FILE).is_file():
        for tag, step, value in read_scalar_table(folder / SCALARS_FILE):
            scalars[tag].append((step, value))
    return scalars


def export_scalars(root: Path) -> int:
    """Write :data:`SCALARS_FILE` beside the event files of every run folder under ``root`` (so that a study's records
    keep its curves without its binary logs); returns how many it wrote."""
    folders = sorted({p.parent for p in root.rglob("events.out.tfevents.*")})
    for folder in folders:
        with (folder / SCALARS_FILE).open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["tag", "step", "value"])
            for tag, values in sorted(read_scalars(folder).items()):
                writer.writerows((tag, step, repr(value)) for step, value in values)
    return len(folders)


def specialisation(scalars: Scalars, best: float | None) -> float | None:
    """``train/acc`` over the logged steps since the validation before minus ``val/acc``, in points, at the
    validation nearest step ``best`` (the last validation without one); ``None`` without both scalars."""
    validations = sorted(scalars.get("val/acc", []))
    if not validations or "train/acc" not in scalars:
        return None
    index = len(validations) - 1
    if best is not None:
        index = min(range(len(validations)), key=lambda i: abs(validations[i][0] - best))
    since = validations[index - 1][0] if index > 0 else -1
    step, novel = validations[index]
    base = [value for at, value in scalars["train/acc"] if since < at <= step]
    return 100 * (statistics.fmean(base) - novel) if base else None


def run_diagnostics(run: Path, after: int) -> dict[str, float] | None:
    """Test accuracy (%), best step, the mean of each :data:`TAGS` scalar after step ``after`` and the base - novel
    accuracy gap at the tested checkpoint (:func:`specialisation`); ``None``: no test record yet."""
    records = sorted(run.rglob("test_results.json"))
    if not records:
        return None
    record = json.loads(records[-1].read_text())
    best = re.match(r"best-(\d+)-", Path(str(record.get("ckpt_path", ""))).name)  # the checkpoint callback's name
    row = {"test accuracy (%)": 100 * float(record["accuracy"])}
    if best:
        row["best step"] = float(best.group(1))
    logged = {p.parent for p in run.rglob("events.out.tfevents.*")} | {p.parent for p in run.rglob(SCALARS_FILE)}
    for folder in sorted(logged):
        scalars = read_scalars(folder)
        gap = specialisation(scalars, row.get("best step"))
        if gap is not None:
            row[GAP] = gap
        for name, tag in TAGS.items():
            values = [value for step, value in scalars.get(tag, []) if step >= after and value == value]
            if values and tag == TAGS["normal rejected (%)"]:
                row[name] = 100 * statistics.fmean(float(v < 0.05) for v in values)
            elif values:
                row[name] = statistics.fmean(values) * (100 if name.endswith("(%)") else 1)
    return row


def main(argv: list[str] | None = None) -> int:
    """Print the tables (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("root", type=Path, help="the --out folder of scripts/run_scenario.py")
    parser.add_argument("--after", type=int, default=100, help="average the scalars from this step on (warm-up)")
    parser.add_argument(
        "--export", action="store_true", help=f"also write each run's scalars to {SCALARS_FILE} beside its event files"
    )
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"root: {args.root} is not a folder (give the --out folder of scripts/run_scenario.py)")
    if args.export:
        print(f"wrote {SCALARS_FILE} in {export_scalars(args.root)} run folders", file=sys.stderr)
    scenarios = sorted(p for p in args.root.iterdir() if p.is_dir())
    if not scenarios:
        print(f"no scenario folders under {args.root}", file=sys.stderr)
        return 1
    columns = ["test accuracy (%)", "best step", *TAGS, GAP]
    for scenario in scenarios:
        arms: dict[str, list[dict[str, float]]] = defaultdict(list)
        for run in sorted(scenario.glob("seed*/*")):
            row = run_diagnostics(run, args.after)
            if row is not None:
                arms[run.name].append(row)
        print(f"\n{scenario.name} (mean over seeds; logged steps >= {args.after})\n")
        print("| arm | seeds | " + " | ".join(columns) + " |")
        print("|---|---:|" + "---:|" * len(columns))
        for arm, rows in arms.items():
            cells = []
            for column in columns:
                values = [r[column] for r in rows if column in r]
                precision = 0 if column == "best step" else 1 if column.endswith(("(%)", "(points)")) else 2
                cells.append(f"{statistics.fmean(values):.{precision}f}" if values else "–")
            print(f"| {arm} | {len(rows)} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

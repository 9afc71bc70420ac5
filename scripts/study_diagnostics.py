#!/usr/bin/env python
"""What the weighting callback's diagnostics said in each arm of a study: one Markdown table per scenario.

For every run folder of ``scripts/run_scenario.py`` (``<root>/<scenario>/seed<N>/<arm>``) it reads the test record
(``test_results.json``: test accuracy, and the step of the tested ``best-<step>-...`` checkpoint) and the TensorBoard
scalars the callback logs at the loggers' cadence, averaged over the logged steps after the warm-up (``--after``):
``weighting/ess_over_batch`` (ESS/|B|: 1 = equal weights), ``weighting/outside_support`` (share of episodes outside
the proposal's support, weight 0 with ``out_of_support: zero``), ``weighting/pareto_k`` (the tail index of the recent
weights: above 0.7 the weights' variance is effectively infinite), ``weighting/skewness`` and, from
``weighting/normality_p`` (the Shapiro-Wilk p-value of the callback's window of recent difficulties, up to ``window``
= 1,000 of them: the paper's normal proposal assumes normality), the share of logged steps where normality is rejected
at 5%. That window is far larger than the paper's 50-episode subsamples, so the test rejects small departures from
normality there. Last, how far the model had specialised to its base classes when its tested checkpoint was saved:
``train/acc`` (the training episodes' mean accuracy, base classes, over the logged steps since the validation before)
minus ``val/acc`` (novel classes) at the validation nearest the tested checkpoint's step, in points. It compares like
with like only for arms that train on plain samples (the baseline and the re-weighting arms, whose ``train/acc`` is
unweighted); a resampling arm trains on episodes picked by their difficulty. Then it prints, per scenario and arm,
the mean over seeds::

    python scripts/study_diagnostics.py runs/study --after 100
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

TAGS = {
    "ESS/|B|": "weighting/ess_over_batch",
    "outside support (%)": "weighting/outside_support",
    "Pareto k": "weighting/pareto_k",
    "skewness": "weighting/skewness",
    "normal rejected (%)": "weighting/normality_p",
}


GAP = "base - novel accuracy (points)"


def specialisation(events: EventAccumulator, best: float | None) -> float | None:
    """``train/acc`` over the logged steps since the validation before minus ``val/acc``, in points, at the
    validation nearest step ``best`` (the last validation without one); ``None`` without both scalars."""
    scalars = events.Tags()["scalars"]
    if "train/acc" not in scalars or "val/acc" not in scalars:
        return None
    validations = sorted((e.step, e.value) for e in events.Scalars("val/acc"))
    index = len(validations) - 1
    if best is not None:
        index = min(range(len(validations)), key=lambda i: abs(validations[i][0] - best))
    since = validations[index - 1][0] if index > 0 else -1
    step, novel = validations[index]
    base = [e.value for e in events.Scalars("train/acc") if since < e.step <= step]
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
    for folder in sorted({p.parent for p in run.rglob("events.out.tfevents.*")}):
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        events.Reload()
        gap = specialisation(events, row.get("best step"))
        if gap is not None:
            row[GAP] = gap
        for name, tag in TAGS.items():
            if tag in events.Tags()["scalars"]:
                values = [e.value for e in events.Scalars(tag) if e.step >= after and e.value == e.value]
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
    args = parser.parse_args(argv)
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

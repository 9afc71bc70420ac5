#!/usr/bin/env python
"""Does uniform's gain follow the baseline's over-fitting? The analysis of ``studies/scarce_dose/PLAN.md``.

Each level folder ``n<N>`` (N training images a class) holds ``<cell>/seed<s>/{baseline_online,uniform_online}/``
runs. For every seed pair (a level and a seed with both arms tested) it computes the gain g = uniform − baseline test
accuracy in points (each run's ``test_results.json``, picked as ``lightning-episodes compare`` picks it), the
baseline's over-fitting d = its best validation accuracy minus its validation accuracy at the last validation, in
points, and its validation-loss rise = last validation loss / lowest − 1 (both from the ``val/acc`` and ``val/loss``
of the ``scalars.csv`` beside its test record). Then it prints the primary test, Pearson's r between g and d over all
seed pairs with its two-sided p and 95% interval (Fisher's z), and one Markdown row per level: the mean g with its 95%
Student-t interval over the level's seed pairs, the one-sample t-test's p and its Holm-adjusted p over the levels
given (family D), and the baseline's mean d and validation-loss rise. A seed with one arm tested is left out and
named. It stops (exit 2, one line naming the path) at a level folder that is missing, not named n<N> or given twice,
a test record that cannot be read or was trained at another N, a baseline whose scalars.csv is missing or has no
val/acc, or no seed pair at all::

    python scripts/dose_response.py studies/scarce_dose/n30 studies/scarce_dose/n60 studies/scarce_dose/n120 \\
        studies/scarce_dose/n240 --json dose_response.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from scipy import stats

from lightning_episodes.analysis.comparison import holm
from lightning_episodes.analysis.scalars import SCALARS_FILE, Scalars, read_scalar_table
from lightning_episodes.commands.compare import run_record
from lightning_episodes.evaluation.record import read_record

BASELINE = "baseline_online"
TREATMENT = "uniform_online"


class StudyError(ValueError):
    """What stops the analysis, in one line naming the path."""


@dataclass(frozen=True)
class SeedPair:
    """One level's one seed, both arms tested: the gain and the baseline's over-fitting in points, its loss rise."""

    level: int
    seed: int
    gain: float
    overfitting: float
    loss_rise: float | None


@dataclass(frozen=True)
class Correlation:
    """Pearson's r over ``n`` seed pairs, its two-sided p and 95% Fisher interval (``nan``/``None``: not defined)."""

    n: int
    r: float
    pvalue: float
    ci95: tuple[float, float] | None


@dataclass(frozen=True)
class Level:
    """One level's row: its seed pairs' gains, their mean, t half-width, raw and Holm-adjusted p; the baseline's
    mean over-fitting and loss rise (``None``: one pair has no ``val/loss``)."""

    level: int
    seeds: tuple[int, ...]
    gains: tuple[float, ...]
    overfittings: tuple[float, ...]
    mean: float
    half_width: float | None
    pvalue: float
    holm: float
    overfitting: float
    loss_rise: float | None


def overfitting(val_acc: Sequence[tuple[int, float]]) -> float:
    """The best validation accuracy minus that at the last validation step, in points (accuracies as fractions)."""
    curve = sorted(val_acc)
    return 100 * (max(value for _, value in curve) - curve[-1][1])


def loss_rise(val_loss: Sequence[tuple[int, float]]) -> float:
    """The last validation loss over the lowest, minus 1 (0: the last is the lowest)."""
    curve = sorted(val_loss)
    return curve[-1][1] / min(value for _, value in curve) - 1


def fisher_interval(r: float, n: int) -> tuple[float, float] | None:
    """The 95% interval of a correlation ``r`` of ``n`` pairs by Fisher's z, ``tanh(atanh r ± 1.96 / √(n − 3))``;
    ``None`` with ``n ≤ 3`` or an undefined ``r``."""
    if n <= 3 or math.isnan(r):
        return None
    if abs(r) >= 1:  # atanh(±1) = ±inf: every shift stays there
        return (r, r)
    z, half = math.atanh(r), 1.96 / math.sqrt(n - 3)
    return (math.tanh(z - half), math.tanh(z + half))


def correlation(gains: Sequence[float], overfittings: Sequence[float]) -> Correlation:
    """Pearson's r between the gains and the over-fittings (:func:`scipy.stats.pearsonr`, two-sided), with
    :func:`fisher_interval`; ``nan`` with fewer than two pairs or a constant sequence."""
    n = len(gains)
    if n < 2 or len(set(gains)) < 2 or len(set(overfittings)) < 2:
        return Correlation(n, math.nan, math.nan, None)
    result = stats.pearsonr(gains, overfittings)
    r = float(result.statistic)
    return Correlation(n, r, float(result.pvalue), fisher_interval(r, n))


def t_interval(values: Sequence[float]) -> tuple[float, float | None, float]:
    """The mean of ``values``, its 95% Student-t half-width (``k − 1`` degrees of freedom; ``None`` for one value)
    and the two-sided one-sample t-test's p against 0 (:func:`scipy.stats.ttest_1samp`; ``nan`` for one value or
    equal values)."""
    k = len(values)
    mean = statistics.fmean(values)
    if k < 2:
        return mean, None, math.nan
    sd = statistics.stdev(values)
    half_width = float(stats.t.ppf(0.975, k - 1)) * sd / math.sqrt(k)
    return mean, half_width, math.nan if sd == 0 else float(stats.ttest_1samp(values, 0.0).pvalue)


def levels(pairs: Sequence[SeedPair], given: Sequence[int]) -> list[Level]:
    """One :class:`Level` per level of ``given`` that has seed pairs, in ``given``'s order; Holm's adjustment counts
    every level of ``given`` (family D), one without pairs as a test without a p."""
    rows = []
    for level in given:
        mine = sorted((p for p in pairs if p.level == level), key=lambda p: p.seed)
        if not mine:
            continue
        gains = [p.gain for p in mine]
        mean, half_width, pvalue = t_interval(gains)
        rises = [p.loss_rise for p in mine]
        rows.append(
            Level(
                level=level,
                seeds=tuple(p.seed for p in mine),
                gains=tuple(gains),
                overfittings=tuple(p.overfitting for p in mine),
                mean=mean,
                half_width=half_width,
                pvalue=pvalue,
                holm=math.nan,
                overfitting=statistics.fmean(p.overfitting for p in mine),
                loss_rise=None if None in rises else statistics.fmean(r for r in rises if r is not None),
            )
        )
    adjusted = holm([row.pvalue for row in rows] + [math.nan] * (len(given) - len(rows)))
    return [replace(row, holm=p) for row, p in zip(rows, adjusted, strict=False)]


def _p(p: float) -> str:
    return "–" if math.isnan(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _points(values: Sequence[float], seeds: Sequence[int]) -> str:
    return ", ".join(f"seed{seed} {value:+.2f}" for seed, value in zip(seeds, values, strict=True))


def markdown(
    primary: Correlation, rows: Sequence[Level], given: Sequence[int], unpaired: Sequence[str], cell: str
) -> str:
    """The primary test, the per-level table and what each number covers."""
    if math.isnan(primary.r):
        line = f"r not defined (n = {primary.n} seed pairs: fewer than two, or g or d the same in every pair)"
    else:
        interval = (
            f"95% interval (Fisher's z) [{primary.ci95[0]:+.2f}, {primary.ci95[1]:+.2f}]"
            if primary.ci95 is not None
            else "95% interval not defined (Fisher's z needs n > 3)"
        )
        shown = _p(primary.pvalue)
        p = shown if shown.startswith("<") else f"= {shown}"  # "p < 0.001", not "p = < 0.001"
        line = f"r = {primary.r:+.3f}, {interval}, p {p} (two-sided), n = {primary.n} seed pairs"
    lines = [
        f"Dose-response, {cell}: {TREATMENT} − {BASELINE} at N = {', '.join(map(str, given))} images a class.",
        "",
        f"Primary: Pearson's r between the gain g and the baseline's over-fitting d over all seed pairs: {line}.",
        "",
        "| N | seed pairs | g (pp): mean ± 95% t | p | p (Holm, family D) | baseline d (pp) | baseline val-loss rise "
        "| per-seed g (pp) | per-seed d (pp) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        gain = f"{row.mean:+.2f} ± {row.half_width:.2f}" if row.half_width is not None else f"{row.mean:+.2f} ± –"
        rise = "–" if row.loss_rise is None else f"{row.loss_rise:+.3f}"
        lines.append(
            f"| {row.level} | {len(row.gains)} | {gain} | {_p(row.pvalue)} | {_p(row.holm)} | {row.overfitting:.2f} "
            f"| {rise} | {_points(row.gains, row.seeds)} | {_points(row.overfittings, row.seeds)} |"
        )
    missing = [str(level) for level in given if level not in {row.level for row in rows}]
    notes = [
        f"g: {TREATMENT} − {BASELINE} test accuracy of the best-validation checkpoints, in percentage points, paired "
        f"by seed (a level's seed s of one arm against its seed s of the other). d: the {BASELINE} run's best "
        "validation accuracy minus its validation accuracy at the last validation, in points; val-loss rise: its "
        "last validation loss over its lowest, minus 1 (– where a run logged no val/loss); both from the "
        f"run's logged val/acc and val/loss ({SCALARS_FILE}), averaged over the level's baseline trainings.",
        "r: Pearson's correlation of g and d over the seed pairs of every level, its two-sided p "
        "(scipy.stats.pearsonr) and 95% interval by Fisher's z (tanh(atanh r ± 1.96 / √(n − 3))). It covers "
        "the variance between trainings, but the pairs of one level share its N, so r mixes the levels' "
        "differences with the seeds' within a level: read it beside the rows. A null is its interval, not "
        "no relation.",
        "Per level: the mean of its k seed pairs' g ± the 95% Student-t half-width over them (t with k − 1 degrees "
        "of freedom; – with one pair), the two-sided one-sample t-test's p over them, and Holm's step-down "
        f"adjusted p over family D, the {_count(len(given), 'level')} given"
        + (f" (N = {', '.join(missing)}: no seed pair, counted in the family without a p)" if missing else "")
        + ". They are over trainings: each seed pair is one training per arm; the test episodes' own "
        "variation is inside each g.",
    ]
    if unpaired:
        notes.append(f"Left out, one arm not tested: {'; '.join(unpaired)}.")
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes) + "\n"


def level_of(folder: Path) -> int:
    """The N of a level folder named ``n<N>``.

    Raises:
        StudyError: if it does not exist or is not so named.
    """
    if not folder.is_dir():
        raise StudyError(f"no level folder {folder}")
    match = re.fullmatch(r"n(\d+)", folder.resolve().name)
    if match is None:
        raise StudyError(f"{folder} is not a level folder: its name must be n<N> (n30, n60, ...)")
    return int(match.group(1))


def read_scalars(path: Path) -> Scalars:
    """The scalars of a ``scalars.csv`` by tag, ``(step, value)`` in step order (the last logged value of a step),
    empty and non-finite cells left out: its rows are ``tag,step,value`` (``scripts/study_diagnostics.py
    --export``) or a ``step`` column and one column per tag.

    Raises:
        StudyError: naming the file, if it is missing or neither.
    """
    if not path.is_file():
        raise StudyError(f"no {path} (write it beside the event files with scripts/study_diagnostics.py --export)")
    try:
        cells = read_scalar_table(path)
    except ValueError as error:
        raise StudyError(str(error)) from error
    found: dict[str, dict[int, float]] = defaultdict(dict)
    for tag, step, value in cells:
        if math.isfinite(value):
            found[tag][step] = value
    return {tag: sorted(values.items()) for tag, values in found.items()}


def read_pair(seed_dir: Path, level: int) -> SeedPair | str:
    """The seed pair of a ``seed<s>`` folder, or, with an arm untested, why it is left out.

    Raises:
        StudyError: naming the file, if a test record cannot be read or was trained at another level, or the
            baseline's scalars have no ``val/acc``.
    """
    records = {}
    for arm in (BASELINE, TREATMENT):
        try:
            records[arm] = run_record(seed_dir / arm)
        except FileNotFoundError:
            continue
    if len(records) < 2:
        return f"{seed_dir} ({', '.join(records) + ' only' if records else 'neither arm'})"
    accuracy = {}
    for arm, path in records.items():
        try:
            record = read_record(path)[0]
        except ValueError as error:  # UnreadableRecord, naming the file
            raise StudyError(str(error)) from None
        trained = (record.get("data") or {}).get("train_images_per_class")
        if trained is not None and trained != level:
            raise StudyError(f"{path} was trained with {trained} images a class, in the level folder n{level}")
        accuracy[arm] = float(record["accuracy"])
    scalars_path = records[BASELINE].with_name(SCALARS_FILE)
    scalars = read_scalars(scalars_path)
    if not scalars.get("val/acc"):
        raise StudyError(f"{scalars_path} has no val/acc column (or no value in it)")
    losses = scalars.get("val/loss")
    return SeedPair(
        level=level,
        seed=int(seed_dir.name[4:]),
        gain=100 * (accuracy[TREATMENT] - accuracy[BASELINE]),
        overfitting=overfitting(scalars["val/acc"]),
        loss_rise=loss_rise(losses) if losses else None,
    )


def read_levels(folders: Sequence[Path]) -> tuple[list[int], list[SeedPair], list[str], str]:
    """The levels of ``folders`` (ascending N), their seed pairs, the seed folders left out (with why) and the cell.

    Raises:
        StudyError: for a missing or misnamed folder, a level given twice, levels of several cells, an unreadable
            record or scalars without ``val/acc``, or no seed pair at all.
    """
    by_level: dict[int, Path] = {}
    for folder in folders:
        level = level_of(folder)
        if level in by_level:
            raise StudyError(f"{folder}: level {level} is given twice (also {by_level[level]})")
        by_level[level] = folder
    pairs: list[SeedPair] = []
    unpaired: list[str] = []
    cells: set[str] = set()
    for level, folder in sorted(by_level.items()):
        seed_dirs = [p for p in folder.glob("*/seed*") if p.is_dir() and re.fullmatch(r"seed\d+", p.name)]
        for seed_dir in sorted(seed_dirs, key=lambda p: (p.parent.name, int(p.name[4:]))):
            cells.add(seed_dir.parent.name)
            pair = read_pair(seed_dir, level)
            if isinstance(pair, str):
                unpaired.append(pair)
            else:
                pairs.append(pair)
    if len(cells) > 1:
        raise StudyError(f"{', '.join(map(str, folders))} hold several cells ({', '.join(sorted(cells))}): one only")
    if not pairs:
        named = ", ".join(map(str, folders))
        raise StudyError(
            f"no seed pair: no <cell>/seed<s> folder of {named} holds both {BASELINE} and {TREATMENT} tested"
        )
    return sorted(by_level), pairs, unpaired, cells.pop()


def _finite(value: Any) -> Any:
    """``value`` with every ``nan`` as ``None`` (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Print the analysis (see the module docstring); 2 with a one-line error on stderr."""
    parser = argparse.ArgumentParser(
        description=__doc__.replace("``", "").replace("::", ":"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("levels", nargs="+", type=Path, help="level folders n<N> (e.g. studies/scarce_dose/n30)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the numbers here as JSON")
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as caught:  # compare's run_record: several records in a run
            warnings.simplefilter("always")
            given, pairs, unpaired, cell = read_levels(args.levels)
    except StudyError as error:
        print(f"dose_response.py: error: {error}", file=sys.stderr)
        return 2
    for warning in caught:
        print(f"dose_response.py: warning: {warning.message}", file=sys.stderr)
    primary = correlation([p.gain for p in pairs], [p.overfitting for p in pairs])
    rows = levels(pairs, given)
    print(markdown(primary, rows, given, unpaired, cell), end="")
    if args.json is not None:
        numbers = {
            "cell": cell,
            "baseline": BASELINE,
            "treatment": TREATMENT,
            "levels_given": given,
            "correlation": asdict(primary),
            "levels": [asdict(row) for row in rows],
            "pairs": [asdict(pair) for pair in pairs],
            "unpaired": unpaired,
        }
        args.json.write_text(json.dumps(_finite(numbers), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

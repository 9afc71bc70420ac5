"""Paired per-episode comparison of two sampling schemes on the shared fixed test episodes.

Every model of a scenario is tested on the same fixed test episodes (they depend only on the data seed), so two
sampling schemes compare episode by episode: ``d_i`` = the treatment's accuracy on episode ``i`` minus the
baseline's, each averaged over the arm's seeds. Pairing removes the spread of difficulty between episodes, which
dominates each arm's own interval, so a small difference can be resolved on 1,000 episodes (docs/method.md: "a paired
per-episode difference with its confidence interval on the shared fixed test episodes").

From the command line (``lightning-episodes compare``, see :func:`main`), on folders laid out by
``scripts/run_scenario.py``::

    lightning-episodes compare runs/study/glyphs_5w1s__protonet_euclidean_conv4 \\
        runs/study/glyphs_5w5s__protonet_euclidean_conv4 --baseline baseline_online --treatment uniform_online
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from lightning_episodes.analysis.report import RESULTS_FILE, RunResult, combine, find_results, format_cell, read_result
from lightning_episodes.analysis.scoring import DEVICE_HELP, checkpoint_datamodule, resolve_device, score_episodes
from lightning_episodes.analysis.tables import DifficultyTable, join_on_episode

#: The per-episode test scores cached beside each run's ``test_results.json``.
SCORES_FILE = "test_episodes.csv"


@dataclass(frozen=True)
class PairedDifference:
    """Outcome of :func:`paired_difference`: treatment − baseline, accuracies as fractions.

    Args:
        mean: mean over the episodes of ``d_i``.
        ci95: half-width of the 95% Student-t interval of ``mean`` over the episodes (see
            :func:`paired_difference` for what it covers).
        std: standard deviation of ``d_i`` over the episodes (ddof = 1).
        episodes: number of shared episodes ``n``.
        seeds: ``(k_baseline, k_treatment)``, the seeds averaged in each arm.
        statistic: the paired t statistic ``mean / (std / √n)``, with ``n − 1`` degrees of freedom.
        pvalue: its two-sided p-value (the hypothesis: no mean difference over episodes).
        seed_differences: when both arms have as many seeds, the mean difference of each seed pair (treatment
            seed ``s`` − baseline seed ``s``, in the order given); their mean is ``mean``. ``None`` otherwise.
    """

    mean: float
    ci95: float
    std: float
    episodes: int
    seeds: tuple[int, int]
    statistic: float
    pvalue: float
    seed_differences: tuple[float, ...] | None = None

    @property
    def seed_sd(self) -> float | None:
        """Standard deviation (ddof = 1) of :attr:`seed_differences`: the spread between trainings that
        :attr:`ci95` leaves out (``None`` with fewer than two seed pairs)."""
        if self.seed_differences is None or len(self.seed_differences) < 2:
            return None
        return float(np.std(self.seed_differences, ddof=1))


def paired_difference(
    baseline: Sequence[DifficultyTable] | DifficultyTable, treatment: Sequence[DifficultyTable] | DifficultyTable
) -> PairedDifference:
    """Paired per-episode accuracy difference, treatment − baseline, on the same fixed episodes.

    Each arm is one table per seed (e.g. :func:`~lightning_episodes.analysis.scoring.score_episodes` of each
    run's best checkpoint on the test episodes). Tables are aligned by episode id, and per episode ``i``::

        d_i = mean over the treatment's seeds of accuracy_i − mean over the baseline's seeds of accuracy_i

    The interval is ``t_{0.975, n−1} · sd(d) / √n`` over the ``n`` episodes, and the p-value that of the paired
    t-test (:func:`scipy.stats.ttest_rel` for one seed per arm).

    What the interval covers: the sampling of test episodes, with the trained models held fixed — would these
    models still differ on new episodes? What it does not cover: the variance between trainings (seeds); another
    set of seeds gives other models, and the interval says nothing about how far their difference would move.
    :attr:`PairedDifference.seed_differences` shows that spread: each seed pair's own mean difference.

    Args:
        baseline: the baseline's table(s), one per seed.
        treatment: the treatment's table(s), one per seed.

    Returns:
        A :class:`PairedDifference`.

    Raises:
        ValueError: if an arm has no table, if two tables do not score the same episodes (other ids, or an id that
            is another episode: different data seeds, ways, shots or counts), if an accuracy is unknown, or if there
            are fewer than two episodes.

    Example::

        >>> from lightning_episodes.analysis import EpisodeRecord
        >>> def table(accuracies):
        ...     return DifficultyTable(tuple(EpisodeRecord(i, (0, 1), ((2,), (3,)), ((4,), (5,)), 1.0, a)
        ...                                  for i, a in enumerate(accuracies)))
        >>> result = paired_difference(table([0.5, 0.6, 0.7]), table([0.6, 0.8, 0.7]))  # d = 0.1, 0.2, 0.0
        >>> round(result.mean, 6), round(result.std, 6), round(result.statistic, 4), round(result.ci95, 4)
        (0.1, 0.1, 1.7321, 0.2484)
    """
    baselines, treatments = _tables(baseline, "baseline"), _tables(treatment, "treatment")
    reference = baselines[0]
    if len(reference) < 2:
        raise ValueError(f"a paired difference needs at least 2 episodes, got {len(reference)}")
    accuracy_b = _aligned(reference, baselines, "baseline")
    accuracy_t = _aligned(reference, treatments, "treatment")
    differences = accuracy_t.mean(axis=0) - accuracy_b.mean(axis=0)
    n = differences.size
    mean, sd = float(differences.mean()), float(differences.std(ddof=1))
    standard_error = sd / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):  # identical arms: t is nan (or ±inf), as in scipy
        statistic = float(np.float64(mean) / standard_error)
    seed_differences = None
    if len(baselines) == len(treatments):
        seed_differences = tuple(float(d) for d in (accuracy_t - accuracy_b).mean(axis=1))
    return PairedDifference(
        mean=mean,
        ci95=float(stats.t.ppf(0.975, n - 1) * standard_error),
        std=sd,
        episodes=n,
        seeds=(len(baselines), len(treatments)),
        statistic=statistic,
        pvalue=float(2 * stats.t.sf(abs(statistic), n - 1)),
        seed_differences=seed_differences,
    )


def _tables(tables: Sequence[DifficultyTable] | DifficultyTable, name: str) -> list[DifficultyTable]:
    tables = [tables] if isinstance(tables, DifficultyTable) else list(tables)
    if not tables:
        raise ValueError(f"`{name}` needs at least one table")
    return tables


def _aligned(reference: DifficultyTable, tables: Sequence[DifficultyTable], name: str) -> np.ndarray:
    """``[k, n]`` accuracies of ``tables`` in ``reference``'s episode order."""
    rows = []
    for index, table in enumerate(tables):
        try:
            accuracy = join_on_episode(reference, table).accuracy_b
        except ValueError as error:
            raise ValueError(
                f"{name}[{index}] and baseline[0] do not score the same episodes (scored with other data seeds, "
                f"ways, shots or episode counts?): {error}"
            ) from None
        unknown = int(np.count_nonzero(np.isnan(accuracy)))
        if unknown:
            raise ValueError(f"{name}[{index}] has {unknown} episode(s) without an accuracy")
        rows.append(accuracy)
    return np.stack(rows)


# -- command line ---------------------------------------------------------------------------------------------

#: The legend printed under the Markdown table.
LEGEND = (
    "Test accuracy (%): the mean over seeds ± 95% interval, combined as `lightning-episodes report` does (sd: over "
    "seeds). Paired difference: treatment − baseline in percentage points, per test episode averaged over each arm's "
    "seeds; mean ± 95% Student-t interval over the shared test episodes, and the paired t-test's two-sided p-value. "
    "That interval holds the trained models fixed: it covers the sampling of test episodes, not the variance between "
    "trainings; the per-seed differences (seed s of one arm against seed s of the other) show that spread."
)


def run_record(run_dir: Path) -> Path:
    """The ``test_results.json`` of a run folder (the newest, if it was tested more than once), not counting the
    tests of its ``cross_domain/`` folder.

    Raises:
        FileNotFoundError: naming the folder if it is missing or holds no test record.
    """
    if not run_dir.is_dir():
        raise FileNotFoundError(f"missing run folder {run_dir}")
    records = [p for p in find_results([run_dir]) if "cross_domain" not in p.relative_to(run_dir).parts]
    if not records:
        raise FileNotFoundError(f"{run_dir} holds no {RESULTS_FILE}: did its fit, with its test, finish?")
    records.sort(key=lambda p: p.stat().st_mtime)
    if len(records) > 1:
        warnings.warn(f"{run_dir} holds {len(records)} test records: using the newest, {records[-1]}", stacklevel=2)
    return records[-1]


def run_checkpoint(record_path: Path) -> Path:
    """The best checkpoint beside a test record (``checkpoints/best-*.ckpt``): the one the record names, else the
    newest.

    Raises:
        FileNotFoundError: if there is none.
    """
    found = sorted(record_path.parent.glob("checkpoints/best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no checkpoints/best-*.ckpt beside {record_path}")
    tested = Path(str(json.loads(record_path.read_text()).get("ckpt_path") or "")).name
    return next((path for path in found if path.name == tested), found[-1])


def run_scores(
    record_path: Path, count: int | None = None, device: str | torch.device = "cpu"
) -> tuple[DifficultyTable, RunResult]:
    """A run's per-episode test scores (from its cached ``test_episodes.csv``, or scored and cached) and its
    :class:`~lightning_episodes.analysis.report.RunResult` with the accuracy and interval of those scores.

    Args:
        record_path: the run's ``test_results.json``.
        count: test episodes to score (default: as many as the run was tested on).
        device: where to score.

    Raises:
        FileNotFoundError: if the run has no best checkpoint.
        ValueError: if the record names no episode count and ``count`` is not given.
    """
    from lightning_episodes.algorithms.loading import load_episodic_module

    record = json.loads(record_path.read_text())
    count = count or int(record.get("episodes") or 0)
    if count < 1:
        raise ValueError(f"{record_path} records no test episodes: pass --episodes")
    cache = record_path.with_name(SCORES_FILE)
    table = _cached(cache, count)
    if table is None:
        checkpoint = run_checkpoint(record_path)
        print(f"[compare] scoring {checkpoint} on {count} test episodes -> {cache}", file=sys.stderr, flush=True)
        module = load_episodic_module(checkpoint, map_location=device)
        table = score_episodes(module, checkpoint_datamodule(checkpoint), count, "test")
        table.write(cache)
    accuracy = table.accuracy
    # the test metric's interval (EpisodeMeanCI): 1.96 sd / √n with ddof = 0
    result = replace(read_result(record_path), accuracy=float(accuracy.mean()), episodes=len(table),
                     ci95=1.96 * float(accuracy.std()) / math.sqrt(len(table)))  # fmt: skip
    if count == record.get("episodes") and abs(result.accuracy - float(record["accuracy"])) > 1e-6:
        warnings.warn(
            f"{cache}: the scored accuracy {result.accuracy:.6f} differs from the tested {record['accuracy']:.6f} "
            "(another checkpoint, or other data settings than the test run's?)",
            stacklevel=2,
        )
    return table, result


def _cached(path: Path, count: int) -> DifficultyTable | None:
    """The first ``count`` episodes of a cached table, or ``None`` if it does not hold them all."""
    if not path.is_file():
        return None
    records = tuple(r for r in DifficultyTable.read(path) if r.episode_id < count and r.accuracy is not None)
    return DifficultyTable(records) if len(records) == count else None


def _seed_folders(scenario: Path) -> list[Path]:
    seeds = [p for p in scenario.glob("seed*") if p.is_dir() and re.fullmatch(r"seed\d+", p.name)]
    if not seeds:
        raise FileNotFoundError(f"no seed<N> folders in {scenario} (a folder laid out by scripts/run_scenario.py)")
    return sorted(seeds, key=lambda p: int(p.name[4:]))


def compare_scenario(
    scenario: Path, baseline: str, treatment: str, count: int | None = None, device: str | torch.device = "cpu"
) -> list[str]:
    """The entries of one row of :func:`main`'s table: the scenario, both arms and their paired difference.

    Raises:
        FileNotFoundError: naming a missing seed or run folder, test record or checkpoint.
        ValueError: if the runs test different scenarios or episodes.
    """
    seeds = _seed_folders(scenario)
    arms: dict[str, tuple[list[DifficultyTable], list[RunResult]]] = {}
    for arm in (baseline, treatment):
        scored = [run_scores(run_record(seed / arm), count, device) for seed in seeds]
        arms[arm] = ([table for table, _ in scored], [result for _, result in scored])
    results = arms[baseline][1] + arms[treatment][1]
    for result in results[1:]:
        if (result.column, result.row.algorithm) != (results[0].column, results[0].row.algorithm):
            raise ValueError(
                f"{scenario} mixes scenarios: {results[0].path} tests {results[0].row.algorithm} on "
                f"{results[0].column.label}, {result.path} {result.row.algorithm} on {result.column.label}"
            )
    try:
        difference = paired_difference(arms[baseline][0], arms[treatment][0])
    except ValueError as error:  # its tables are numbered in seed order
        raise ValueError(f"{scenario} ({', '.join(seed.name for seed in seeds)}): {error}") from None
    per_seed = ", ".join(
        f"{seed.name} {100 * d:+.2f}" for seed, d in zip(seeds, difference.seed_differences or (), strict=True)
    )
    return [
        results[0].column.label,
        results[0].row.algorithm,
        format_cell(combine(arms[baseline][1])),
        format_cell(combine(arms[treatment][1])),
        f"{100 * difference.mean:+.2f} ± {100 * difference.ci95:.2f}",
        "< 0.001" if difference.pvalue < 0.001 else f"{difference.pvalue:.3f}",
        per_seed,
        str(difference.episodes),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """``lightning-episodes compare SCENARIO_DIR... [--baseline NAME] [--treatment NAME] [--episodes N]
    [--markdown PATH] [--device DEVICE]``.

    For each scenario folder (``<scenario>/seed<N>/<scheme>_<proposal>/``, as ``scripts/run_scenario.py`` lays it
    out), scores each seed's best checkpoint of both arms on the test episodes (cached as ``test_episodes.csv``
    beside its ``test_results.json``) and prints one Markdown row per scenario: each arm's accuracy over seeds and
    the paired difference (treatment − baseline) with its interval, p-value and per-seed differences.

    Returns:
        0, or 1 (with the reason on stderr) when a seed folder, run, test record or checkpoint is missing or the
        runs do not score the same episodes (argument errors exit through ``argparse`` with status 2).
    """
    parser = argparse.ArgumentParser(
        prog="lightning-episodes compare",
        description="Paired per-episode test-accuracy difference of two sampling schemes, per scenario.",
    )
    parser.add_argument("scenarios", nargs="+", type=Path, help="scenario folders of scripts/run_scenario.py")
    parser.add_argument("--baseline", default="baseline_online", help="run folder of the baseline arm")
    parser.add_argument("--treatment", default="uniform_online", help="run folder of the treatment arm")
    parser.add_argument("--episodes", type=int, default=None, help="test episodes (default: each run's own count)")
    parser.add_argument("--markdown", type=Path, help="also write the Markdown table to this file")
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    args = parser.parse_args(sys.argv[2:] if argv is None else list(argv))
    if args.episodes is not None and args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    try:
        device = resolve_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    lines = [
        f"| Scenario | Algorithm | {args.baseline} | {args.treatment} | Paired difference (pp) | p | "
        "Per-seed differences (pp) | Episodes |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    try:
        for scenario in args.scenarios:
            entries = compare_scenario(scenario, args.baseline, args.treatment, args.episodes, device)
            lines.append("| " + " | ".join(entries) + " |")
    except (FileNotFoundError, ValueError) as error:
        print(f"lightning-episodes compare: error: {error}", file=sys.stderr)
        return 1
    markdown = "\n".join(lines) + "\n\n" + LEGEND + "\n"
    print(markdown, end="")
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())

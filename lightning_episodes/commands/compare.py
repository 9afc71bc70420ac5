"""``lightning-episodes compare``: the test-accuracy difference of sampling schemes against a baseline, per scenario,
on folders laid out by ``scripts/run_scenario.py``: over trainings first (paired by seed, the t interval over the
seed pairs), then over test episodes only (paired per episode)::

    lightning-episodes compare runs/study/glyphs_5w1s__protonet_euclidean_conv4 \\
        runs/study/glyphs_5w5s__protonet_euclidean_conv4 --baseline baseline_online --treatment uniform_online

A study plan's family of tests may hold contrasts between two treatment arms beside the treatments against the
baseline; ``--contrast TREATMENT:BASELINE`` adds them to each scenario's rows, and ``--correction holm`` adjusts over
all of them (``studies/scarce5/PLAN.md``'s family M: four arms against the baseline, the uniform arm against two)::

    lightning-episodes compare studies/scarce5/n60/glyphs_100_5w5s__protonet_cosine_conv4 --seeds tested \\
        --treatment uniform_online_placebo uniform_online_self uniform_online_scale uniform_offline \\
        --contrast uniform_online:uniform_online_placebo uniform_online:uniform_online_scale \\
        --correction holm --family M

Each run's per-episode test scores are its test's ``test_episodes.csv`` (written beside ``test_results.json`` by the
test itself); a run tested without one (by an older version) has its best checkpoint scored on the test episodes
once, and the table cached there. The statistics are :func:`~lightning_episodes.analysis.paired_difference`'s, the
table, its family correction and the forest plot :mod:`lightning_episodes.analysis.comparison`'s and
:mod:`lightning_episodes.analysis.forest`'s.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import torch

from lightning_episodes.analysis.comparison import Comparison, Correction, comparison_markdown, relative_labels
from lightning_episodes.analysis.paired import paired_difference
from lightning_episodes.analysis.protocols import distinguishing_settings
from lightning_episodes.analysis.report import (
    NEVER_WEIGHTED,
    RunResult,
    combine,
    distinguish_protocols,
    find_results,
    read_result,
)
from lightning_episodes.commands._common import (
    add_device_argument,
    add_skip_unreadable_argument,
    arguments,
    check_positive,
    command_parser,
    probe_output,
    refuse_unreadable,
    resolve_device,
    unreadable_note,
)
from lightning_episodes.evaluation import (
    RESULTS_FILE,
    SCORES_FILE,
    DifficultyTable,
    checkpoint_datamodule,
    score_episodes,
)
from lightning_episodes.evaluation.record import UnreadableRecord, read_record


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
    tested = Path(str(read_record(record_path)[0].get("ckpt_path") or "")).name
    return next((path for path in found if path.name == tested), found[-1])


def run_scores(
    record_path: Path, count: int | None = None, device: str | torch.device = "cpu"
) -> tuple[DifficultyTable, RunResult]:
    """A run's per-episode test scores (its test's ``test_episodes.csv``, or its best checkpoint scored and cached
    there) and its :class:`~lightning_episodes.analysis.report.RunResult` with the accuracy and interval of those
    scores.

    Args:
        record_path: the run's ``test_results.json``.
        count: test episodes to score (default: as many as the run was tested on).
        device: where to score.

    Raises:
        FileNotFoundError: if the run has no best checkpoint.
        UnreadableRecord: naming the record, if it cannot be read.
        ValueError: if the record names no episode count and ``count`` is not given.
    """
    from lightning_episodes.algorithms.loading import load_episodic_module

    tested = read_result(record_path)
    count = count or tested.episodes
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
    result = replace(tested, accuracy=float(accuracy.mean()), episodes=len(table),
                     ci95=1.96 * float(accuracy.std()) / math.sqrt(len(table)))  # fmt: skip
    if count == tested.episodes and abs(result.accuracy - tested.accuracy) > 1e-6:
        warnings.warn(
            f"{cache}: the scored accuracy {result.accuracy:.6f} differs from the tested {tested.accuracy:.6f} "
            "(another checkpoint, other data settings than the test run's, or another device's rounding?)",
            stacklevel=2,
        )
    return table, result


def _cached(path: Path, count: int) -> DifficultyTable | None:
    """The first ``count`` episodes of a cached table, or ``None`` if it does not hold them all."""
    if not path.is_file():
        return None
    records = tuple(r for r in DifficultyTable.read(path) if r.episode_id < count and r.accuracy is not None)
    return DifficultyTable(records) if len(records) == count else None


def _seed_folders(scenario: Path, only: Sequence[int] | None = None) -> list[Path]:
    """The ``seed<N>`` folders of a scenario in seed order: all of them, or those of ``only``, each required."""
    if only:
        missing = [scenario / f"seed{seed}" for seed in only if not (scenario / f"seed{seed}").is_dir()]
        if missing:
            raise FileNotFoundError(f"missing seed folder {missing[0]} (--seeds {' '.join(map(str, only))})")
        return [scenario / f"seed{seed}" for seed in sorted(set(only))]
    seeds = [p for p in scenario.glob("seed*") if p.is_dir() and re.fullmatch(r"seed\d+", p.name)]
    if not seeds:
        raise FileNotFoundError(f"no seed<N> folders in {scenario} (a folder laid out by scripts/run_scenario.py)")
    return sorted(seeds, key=lambda p: int(p.name[4:]))


def _record_or_error(run_dir: Path) -> Path | FileNotFoundError:
    """:func:`run_record` of ``run_dir``, or why it has none."""
    try:
        return run_record(run_dir)
    except FileNotFoundError as error:
        return error


def _unreadable(records: Sequence[Path | FileNotFoundError]) -> list[UnreadableRecord]:
    """The errors of those test ``records`` that cannot be read, in their order
    (:func:`~lightning_episodes.evaluation.record.read_record`)."""
    unreadable = []
    for record in records:
        try:
            if isinstance(record, Path):
                read_record(record)
        except UnreadableRecord as error:
            unreadable.append(error)
    return unreadable


#: ``--seeds tested``: each row over the seeds where both of its arms have a test record
TESTED = "tested"


class Untested(FileNotFoundError):
    """With ``--seeds tested``, or ``--skip-unreadable``: no seed of a scenario has both arms tested, readably (its row
    is left out, said on stderr)."""


class UnknownSetting(ValueError):
    """A name of ``--differing`` that is no setting of a row's runs (:attr:`name`)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"--differing {name}: no setting of the runs' training protocols is {name} or under it (they are "
            "named as in the runs' config.yaml: model.optimizer.lr, data.train_images_per_class, ...)"
        )
        self.name = name


class UnreadableRecords(ValueError):
    """The test records of a row that cannot be read (``records``: each an
    :class:`~lightning_episodes.evaluation.record.UnreadableRecord`, naming its file)."""

    def __init__(self, records: Sequence[UnreadableRecord]) -> None:
        super().__init__("; ".join(map(str, records)))
        self.records = list(records)


def compare_scenario(
    scenario: Path,
    baseline: str,
    treatment: str,
    count: int | None = None,
    device: str | torch.device = "cpu",
    seeds: Sequence[int] | Literal["tested"] | None = None,
    baseline_from: Path | None = None,
    differing: Sequence[str] = (),
    skip_unreadable: bool = False,
) -> tuple[RunResult, Comparison, list[UnreadableRecord]]:
    """One row of :func:`main`'s table: the scenario's first run (its benchmark and training protocol, which label
    the row), the row's comparison (both arms and their paired difference, over every ``seed<N>`` folder, those of
    ``seeds``, or with ``seeds="tested"`` those where both arms have a test record; its ``folder`` is the scenario
    folder's name), and the test records it left out because they cannot be read (with ``skip_unreadable``).

    Args:
        baseline_from: another scenario folder whose ``seed<N>/<baseline>`` runs are the baseline arm (the same seeds
            as the scenario's), e.g. the same cell trained at another learning rate.
        differing: protocol settings (``model.optimizer.lr``, or a whole ``model.optimizer``) in which the baseline's
            runs may differ from the treatment's; any other difference, their precision's included, is still refused.
        skip_unreadable: leave out the seeds where an arm's test record cannot be read, instead of refusing them.

    Warns:
        UserWarning: in one line, when a seed pair's runs were made on different processors (:func:`_same_processor`).

    Raises:
        FileNotFoundError: naming a missing seed or run folder, test record or checkpoint.
        UnreadableRecords: naming every test record of the row that cannot be read, unless ``skip_unreadable``.
        Untested: with ``"tested"``, when no seed has both arms tested (or, with ``skip_unreadable``, readably).
        ValueError: if the runs test different scenarios or episodes or differ in a setting not in ``differing``, a
            name of ``differing`` is no setting of theirs, or a treatment run never weighted.
    """
    folders = _seed_folders(scenario, None if isinstance(seeds, str) else seeds)
    roots = {"baseline": baseline_from or scenario, "treatment": scenario}
    if baseline == treatment and roots["baseline"].resolve() == scenario.resolve():
        raise ValueError(f"--treatment {treatment} is the baseline (--baseline {baseline} of {scenario})")
    found = {
        arm: [_record_or_error(roots[arm] / seed.name / name) for seed in folders]
        for arm, name in (("baseline", baseline), ("treatment", treatment))
    }
    unreadable = _unreadable([*found["baseline"], *found["treatment"]])
    if unreadable and not skip_unreadable:
        raise UnreadableRecords(unreadable)
    left_out = {error.path for error in unreadable}
    if left_out:  # --skip-unreadable: the seed pairs of those records are left out whole, named under the table
        kept = [i for i in range(len(folders)) if not any(found[arm][i] in left_out for arm in found)]
        if not kept:
            raise Untested(f"{scenario}: no seed<N> folder holds both {baseline} and {treatment} readable")
        folders = [folders[i] for i in kept]
        found = {arm: [records[i] for i in kept] for arm, records in found.items()}
    tested = [i for i in range(len(folders)) if all(isinstance(found[arm][i], Path) for arm in found)]
    # a campaign part-way through: say which seeds can be compared
    complete = ",".join(folders[i].name[4:] for i in tested)
    hint = (
        f" (the seeds with both arms tested: --seeds [{complete}], or --seeds tested)"
        if complete and seeds is None
        else ""
    )
    if seeds == TESTED:
        if not tested:
            raise Untested(f"{scenario}: no seed<N> folder holds both {baseline} and {treatment} tested")
        folders = [folders[i] for i in tested]
        found = {arm: [records[i] for i in tested] for arm, records in found.items()}
    arms: dict[str, tuple[list[DifficultyTable], list[RunResult]]] = {}
    for arm, records in found.items():
        scored = []
        for record in records:
            if isinstance(record, FileNotFoundError):
                raise FileNotFoundError(f"{record}{hint}")
            scored.append(run_scores(record, count, device))
        arms[arm] = ([table for table, _ in scored], [result for _, result in scored])
    never = [r.path for r in arms["treatment"][1] if (NEVER_WEIGHTED, "true") in r.row.options]
    if never and arms["treatment"][1][0].row.target != "baseline":
        raise ValueError(
            f"{never[0]} never weighted its episodes (weighted_steps 0: its warm-up outlasted the run), so it is "
            f"plain sampling, not the {treatment} arm: fit it with more steps than --trainer.callbacks.warmup_steps"
        )
    first = arms["baseline"][1][0]
    algorithm = _check_protocols(scenario, arms["baseline"][1], arms["treatment"][1], differing)
    for pair in zip(arms["baseline"][1], arms["treatment"][1], strict=True):
        _same_processor(scenario, pair)
    try:
        difference = paired_difference(arms["baseline"][0], arms["treatment"][0])
    except ValueError as error:  # its tables are numbered in seed order
        raise ValueError(f"{scenario} ({', '.join(seed.name for seed in folders)}): {error}") from None
    comparison = Comparison(
        folder=scenario.name,
        scenario=first.column.label,
        algorithm=algorithm,
        treatment=treatment,
        baseline_cell=combine(arms["baseline"][1]),
        treatment_cell=combine(arms["treatment"][1]),
        difference=difference,
        seeds=tuple(seed.name for seed in folders),
        baseline=baseline,
    )
    return first, comparison, unreadable


def _check_protocols(
    scenario: Path, baseline: Sequence[RunResult], treatment: Sequence[RunResult], differing: Sequence[str]
) -> str:
    """The row's algorithm entry, once every run tests one algorithm on one benchmark, the runs of each arm share
    one training protocol, and the arms' protocols differ at most in the ``differing`` settings (the entry then names
    how: ``ProtoNet (cosine); treatment optimizer=adam(lr=0.0007), baseline optimizer=adam(lr=0.001)``).

    Raises:
        ValueError: naming two runs that break this.
        UnknownSetting: for a name of ``differing`` that is no setting of theirs.
    """
    results = [*baseline, *treatment]
    first = results[0]
    settings = {key for result in results for key, _ in result.protocol}
    for name in differing:
        if not any(_under(key, name) for key in settings):
            raise UnknownSetting(name)
    for result in results[1:]:
        if (result.column, result.row.algorithm) != (first.column, first.row.algorithm):
            raise ValueError(
                f"{scenario} mixes scenarios: {first.path} tests {first.row.algorithm} on "
                f"{first.column.label}, {result.path} {result.row.algorithm} on {result.column.label}"
            )
    # a paired difference of arms trained differently is not the scheme's: one protocol per arm, and the arms'
    # differ only where the caller said they may
    for arm in (baseline, treatment):
        for result in arm[1:]:
            _same_protocol(scenario, arm[0], result)
    _same_protocol(scenario, baseline[0], treatment[0], differing, between_arms=True)
    if baseline[0].protocol == treatment[0].protocol:
        return first.row.algorithm
    labels = distinguishing_settings([treatment[0].protocol, baseline[0].protocol])
    return f"{first.row.algorithm}; treatment {labels[0]}, baseline {labels[1]}"


def _row(
    scenario: Path, treatment: str, baseline: str, args: Any, device: str | torch.device
) -> tuple[RunResult, Comparison, list[UnreadableRecord], set[str]]:
    """:func:`compare_scenario` of one row, ``treatment`` − ``baseline`` (``--baseline``, or a contrast's), with the
    names of ``--differing`` that are settings of its runs (a family of treatments may each differ from the baseline
    in a setting of its own), and those names."""
    differing = list(args.differing)
    while True:
        try:
            first, comparison, skipped = compare_scenario(
                scenario, baseline, treatment, args.episodes, device, args.seeds, args.baseline_from,
                differing, args.skip_unreadable,
            )  # fmt: skip
            return first, comparison, skipped, set(differing)
        except UnknownSetting as error:
            differing.remove(error.name)


def _same_processor(scenario: Path, pair: Sequence[RunResult]) -> None:
    """Warn, in one line, when the two runs of a seed pair were made on different processors (CPU model, its
    instruction-set extensions, accelerator: a record's ``made_on``): the same run rounds differently on them, so part
    of the pair's difference may be the processors'. Seeds made on different machines, each pair on one, are fine:
    another processor is another training, which the interval over seeds covers. Older records, which name less, are
    compared on what both name."""
    for ours, theirs in itertools.combinations(pair, 2):
        a, b = dict(ours.made_on), dict(theirs.made_on)
        if any(a[key] != b[key] for key in a.keys() & b.keys()):
            warnings.warn(
                f"{scenario}: a seed pair's runs were made on different processors: {ours.path} on "
                f"{ours.made_on_text}, {theirs.path} on {theirs.made_on_text} (a run rounds differently on each)",
                stacklevel=3,
            )
            return


def _under(setting: str, name: str) -> bool:
    """Whether ``setting`` is ``name`` or one of its arguments (``model.optimizer.lr`` is under ``model.optimizer``)."""
    return setting == name or setting.startswith(f"{name}.")


def _same_protocol(
    scenario: Path, ours: RunResult, theirs: RunResult, free: Sequence[str] = (), between_arms: bool = False
) -> None:
    """Refuse two runs whose protocols differ outside the ``free`` settings; between the arms, name what to free."""
    kept = [tuple(kv for kv in run.protocol if not any(_under(kv[0], name) for name in free)) for run in (ours, theirs)]
    if kept[0] == kept[1]:
        return
    labels = distinguishing_settings([ours.protocol, theirs.protocol])
    keys = {key for key, _ in set(kept[0]) ^ set(kept[1])}
    tops = sorted(key for key in keys if not any(_under(key, other) for other in keys - {key}))
    advice = f"; to pair them anyway, name what differs: --differing {' '.join(tops)}" if between_arms else ""
    raise ValueError(
        f"{scenario} mixes training protocols: {ours.path} ({labels[0]}), {theirs.path} ({labels[1]}){advice}"
    )


def parse_contrasts(items: Sequence[str], baseline: str, treatments: Sequence[str]) -> list[tuple[str, str]]:
    """The ``(treatment, baseline)`` arms of each ``--contrast TREATMENT:BASELINE``, in order, each once (an item
    repeated is taken once, as a repeated ``--treatment`` is).

    Args:
        items: the ``--contrast`` items.
        baseline: ``--baseline``, the baseline of the ``treatments``' rows.
        treatments: the ``--treatment`` arms.

    Raises:
        ValueError: in one line naming the item, for one without exactly one ``:`` or with an empty side, one whose
            sides are the same arm, or one that is a treatment's row against ``--baseline``, or reverses it or another
            contrast (the same test counted twice in the family).

    Example::

        >>> parse_contrasts(["uniform_online:uniform_online_placebo"], "baseline_online", ["uniform_online_placebo"])
        [('uniform_online', 'uniform_online_placebo')]
    """
    rows = {(treatment, baseline): f"the row of --treatment {treatment} (against --baseline {baseline})"
            for treatment in treatments}  # fmt: skip
    contrasts: list[tuple[str, str]] = []
    for item in items:
        sides = item.split(":")
        if len(sides) != 2 or not all(sides):
            raise ValueError(
                f"--contrast {item}: a contrast is TREATMENT:BASELINE, two run folders of the scenario joined by one "
                "':' (e.g. uniform_online:uniform_online_placebo)"
            )
        treatment, against = sides
        if (treatment, against) in contrasts:
            continue
        if treatment == against:
            raise ValueError(f"--contrast {item}: its treatment is its baseline; name two different arms")
        for pair, reversed_ in (((treatment, against), ""), ((against, treatment), " reversed")):
            if pair in rows:
                raise ValueError(f"--contrast {item} is {rows[pair]}{reversed_}: the family would count it twice")
        rows[treatment, against] = f"--contrast {treatment}:{against}"
        contrasts.append((treatment, against))
    return contrasts


DESCRIPTION = """\
Test-accuracy difference of sampling schemes against a baseline, per scenario: each scenario folder holds
seed<N>/<scheme>/ runs (as scripts/run_scenario.py lays them out); one Markdown row per scenario and
treatment, led by the difference over trainings (paired by seed: the mean of the seed pairs' differences
with its 95% t interval and one-sample t-test p, k - 1 degrees of freedom), then the per-seed differences,
then the paired per-episode difference, which covers test episodes only, then each arm's accuracy.
--contrast TREATMENT:BASELINE adds a row per scenario of two of its arms (e.g. two treatments), computed
as the others; where rows have different baselines, each row names both arms (TREATMENT − BASELINE) and
the accuracy columns are headed baseline and treatment. Without --treatment, --contrast gives its rows
alone. --correction holm adds Holm's adjusted p over the rows of each scenario, its treatments and
contrasts together (--family names the family); --forest draws the differences. Arms trained differently
(in any setting, precision included) are refused unless --differing names the setting; a seed pair made
on two processors is warned about. A test record that cannot be read stops it, each such record named;
--skip-unreadable leaves out the seeds of such records instead, naming each under the table.

examples:
  lightning-episodes compare runs/study/glyphs_5w1s__protonet_euclidean_conv4 \\
      --baseline baseline_online --treatment uniform_online --markdown compare.md
  lightning-episodes compare runs/scarce/glyphs_100_5w5s__protonet_cosine_conv4 --seeds tested \\
      --treatment uniform_online uniform_resample baseline_online__hard_task_mining \\
      --correction holm --family M --forest forest.png --markdown compare.md
  # a study plan's family of six tests as one command: four arms - the baseline, and two contrasts
  lightning-episodes compare studies/scarce5/n60/glyphs_100_5w5s__protonet_cosine_conv4 --seeds tested \\
      --treatment uniform_online_placebo uniform_online_self uniform_online_scale uniform_offline \\
      --contrast uniform_online:uniform_online_placebo uniform_online:uniform_online_scale \\
      --correction holm --family M
  # the same cell's baseline at another learning rate, paired with the baseline at the usual one
  lightning-episodes compare runs/scarce_lr7e-4/glyphs_100_5w5s__protonet_cosine_conv4 --seeds [0] \\
      --baseline-from runs/scarce/glyphs_100_5w5s__protonet_cosine_conv4 --treatment baseline_online \\
      --differing [model.optimizer.lr]
"""


def parser() -> Any:
    """The ``compare`` parser."""
    parser = command_parser("compare", DESCRIPTION)
    parser.add_argument("scenarios", nargs="+", type=Path, help="scenario folders of scripts/run_scenario.py")
    parser.add_argument(
        "--baseline", type=str, default="baseline_online", help="run folder of the baseline arm of the --treatment rows"
    )
    parser.add_argument(
        "--treatment",
        type=str,
        nargs="+",
        default=None,
        help="run folders of the treatment arms, each a row against --baseline (default: uniform_online, unless "
        "--contrast is given: then only the arms named here)",
    )
    parser.add_argument(
        "--contrast",
        type=str,
        nargs="+",
        default=[],
        help="TREATMENT:BASELINE, two run folders of each scenario, e.g. uniform_online:uniform_online_placebo: a row "
        "of TREATMENT - BASELINE, paired by seed as the --treatment rows are and in their family for --correction "
        "(not with --baseline-from: a contrast takes both arms from the scenario folder)",
    )
    parser.add_argument("--episodes", type=int | None, default=None, help="test episodes (default: each run's own)")
    parser.add_argument(
        "--seeds",
        type=list[int] | Literal["tested"] | None,
        default=None,
        help="only these seed<N> folders, e.g. [0,1]; 'tested': each row over the seeds where both of its arms were "
        "tested (default: every seed folder, each arm required in each)",
    )
    parser.add_argument(
        "--baseline-from",
        type=Path | None,
        default=None,
        help="another scenario folder whose seed<N>/<--baseline> runs are the baseline arm, the same seeds as each "
        "scenario's (e.g. the same cell trained at another learning rate; name what differs with --differing); not "
        "with --contrast, whose arms are both the scenario's",
    )
    parser.add_argument(
        "--differing",
        type=list[str],
        default=[],
        help="protocol settings in which the baseline's runs may differ from the treatment's, e.g. "
        "[model.optimizer.lr]; any other difference is still refused",
    )
    parser.add_argument("--markdown", type=Path | None, default=None, help="also write the Markdown table here")
    parser.add_argument(
        "--correction",
        type=Correction,
        default="none",
        help="a family correction over the rows of each scenario (its treatments and contrasts): holm (Holm's "
        "step-down adjusted p beside the raw p: over trainings with two or more seeds, else over test episodes), or "
        "none",
    )
    parser.add_argument(
        "--family", type=str | None, default=None, help="the family's name (a study plan's), printed in the header"
    )
    parser.add_argument(
        "--forest",
        type=Path | None,
        default=None,
        help="also draw every treatment - baseline (and contrast) with its 95% interval over trainings (a forest "
        "plot: PNG, PDF, SVG); one-seed rows with their interval over test episodes, in a marker of their own",
    )
    add_skip_unreadable_argument(parser)
    add_device_argument(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``lightning-episodes compare SCENARIO_DIR... [--baseline NAME] [--treatment NAME...]
    [--contrast TREATMENT:BASELINE...] [--episodes N]
    [--seeds N...|tested] [--baseline-from SCENARIO_DIR] [--differing SETTING...] [--markdown PATH]
    [--correction none|holm] [--family NAME] [--forest PATH] [--skip-unreadable] [--device DEVICE]``.

    For each scenario folder (``<scenario>/seed<N>/<scheme>_<proposal>/``, as ``scripts/run_scenario.py`` lays it
    out), reads each seed's per-episode test scores of both arms (``test_episodes.csv`` beside its
    ``test_results.json``, written by the test; for runs tested without one, the best checkpoint is scored on the
    test episodes and the table cached there) and prints one Markdown row per scenario and treatment
    (:func:`~lightning_episodes.analysis.comparison.comparison_markdown`): first the difference over trainings
    (treatment − baseline paired by seed, its t interval and p over the seed pairs; with one seed, none), then the
    per-seed differences, then the paired per-episode difference with its interval and p, which cover test episodes
    only, then each arm's accuracy over seeds. Each ``--contrast TREATMENT:BASELINE`` adds a row per scenario of
    those two arms, computed as the treatments' are (``--treatment`` then defaults to none, not ``uniform_online``);
    where rows have different baselines, each row names both arms. ``--correction holm`` adds each row's
    Holm-adjusted p within its scenario's rows, treatments and contrasts together; ``--forest`` draws the rows
    (:func:`~lightning_episodes.analysis.forest.plot_forest`). A test record that cannot be read stops it, every
    such record named; with ``--skip-unreadable`` the seeds where an arm's record cannot be read are left out of
    their row, each record named under the table. A seed pair made on two processors is said in a warning.

    Returns:
        0, or 2 (with the reason on stderr, a usage error as every command's) when a seed folder, run, test record or
        checkpoint is missing, a test record cannot be read (one line each, unless ``--skip-unreadable``), the runs
        do not score the same episodes or differ in a setting not named by ``--differing`` (their precision
        included), or the treatment never weighted.

    Raises:
        argparse.ArgumentError: for an unknown option or a value of the wrong type.
        ValueError: for a non-positive ``--episodes``, a treatment that is the baseline, a malformed, self-paired or
            duplicate ``--contrast`` (:func:`parse_contrasts`), ``--contrast`` with ``--baseline-from`` or an unknown
            ``--device``.
    """
    args = parser().parse_args(arguments(argv))
    check_positive("--episodes", args.episodes)
    default = [] if args.contrast else ["uniform_online"]  # --contrast alone: its rows only
    treatments = list(dict.fromkeys(default if args.treatment is None else args.treatment))
    if args.baseline in treatments and args.baseline_from is None:
        raise ValueError(f"--treatment {args.baseline} is the baseline (--baseline {args.baseline}): name another arm")
    if args.contrast and args.baseline_from is not None:
        raise ValueError(
            f"--contrast {args.contrast[0]} takes both arms from each scenario folder, --baseline-from the baseline "
            "from another: compare the contrasts in a command without --baseline-from"
        )
    contrasts = parse_contrasts(args.contrast, args.baseline, treatments)
    device = resolve_device(args.device)
    probe_output(args.markdown, "--markdown")
    probe_output(args.forest, "--forest")
    pairs = [*((treatment, args.baseline) for treatment in treatments), *contrasts]  # each row's arms, in order
    baselines = list(dict.fromkeys(baseline for _, baseline in pairs))
    named = len(baselines) > 1  # each row names its baseline
    several = len(pairs) > 1  # a column names each row's treatment
    arm_columns = [baselines[0], "treatment"] if several else [baselines[0], pairs[0][0]]
    if named:
        arm_columns = ["baseline", "treatment"]
    if args.baseline_from is not None and not several:  # the arms may share a name
        arm_columns = [f"baseline {args.baseline}", f"treatment {treatments[0]}"]
    _, folders = relative_labels(args.scenarios)
    rows: list[tuple[RunResult, Comparison]] = []
    unreadable: list[UnreadableRecord] = []
    unused = set(args.differing)  # each name of --differing must be a setting of some row's runs
    try:
        for scenario, folder in zip(args.scenarios, folders, strict=True):
            for treatment, baseline in pairs:
                try:
                    first, comparison, skipped, freed = _row(scenario, treatment, baseline, args, device)
                except Untested as untested:  # --seeds tested: a row only where both arms were tested
                    print(f"[compare] no row: {untested}", file=sys.stderr)
                    continue
                except UnreadableRecords as error:  # every row's are named, not the first one's alone
                    unreadable.extend(error.records)
                    continue
                unused -= freed
                unreadable.extend(skipped)
                rows.append((first, replace(comparison, folder=folder)))
        # the baseline's records are every treatment's: each named once
        unreadable = list({error.path: error for error in unreadable}.values())
        if unreadable and not args.skip_unreadable:
            return refuse_unreadable("compare", unreadable)
        if not rows and not contrasts:
            raise FileNotFoundError(f"no scenario holds {args.baseline} and {' or '.join(treatments)} tested")
        if not rows:
            arms = " or ".join(f"{baseline} and {treatment}" for treatment, baseline in pairs)
            raise FileNotFoundError(f"no scenario holds {arms} tested")
        if unused:
            raise UnknownSetting(next(name for name in args.differing if name in unused))
    except (FileNotFoundError, ValueError) as error:
        print(f"lightning-episodes compare: error: {error}", file=sys.stderr)
        return 2
    # scenarios of one benchmark trained under different protocols are told apart as report's columns are
    labelled = distinguish_protocols(first for first, _ in rows)
    comparisons = [replace(c, scenario=run.column.label) for run, (_, c) in zip(labelled, rows, strict=True)]
    labels = [f"{treatment} − {baseline}" if named else treatment for treatment, baseline in pairs]
    markdown = comparison_markdown(comparisons, arm_columns, several, args.correction, args.family, labels, named)
    markdown += unreadable_note(unreadable)
    print(markdown, end="")
    if args.markdown is not None:
        args.markdown.write_text(markdown)
    if args.forest is not None:
        from lightning_episodes.analysis.forest import plot_forest

        study, _ = relative_labels(args.scenarios)
        plot_forest(comparisons, baselines[0], study, named)[0].savefig(args.forest)
    return 0

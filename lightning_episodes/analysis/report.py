"""The paper's results tables (Tables 1-4) from the ``test_results.json`` files that test runs write.

``lightning-episodes report RUN_DIRS...`` (:mod:`lightning_episodes.commands.report`) finds every
``test_results.json`` under the given folders and prints a table in the paper's format: rows are algorithm x
sampling scheme, columns are test dataset x backbone x ways/shots, each cell the mean test accuracy (%) +- its
95% confidence interval. In each column the best entry is bold, and so is every entry whose interval overlaps
the best entry's (``--bold-within scenario``: the best per algorithm instead); a dagger marks a scheme that
matches or beats its algorithm's baseline (mean at least the baseline's, or overlapping intervals). The marks compare
cells of two or more seeds only, whose intervals cover the spread between trainings (see below).

What a run folder must hold (the CLI writes both into the logger's folder):

- ``test_results.json`` (the fields of :func:`~lightning_episodes.evaluation.results_record`): ``algorithm``,
  ``accuracy``, ``ci95``, ``episodes``, ``hparams`` (``backbone``; ``distance`` for ProtoNet) and ``data``
  (``dataset``, ``ways``/``shots`` or ``eval_ways``/``eval_shots``, ``seed``, ``test_split``);
- ``config.yaml`` beside it (LightningCLI's ``SaveConfigCallback``): the sampling scheme is the options of the
  ``DifficultyWeightingCallback`` in ``trainer.callbacks`` (no such callback: plain sampling, "baseline"), and the
  run's seed is ``seed_everything``. A ``sampling`` field (the callback's options) or ``seed`` field in the record
  takes precedence; without either source the scheme is "unknown". A record names the callback's defaults
  (``sampling_defaults``); for older records and configs alone they are
  :data:`~lightning_episodes.evaluation.record.LEGACY_SAMPLING_DEFAULTS`.

A row is an algorithm and a scheme: the ``target``, the ``estimate`` (``online``/``offline``) and every other option
of the callback that differs from the callback's default, e.g. ``uniform (online, out_of_support=clamp)`` beside
``uniform (online)``, so arms that differ only in an option are never merged. Left out (:data:`IGNORED_OPTIONS`):
where the offline reference lies and the callback's ``seed`` (each seed of an arm may have its own), its name and
its logging. Records and configs of earlier versions, whose ``proposal`` was ``online``/``offline``, read it as the
``estimate``. The baseline target weights every episode 1 whatever the other options, so every baseline run forms
one "baseline" row. Runs of one cell with different seeds (``seed_everything``, data seed) are combined:
the mean over seeds, shown with the standard deviation over seeds; the interval combines the test-episode
interval, which is shared because every seed is tested on the same fixed episodes (so it does not shrink with k), with
the Student-t interval of the mean over the k seeds, which covers the spread between trainings:
``half-width = sqrt(mean_i(ci_i^2) + (t sd / sqrt(k))^2)``, ``t`` the 0.975 quantile of Student's t with k - 1
degrees of freedom (4.30 for k = 3, 12.71 for k = 2; one run: its own ``ci95``, over the test episodes alone, the
spread between trainings unmeasured). The bold and † marks compare these intervals, of cells of two or more seeds
only: a claim about trainings needs the interval over trainings, so a cell of one seed, whose interval covers only
which test episodes were drawn, gets no mark, is never the best and gives no †. Two records of one cell and seed
(e.g. a checkpoint tested twice) count once: the newest file is kept, with a warning.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from scipy import stats

from lightning_episodes.analysis.protocols import Protocol, distinguishing_settings, protocol_of
from lightning_episodes.data.task_samplers import describe_task_sampler
from lightning_episodes.evaluation.record import CONFIG_FILE, LEGACY_SAMPLING_DEFAULTS, RESULTS_FILE, read_record
from lightning_episodes.weighting import available_targets  # rows in the paper's order of targets

BoldWithin = Literal["column", "scenario"]

_DATASETS = {
    "mini-imagenet": "Mini-ImageNet",
    "tiered-imagenet": "Tiered-ImageNet",
    "cub200": "CUB-200",
    "dtd": "DTD",
    "fgvc-aircraft": "FGVC-Aircraft",
    "vgg-flowers": "VGG Flowers",
    "glyphs": "Glyphs",
    "glyphs-hard": "Glyphs-hard",
    "glyphs-100": "Glyphs-100",
}
_BACKBONES = {"conv4": "Conv-4", "resnet12": "ResNet-12", "resnet12-wide": "ResNet-12 (wide)"}
_ALGORITHMS = ("ProtoNet (Euclidean)", "ProtoNet (cosine)", "MAML", "ANIL", "FEAT")
_ESTIMATES = ("offline", "online")
#: Options of the weighting callback that do not tell arms apart, so runs that differ in them share a row: the
#: offline reference's path and the callback's seed (each seed of an arm may have its own), its name, its logging;
#: the target and the estimate are a row's own fields.
IGNORED_OPTIONS = frozenset(
    {"reference_checkpoint", "seed", "name", "histogram_every_n_steps", "log_grad_norm", "target", "estimate"}
)
_EPS = 1e-12  # intervals that touch overlap, whatever the rounding

#: The legend printed under the Markdown table.
LEGEND = (
    "Mean test accuracy (%) ± 95% interval. One seed: the interval over the test episodes, with the model fixed (the "
    "spread between trainings is not measured). Several seeds (k): their mean and standard deviation (sd); the "
    "interval adds the Student-t interval over the seeds' means (t with k − 1 degrees of freedom × sd / √k), which "
    "covers the spread between trainings, to the test-episode interval. **Bold**: the best entry and every entry "
    "whose interval overlaps it. †: matches or beats the same algorithm's baseline (a mean at least the baseline's, "
    "or overlapping intervals). Both marks compare cells of two or more seeds only: a claim about trainings needs the "
    "interval over trainings, so a cell of one seed gets no mark (nor sets the best, nor as a baseline gives a †)."
)
#: Header of the CSV table (accuracies in %; ``bold`` and ``matches_baseline`` are 0/1).
CSV_COLUMNS = ("algorithm", "target", "estimate", "options", "dataset", "backbone", "ways", "shots", "split",
               "accuracy_pct", "ci95_pct", "seeds", "seed_sd_pct", "episodes", "bold", "matches_baseline")  # fmt: skip


def _rank(value: str, order: Sequence[str]) -> tuple[int, str]:
    return (order.index(value) if value in order else len(order), value)


Options = tuple[tuple[str, str], ...]
#: The option a row gains when its records say the weighting never acted (``weighted_steps`` 0: a warm-up as long as
#: the run): ``uniform (online, never_weighted=true)``, a row of its own.
NEVER_WEIGHTED = "never_weighted"
#: The option a row gains when its records' classes were chosen by a task sampler (``data.task_sampler``):
#: ``baseline + HardTaskMining (buffer_size=50, ...)``, a row of its own.
TASK_SAMPLER = "task_sampler"


@dataclass(frozen=True)
class Row:
    """A table row: an algorithm (with its variant, e.g. ProtoNet's distance) and a sampling scheme.

    Args:
        algorithm: e.g. ``"ProtoNet (Euclidean)"``.
        target: the weighting target, ``"baseline"`` (plain sampling) or ``"unknown"``.
        estimate: ``"online"``/``"offline"`` (``None`` for the baseline and unknown schemes).
        options: ``(name, value as text)`` of every other option that differs from the callback's default, sorted.
    """

    algorithm: str
    target: str
    estimate: str | None = None
    options: Options = ()

    @property
    def scheme(self) -> str:
        """``baseline``, ``unknown``, or ``<target> (<estimate>[, <option>=<value>...])``, and ``+ <task sampler>``
        when one chose the classes: ``baseline + HardTaskMining (buffer_size=50)``."""
        shown = [f"{k}={v}" for k, v in self.options if k != TASK_SAMPLER]
        if self.estimate is None:
            weighting = f"{self.target} ({', '.join(shown)})" if shown else self.target
        else:
            weighting = f"{self.target} ({', '.join([self.estimate, *shown])})"
        sampler = dict(self.options).get(TASK_SAMPLER)
        if sampler is None:
            return weighting
        name, _, arguments = sampler.partition("(")  # HardTaskMining(a=1) -> HardTaskMining (a=1)
        arguments = arguments.removesuffix(")")
        return f"{weighting} + {name}" + (f" ({arguments})" if arguments else "")

    def key(self) -> tuple[Any, ...]:
        # the baseline first, then each estimate's targets in the paper's order, plain options before others;
        # unknown schemes last
        scheme = (self.target == "unknown", self.target != "baseline", _rank(self.estimate or "", _ESTIMATES))
        return (_rank(self.algorithm, _ALGORITHMS), *scheme, _rank(self.target, available_targets()), self.options)


@dataclass(frozen=True)
class Column:
    """A table column: the test dataset, the backbone and the evaluation episodes' ways and shots, and ``setting``:
    what sets its training protocol apart from the other protocols of the same benchmark in the table (see
    :func:`distinguish_protocols`; empty when the benchmark has one)."""

    dataset: str
    backbone: str
    ways: int | None
    shots: int | None
    split: str = "test"
    setting: str = ""

    @property
    def label(self) -> str:
        parts = [_DATASETS.get(self.dataset, self.dataset), _BACKBONES.get(self.backbone, self.backbone)]
        parts.append(f"{self.ways if self.ways else '?'}-way {self.shots if self.shots else '?'}-shot")
        label = ", ".join(parts) + ("" if self.split == "test" else f" ({self.split} split)")
        return label + (f" [{self.setting}]" if self.setting else "")

    def key(self) -> tuple[Any, ...]:
        return (_rank(self.dataset, list(_DATASETS)), _rank(self.backbone, list(_BACKBONES)), self.ways or 0,
                self.shots or 0, self.split != "test", self.split, self.setting)  # fmt: skip


@dataclass(frozen=True)
class RunResult:
    """One test run: where it sits in the table, its accuracy and 95% CI (fractions), and its seed."""

    path: Path
    row: Row
    column: Column
    accuracy: float
    ci95: float
    episodes: int
    seed: tuple[Any, Any] | None = None
    #: how it was trained (:func:`~lightning_episodes.analysis.protocols.protocol_of`)
    protocol: Protocol = ()
    #: ``(step, validation accuracy)`` of every validation of the fit, in step order (older records: empty)
    validation: tuple[tuple[int, float], ...] = ()
    #: the package versions the record was made with (``(name, version)``, sorted; older records: empty)
    versions: tuple[tuple[str, str], ...] = ()
    #: where it was made: the fields of :data:`MADE_ON` its record carries (``(name, value)``; older records: fewer)
    made_on: tuple[tuple[str, str], ...] = ()

    @property
    def made_on_text(self) -> str:
        """Where it was made, in words: ``Intel(R) Xeon(R) Gold 6430 [avx2 avx512f] (cuda NVIDIA H200)``."""
        made_on = dict(self.made_on)
        text = made_on.get("cpu", "an unnamed CPU") + (f" [{made_on['cpu_flags']}]" if made_on.get("cpu_flags") else "")
        where = " ".join(made_on[key] for key in ("accelerator", "device") if made_on.get(key))
        return f"{text} ({where})" if where else text

    @property
    def best_validation(self) -> tuple[int, float] | None:
        """``(step, accuracy)`` of the best validation (the first of equals, as the checkpoint callback keeps it)."""
        return max(self.validation, key=lambda point: point[1]) if self.validation else None

    @property
    def best_step(self) -> int | None:
        """The step of the best validation accuracy (:attr:`best_validation`'s)."""
        best = self.best_validation
        return None if best is None else best[0]

    @property
    def converged(self) -> bool | None:
        """Whether the best validation came before the last one: the run stopped after its peak (``None``: no
        validation curve in the record)."""
        best = self.best_step
        return None if best is None else best < self.validation[-1][0]


@dataclass(frozen=True)
class Cell:
    """A table entry: the mean accuracy over ``seeds`` runs, its 95% interval half-width (fractions)."""

    mean: float
    ci95: float
    seeds: int = 1
    seed_sd: float | None = None
    episodes: int = 0
    bold: bool = False
    matches_baseline: bool = False

    def overlaps(self, other: Cell) -> bool:
        """Whether the closed intervals ``mean +- ci95`` of the two cells intersect."""
        return abs(self.mean - other.mean) <= self.ci95 + other.ci95 + _EPS


def combine(runs: Sequence[RunResult]) -> Cell:
    """The cell of several seeds of one scenario and scheme (see the module docstring for the interval)."""
    if len(runs) == 1:
        return Cell(runs[0].accuracy, runs[0].ci95, 1, None, runs[0].episodes)
    accuracies = [run.accuracy for run in runs]
    sd = statistics.stdev(accuracies)
    within = statistics.fmean(run.ci95**2 for run in runs)
    between = float(stats.t.ppf(0.975, len(runs) - 1)) * sd / math.sqrt(len(runs))
    half_width = math.sqrt(within + between**2)
    return Cell(statistics.fmean(accuracies), half_width, len(runs), sd, min(run.episodes for run in runs))


Scheme = tuple[str, str | None, Options]


def sampling_scheme(config: dict[str, Any]) -> Scheme:
    """``(target, estimate, options)`` of the weighting callback in a saved LightningCLI config (see
    :func:`scheme_of`, with the defaults of :data:`~lightning_episodes.evaluation.record.LEGACY_SAMPLING_DEFAULTS`);
    ``("baseline", None, ())`` without one."""
    callbacks = (config.get("trainer") or {}).get("callbacks") or []
    for callback in [callbacks] if isinstance(callbacks, dict) else callbacks:
        if not isinstance(callback, dict):
            continue
        init_args = callback.get("init_args") or {}
        named = "DifficultyWeighting" in str(callback.get("class_path", ""))
        if named or ("target" in init_args and {"estimate", "proposal"} & set(init_args)):
            return scheme_of({"target": "uniform", **init_args})
    return "baseline", None, ()


def _text(value: Any) -> str:
    """An option's value as a row label shows it (YAML's spelling of booleans and null)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def scheme_of(options: dict[str, Any], defaults: dict[str, Any] | None = None) -> Scheme:
    """``(target, estimate, options)`` of a weighting callback's options (a record's ``sampling``, a config's
    ``init_args``): the options that differ from the callback's defaults, minus :data:`IGNORED_OPTIONS`.

    ``proposal: online|offline`` (earlier versions) is the ``estimate``. The baseline is ``("baseline", None, ())``:
    its weights are 1 whatever the other options.

    Args:
        options: the callback's options by name.
        defaults: their defaults (a record's ``sampling_defaults``); ``None``: those of
            :data:`~lightning_episodes.evaluation.record.LEGACY_SAMPLING_DEFAULTS`, for records that do not carry
            their own.
    """
    defaults = dict(LEGACY_SAMPLING_DEFAULTS) if defaults is None else defaults
    target = options.get("target", "baseline")
    if isinstance(target, dict):  # a Target object given by class_path, named with its arguments
        arguments = ", ".join(f"{k}={_text(v)}" for k, v in sorted((target.get("init_args") or {}).items()))
        target = str(target.get("class_path", "custom")).rsplit(".", 1)[-1] + (f"({arguments})" if arguments else "")
    if target == "baseline":
        return "baseline", None, ()
    options = dict(options)
    if options.get("proposal") in _ESTIMATES:  # the estimate, by its earlier name
        options.setdefault("estimate", options.pop("proposal"))
    differing = []
    for name, value in options.items():
        # compared as text: a YAML `3` is the default `3.0`, but `true` is not `1`; an unknown option always counts
        same = name in defaults and _text(value) == _text(defaults[name])
        if name not in IGNORED_OPTIONS and not same:
            differing.append((name, _text(value)))
    return str(target), str(options.get("estimate", "online")), tuple(sorted(differing))


def _backbone_name(backbone: Any) -> str:
    """A registered backbone's name, or a class path's class (``{class_path: torchvision.models.ResNet}``: ResNet)."""
    return str(backbone.get("class_path", "?")).rpartition(".")[2] if isinstance(backbone, dict) else str(backbone)


def _algorithm(record: dict[str, Any]) -> str:
    name, distance = str(record.get("algorithm", "?")), record.get("hparams", {}).get("distance")
    if name == "ProtoNet" and distance:
        return f"ProtoNet ({'Euclidean' if distance == 'euclidean' else distance})"
    return name


def read_result(path: str | Path) -> RunResult:
    """Read one ``test_results.json`` and, beside it, the run's ``config.yaml``.

    Raises:
        ~lightning_episodes.evaluation.record.UnreadableRecord: (a ``ValueError``) naming the file, if it or its
            config cannot be read, or it is not a test record (no numbers ``accuracy`` and ``ci95``).
    """
    path = Path(path)
    record, config = read_record(path)
    sampling = record.get("sampling")
    scheme: Scheme
    if isinstance(sampling, dict):
        defaults = record.get("sampling_defaults")
        scheme = scheme_of(sampling, defaults if isinstance(defaults, dict) else None)
    elif config is not None:
        scheme = sampling_scheme(config)
    else:
        scheme = ("unknown", None, ())
        warnings.warn(f"{path}: no {CONFIG_FILE} beside it, so its sampling scheme is unknown", stacklevel=2)
    target, estimate, options = scheme
    if record.get("weighted_steps") == 0 and target not in ("baseline", "unknown"):
        # its warm-up outlasted the run: plain sampling in fact, never pooled with (or paired as) the weighted arm
        scheme = (target, estimate, tuple(sorted((*options, (NEVER_WEIGHTED, "true")))))
    data = record.get("data", {})
    if data.get("task_sampler"):  # the classes were chosen by a task sampler: an arm of its own, never the baseline
        target, estimate, options = scheme
        # its class path and init_args, or an older record's repr: the same text for the same sampler
        sampler = describe_task_sampler(data["task_sampler"])
        scheme = (target, estimate, tuple(sorted((*options, (TASK_SAMPLER, sampler)))))
    seed = record.get("seed", (config or {}).get("seed_everything"))
    made = record.get("environment")
    made = made if isinstance(made, dict) else {}
    column = Column(
        dataset=str(data.get("dataset", "?")),
        backbone=_backbone_name(record.get("hparams", {}).get("backbone", "?")),
        ways=data.get("eval_ways") or data.get("ways"),
        shots=data.get("eval_shots") or data.get("shots"),
        split=str(data.get("test_split", "test")),
    )
    return RunResult(
        path=path,
        row=Row(_algorithm(record), *scheme),
        column=column,
        accuracy=float(record["accuracy"]),
        ci95=float(record["ci95"]),
        episodes=int(record.get("episodes", 0)),
        seed=None if isinstance(seed, bool) or seed is None else (seed, data.get("seed")),
        validation=tuple((int(step), float(accuracy)) for step, accuracy in record.get("validation") or []),
        protocol=protocol_of(config, record),
        versions=tuple(sorted((str(k), str(v)) for k, v in made.items() if k not in (*MADE_ON, "precision"))),
        made_on=tuple((key, str(made[key])) for key in MADE_ON if key in made),
    )


#: The fields of a record's ``environment`` that say where it ran (the processor), not with which versions; its
#: ``precision`` says how: a setting of its training protocol, read by
#: :func:`~lightning_episodes.analysis.protocols.protocol_of`.
MADE_ON = ("cpu", "cpu_flags", "accelerator", "device")


def mixed_versions(results: Iterable[RunResult]) -> str | None:
    """Which package versions differ between the records (those that carry them), e.g. ``numpy 2.4.6 / 2.5.0``;
    ``None`` when they agree. Bit for bit, a record reproduces only with its own versions."""
    seen: dict[str, set[str]] = defaultdict(set)
    for result in results:
        for name, version in result.versions:
            seen[name].add(version)
    differing = [f"{name} {' / '.join(sorted(found))}" for name, found in sorted(seen.items()) if len(found) > 1]
    return ", ".join(differing) or None


def distinguish_protocols(results: Iterable[RunResult]) -> list[RunResult]:
    """``results`` with each column's ``setting`` naming what sets its run's training protocol apart, wherever one
    algorithm was trained on one benchmark under different protocols (a learning-rate schedule, steps, backbone
    width, ...): those are different columns, never seeds of one cell. A setting that is constant within each
    algorithm is that algorithm's recipe (MAML's adaptation steps, ProtoNet's distance, each one's steps), not a
    column: the algorithms of a benchmark share its column. Idempotent."""
    results = list(results)
    groups: dict[Column, dict[str, list[Protocol]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        protocols = groups[replace(result.column, setting="")][result.row.algorithm]
        if result.protocol not in protocols:
            protocols.append(result.protocol)
    settings: dict[tuple[Column, Protocol], str] = {}
    for column, by_algorithm in groups.items():
        varying = set().union(*map(_differing, by_algorithm.values()))
        reduced = {p: tuple(kv for kv in p if kv[0] in varying) for ps in by_algorithm.values() for p in ps}
        distinct = list(dict.fromkeys(reduced.values()))
        labels = dict(zip(distinct, distinguishing_settings(distinct), strict=True))
        settings.update({(column, protocol): labels[short] for protocol, short in reduced.items()})
    distinguished = []
    for result in results:
        setting = settings[replace(result.column, setting=""), result.protocol]
        distinguished.append(replace(result, column=replace(result.column, setting=setting)))
    return distinguished


def _differing(protocols: Sequence[Protocol]) -> set[str]:
    """The settings in which ``protocols`` differ (a setting one of them lacks counts)."""
    tables = [dict(protocol) for protocol in protocols]
    return {key for table in tables for key in table if len({other.get(key) for other in tables}) > 1}


def find_results(paths: Iterable[str | Path]) -> list[Path]:
    """Every ``test_results.json`` at or under ``paths`` (files or folders), sorted, without duplicates."""
    found: set[Path] = set()
    for path in map(Path, paths):
        found.update([path] if path.is_file() else path.rglob(RESULTS_FILE))
    return sorted(found)


def _unique_seeds(results: Iterable[RunResult]) -> dict[tuple[Row, Column], list[RunResult]]:
    """Group runs by cell, keeping the newest record of each seed."""
    seen: dict[tuple[Any, ...], RunResult] = {}
    newest_last = sorted(results, key=lambda r: (r.path.stat().st_mtime if r.path.exists() else 0.0, str(r.path)))
    for result in distinguish_protocols(newest_last):
        key = (result.row, result.column, result.seed if result.seed is not None else result.path)
        if key in seen:
            warnings.warn(f"{seen[key].path} and {result.path} are one seed of one cell: using the newer", stacklevel=3)
        seen[key] = result
    cells: dict[tuple[Row, Column], list[RunResult]] = defaultdict(list)
    for result in seen.values():
        cells[result.row, result.column].append(result)
    return cells


@dataclass
class ResultsTable:
    """Rows, columns and cells of a results table; :meth:`to_markdown` and :meth:`to_csv` render it."""

    rows: list[Row]
    columns: list[Column]
    cells: dict[tuple[Row, Column], Cell]

    def to_markdown(self) -> str:
        """The table in GitHub Markdown, with a legend."""
        lines = ["| Algorithm | Sampling | " + " | ".join(c.label for c in self.columns) + " |"]
        lines.append("|---|---|" + "---:|" * len(self.columns))
        previous = None
        for row in self.rows:
            entries = [format_cell(self.cells.get((row, column))) for column in self.columns]
            name = "" if row.algorithm == previous else row.algorithm
            lines.append(f"| {name} | {row.scheme} | " + " | ".join(entries) + " |")
            previous = row.algorithm
        return "\n".join(lines) + "\n\n" + LEGEND + "\n"

    def to_csv(self) -> str:
        """One line per cell (accuracies in %); ``bold`` and ``matches_baseline`` hold the marks."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for row in self.rows:
            for column in self.columns:
                cell = self.cells.get((row, column))
                if cell is None:
                    continue
                sd = "" if cell.seed_sd is None else f"{100 * cell.seed_sd:.4f}"
                options = ", ".join(f"{k}={v}" for k, v in row.options)
                writer.writerow([row.algorithm, row.target, row.estimate or "", options, column.dataset,
                                 column.backbone, column.ways, column.shots, column.split, f"{100 * cell.mean:.4f}",
                                 f"{100 * cell.ci95:.4f}", cell.seeds, sd, cell.episodes, int(cell.bold),
                                 int(cell.matches_baseline)])  # fmt: skip
        return out.getvalue()


def format_cell(cell: Cell | None) -> str:
    """A cell as the table shows it: mean ± 95% CI in percent, its bold/† marks, and the seeds' spread if several."""
    if cell is None:
        return "–"
    text = f"{100 * cell.mean:.2f} ± {100 * cell.ci95:.2f}"
    text = (f"**{text}**" if cell.bold else text) + ("†" if cell.matches_baseline else "")
    return text if cell.seed_sd is None else f"{text} (sd {100 * cell.seed_sd:.2f}, {cell.seeds} seeds)"


def build_table(results: Iterable[RunResult], bold_within: BoldWithin = "column") -> ResultsTable:
    """Combine seeds into cells and mark them.

    Args:
        results: test runs, e.g. ``[read_result(p) for p in find_results(dirs)]``.
        bold_within: ``"column"``: bold the best entry of each column and every entry overlapping it;
            ``"scenario"``: the same within each algorithm's rows of a column. Either way, among cells of two or more
            seeds only: a cell of one seed gets no mark.

    Returns:
        The table, rows and columns in the paper's order (known names first).
    """
    plain = {key: combine(runs) for key, runs in _unique_seeds(results).items()}
    # marks only between intervals over trainings: a one-seed cell's covers its test episodes alone
    marked = {key: cell for key, cell in plain.items() if cell.seeds >= 2}
    groups: dict[tuple[Any, ...], list[tuple[Row, Column]]] = defaultdict(list)
    for row, column in marked:
        groups[(column, row.algorithm) if bold_within == "scenario" else (column,)].append((row, column))
    best = {group: max((marked[key] for key in keys), key=lambda c: c.mean) for group, keys in groups.items()}
    cells = {key: replace(cell, bold=False, matches_baseline=False) for key, cell in plain.items()}
    for group, keys in groups.items():
        for row, column in keys:
            cell, baseline = marked[row, column], marked.get((Row(row.algorithm, "baseline"), column))
            matches = False
            if row.target != "baseline" and baseline is not None:
                matches = cell.mean >= baseline.mean - _EPS or cell.overlaps(baseline)
            cells[row, column] = replace(cell, bold=cell.overlaps(best[group]), matches_baseline=matches)
    rows = sorted({row for row, _ in cells}, key=Row.key)
    columns = sorted({column for _, column in cells}, key=Column.key)
    return ResultsTable(rows, columns, cells)


def runs_markdown(results: Iterable[RunResult], at_steps: Sequence[int] = ()) -> str:
    """A Markdown table with a line per run that recorded its validation curve: its test accuracy, its best and its
    last validation accuracy with their steps, whether it converged (its best validation came before its last) and
    its validation accuracy at each of ``at_steps`` (– where it did not validate at that step); empty if no run
    recorded a curve. Where the runs were not all made on one processor, a last column names each run's
    (:attr:`RunResult.made_on_text`): a run rounds differently on another, so a comparison pairs runs made on one."""
    runs = [r for r in distinguish_protocols(results) if r.validation]
    runs.sort(key=lambda r: (r.column.key(), r.row.key(), str(r.seed)))
    if not runs:
        return ""
    at = "".join(f" Val. acc. at {step} (%) |" for step in at_steps)
    made_on = len({run.made_on_text for run in runs}) > 1
    lines = [
        "| Benchmark | Algorithm | Sampling | Seed | Test acc. (%) | Best val. acc. (%) | Best step | "
        f"Last val. acc. (%) | Last step | Converged |{at}" + (" Made on |" if made_on else ""),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|" + "---:|" * len(at_steps) + ("---|" if made_on else ""),
    ]
    for run in runs:
        assert run.best_validation is not None  # runs without a curve are left out above
        best_step, best = run.best_validation
        last_step, last = run.validation[-1]
        seed = "" if run.seed is None else run.seed[0]
        converged = "yes" if run.converged else "no"
        curve = dict(run.validation)
        points = "".join(f" {100 * curve[step]:.2f} |" if step in curve else " – |" for step in at_steps)
        lines.append(
            f"| {run.column.label} | {run.row.algorithm} | {run.row.scheme} | {seed} | "
            f"{100 * run.accuracy:.2f} ± {100 * run.ci95:.2f} | {100 * best:.2f} | {best_step} | "
            f"{100 * last:.2f} | {last_step} | {converged} |{points}" + (f" {run.made_on_text} |" if made_on else "")
        )
    return "\n".join(lines) + (
        "\n\nConverged: the best validation came before the last (the run stopped after its peak). How far the last"
        " falls below the best tells an over-fit from a plateau.\n"
    )

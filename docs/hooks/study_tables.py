"""MkDocs hook: tables generated when the site is built, where a page asks, so that no page copies them by hand.

A page asks for a table with an HTML comment on a line of its own::

    <!-- table study-answers -->

``study-answers`` is a table of :data:`TABLES`. On the site the comment becomes the Markdown table; on the
repository's file view it shows nothing. An unknown table fails the build. The tables:

- ``study-answers``: the study's numbers from its records. Each row is ``lightning-episodes compare`` of one arm
  against its baseline over the seeds where both were tested
  (:func:`~lightning_episodes.commands.compare.compare_scenario`), so the guides quote no number by hand and none
  goes stale when a training lands; a row whose records cannot be compared fails the build.
- ``weighting-options``: every option of the weighting callback, its default and what it does, from its
  constructor's signature and its docstring's ``Args:`` (what ``--help`` shows): the one place the options are
  declared. An argument that the docstring leaves out, or names without the signature, fails the build.
"""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = re.compile(r"^<!-- table (?P<name>[\w-]+) -->[ \t]*$", re.MULTILINE)


class Row(NamedTuple):
    """One arm against its baseline: the cell's folder (under ``studies/``), the arms' run folders, what the row is
    called, the cell as a reader knows it, and the protocol settings in which the arms may differ."""

    cell: str
    treatment: str
    label: str
    where: str
    baseline: str = "baseline_online"
    differing: tuple[str, ...] = ()


SCARCE5 = "scarce5/n60/glyphs_100_5w5s__protonet_{}_conv4"
REGULARISERS = "scarce5/n60_regularisers/glyphs_100_5w5s__protonet_cosine_conv4"
SCARCE = "scarce/n60/glyphs_100_5w5s__protonet_{}_conv4"
CLASSES = "scarce_classes/k12/glyphs_100_5w5s__protonet_cosine_conv4"
RESAMPLE = "scarce_resample/n60/glyphs_100_5w5s__protonet_cosine_conv4"
COSINE, EUCLIDEAN = "data-scarce 5-shot, ProtoNet-cosine", "data-scarce 5-shot, ProtoNet-Euclidean"
FEW_CLASSES = "12 training classes 5-shot, ProtoNet-cosine"
MAML_ARMS = "scarce_maml/n60/glyphs_100_5w5s__maml_conv4"
MAML = "data-scarce 5-shot, MAML (its baseline under-fits)"
#: the data-scarce 5-shot ProtoNet cells: the distance in their folders' names, and the cell as a reader knows it
PROTONET_CELLS = (("cosine", COSINE), ("euclidean", EUCLIDEAN))
#: how the tables name an arm that appears in more than one cell
LABELS = {
    "uniform_online": "uniform over difficulty, online (the paper)",
    "uniform_offline": "uniform, offline estimate",
    "uniform_online_placebo": "uniform's weights shuffled within each step (placebo)",
    "uniform_online_scale": "the loss's scale factor Σw/ESS alone (weights 1)",
    "uniform_online_self": "uniform, self-normalised (no scale factor)",
    "task_interpolation": "task interpolation (MLTI)",
    "augmentation": "augmentation (shifts of 4 px)",
}
#: the arms of the study a reader chooses between, each against the baseline of its cell
ANSWERS: tuple[Row, ...] = (
    *(
        Row(SCARCE5.format(distance), arm, LABELS[arm], where)
        for distance, where in PROTONET_CELLS
        for arm in ("uniform_online", "uniform_offline", "uniform_online_placebo", "uniform_online_scale",
                    "uniform_online_self")
    ),
    *(
        Row(SCARCE5.format(distance), "uniform_online", "uniform against its weights shuffled (the aim)", where,
            baseline="uniform_online_placebo")
        for distance, where in PROTONET_CELLS
    ),
    Row(REGULARISERS, "weight_decay", "weight decay 5e-4", COSINE, differing=("model.optimizer.weight_decay",)),
    Row(REGULARISERS, "label_smoothing", "label smoothing 0.1", COSINE, differing=("model.label_smoothing",)),
    Row(REGULARISERS, "augmentation", LABELS["augmentation"], COSINE, differing=("data.augment",)),
    Row(REGULARISERS, "task_interpolation", LABELS["task_interpolation"], COSINE,
        differing=("data.task_interpolation",)),
    Row(REGULARISERS, "uniform_augmentation", "uniform + augmentation", COSINE, differing=("data.augment",)),
    Row(REGULARISERS, "uniform_augmentation", "uniform + augmentation, against augmentation alone", COSINE,
        baseline="augmentation"),
    *(
        Row(CLASSES, arm, LABELS[arm], FEW_CLASSES, differing=differing)
        for arm, differing in (
            ("uniform_online", ()),
            ("uniform_online_placebo", ()),
            ("uniform_online_scale", ()),
            ("task_interpolation", ("data.task_interpolation",)),
            ("augmentation", ("data.augment",)),
        )
    ),
    *(
        Row(f"scarce_dose/n{n}/glyphs_100_5w5s__protonet_cosine_conv4", "uniform_online", LABELS["uniform_online"],
            f"{n} images a class, ProtoNet-cosine (dose-response)")
        for n in (30, 60, 120, 240)
    ),
    Row(SCARCE.format("cosine"), "uniform_resample", "uniform by resampling (pool 4)", COSINE),
    Row(RESAMPLE, "uniform_resample_empirical16", "uniform by resampling, at its target (empirical proposal, pool 16)",
        COSINE),
    Row(RESAMPLE, "uniform_resample_empirical16", "resampling at its target, against its blind placebo (the aim)",
        COSINE, baseline="uniform_resample_placebo_empirical16"),
    Row(SCARCE.format("euclidean"), "uniform_resample", "uniform by resampling (pool 4)", EUCLIDEAN),
    Row("scarce_static_dpp/n60/glyphs_100_5w5s__protonet_cosine_conv4", "baseline_online__static_dpp", "static DPP",
        COSINE),
    *(
        Row(SCARCE.format(distance), f"baseline_online__{sampler}", label, where)
        for sampler, label in (
            ("dynamic_dpp", "dynamic DPP"),
            ("hard_task_mining", "online hard-task mining"),
            ("adaptive", "adaptive task sampling"),
            ("no_diversity_batch", "no-diversity batch (a control)"),
        )
        for distance, where in PROTONET_CELLS
    ),
    Row("scarce/n60/glyphs_100_5w5s__maml_conv4", "uniform_online", LABELS["uniform_online"], MAML),
    *(
        Row(MAML_ARMS, arm, label, MAML, baseline=baseline)
        for arm, label, baseline in (
            ("uniform_online_scale", LABELS["uniform_online_scale"], "baseline_online"),
            ("uniform_online_self", LABELS["uniform_online_self"], "baseline_online"),
            ("uniform_online_after1000", "uniform from step 1,000 (after the plateau at chance)", "baseline_online"),
            ("uniform_online_sgd", "uniform, outer optimiser SGD, against the SGD baseline", "baseline_online_sgd"),
        )
    ),
    *(
        Row("converge_samplers/constant/glyphs_100_5w1s__protonet_euclidean_conv4", f"baseline_online__{sampler}",
            label, "full split 1-shot, ProtoNet-Euclidean (its baseline under-fits)")
        for sampler, label in (
            ("adaptive", "adaptive task sampling"),
            ("hard_task_mining", "online hard-task mining"),
            ("no_diversity_batch", "no-diversity batch (a control)"),
        )
    ),
)  # fmt: skip


def _number(value: float) -> str:
    return f"{100 * value:+.2f}".replace("-", "−")


def answers_table(root: Path) -> str:
    """Every row of :data:`ANSWERS` whose cell holds both arms tested: the difference over trainings (95% t interval
    over the seed pairs, and its p) where there are two trainings or more, else over one training's test episodes,
    said so. Rows whose arm has no record yet are left out."""
    from lightning_episodes.commands.compare import Untested, compare_scenario

    lines = [
        "| arm | cell | trainings | arm − baseline (points) | p | what the interval covers |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in ANSWERS:
        cell = root / "studies" / row.cell
        if not cell.is_dir() or not any(cell.glob(f"seed*/{row.treatment}")):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a seed pair made on two processors: said on the study's page
                _, comparison, _ = compare_scenario(
                    cell, row.baseline, row.treatment, seeds="tested", differing=row.differing
                )
        except Untested:
            continue
        difference = comparison.difference
        if difference.trainings >= 2:
            value = f"{_number(difference.seed_mean)} ± {100 * difference.seed_ci95:.2f}"
            p, covers = difference.seed_pvalue, "trainings (95% t interval over the seed pairs)"
        else:
            value = f"{_number(difference.mean)} ± {100 * difference.ci95:.2f}"
            p, covers = difference.pvalue, "one training's test episodes only"
        shown_p = "< 0.001" if p < 0.001 else f"{p:.3f}"
        lines.append(f"| {row.label} | {row.where} | {difference.trainings} | {value} | {shown_p} | {covers} |")
    return "\n".join(lines)


#: a Sphinx role in a docstring (``:class:`~a.b.C```): shown as ``C`` (``a.b.C`` without the ``~``), linked where the
#: site documents it
ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|obj|exc|const):`(~?)([\w.]+)`")


def _markdown(text: str) -> str:
    """A docstring's reST on one line of a Markdown table: roles as optional links, ````code```` as ``code``,
    a pipe outside code escaped."""

    def link(match: re.Match[str]) -> str:
        tilde, name = match.groups()
        shown = name.rsplit(".", 1)[-1] if tilde else name
        return f'<autoref identifier="{name}" optional><code>{shown}</code></autoref>'

    parts = re.split(r"(`[^`]*`)", " ".join(text.split()).replace("``", "`"))
    # a pipe ends a table's cell, except in code (as Python-Markdown reads a table)
    text = "".join(part if part.startswith("`") else part.replace("|", "\\|") for part in parts)
    return ROLE.sub(link, text)


def docstring_arguments(cls: type) -> dict[str, str]:
    """``{argument: its text}`` from the ``Args:`` section of ``cls``'s docstring (Google style, as jsonargparse
    reads it for ``--help``), each text on one line."""
    lines = (inspect.getdoc(cls) or "").splitlines()
    if "Args:" not in lines:
        return {}
    arguments: dict[str, list[str]] = {}
    for line in lines[lines.index("Args:") + 1 :]:
        if line.strip() and not line.startswith("    "):  # the next section
            break
        entry = re.match(r"    (\w+): (.*)", line)
        if entry:
            arguments[entry[1]] = [entry[2]]
        elif line.strip() and arguments:
            arguments[next(reversed(arguments))].append(line.strip())
    return {name: " ".join(text) for name, text in arguments.items()}


def _yaml(value: object) -> str:
    """A default as a YAML file writes it (``false``, ``null``, ``""``), so that ``yaml.safe_load`` reads it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return '""' if value == "" else str(value)


def arguments_table(cls: type) -> str:
    """A row per argument of ``cls``'s constructor, in the signature's order: its name, its default and its
    docstring's text.

    Raises:
        ValueError: if the docstring's ``Args:`` and the signature name different arguments.
    """
    parameters = list(inspect.signature(cls).parameters.values())
    documented = docstring_arguments(cls)
    if [p.name for p in parameters] != list(documented):
        raise ValueError(
            f"{cls.__name__}: the signature's arguments {[p.name for p in parameters]} and the docstring's Args: "
            f"{list(documented)} differ: document each argument once, in the signature's order"
        )
    lines = ["| option | default | what it does |", "|---|---|---|"]
    for parameter in parameters:
        default = "" if parameter.default is inspect.Parameter.empty else f"`{_yaml(parameter.default)}`"
        lines.append(f"| `{parameter.name}` | {default} | {_markdown(documented[parameter.name])} |")
    return "\n".join(lines)


def weighting_options_table(root: Path) -> str:
    """:func:`arguments_table` of the weighting callback."""
    from lightning_episodes.callbacks import DifficultyWeightingCallback

    return arguments_table(DifficultyWeightingCallback)


TABLES = {"study-answers": answers_table, "weighting-options": weighting_options_table}


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any) -> str:
    """Each table comment of the page replaced by its table."""
    root = Path(config.config_file_path).parent

    def table(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in TABLES:
            raise ValueError(
                f"{page.file.src_uri} asks for table {name!r}; docs/hooks/study_tables.py has {sorted(TABLES)}"
            )
        return TABLES[name](root)

    return MARKER.sub(table, markdown)

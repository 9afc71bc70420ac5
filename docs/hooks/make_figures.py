"""The site's figures, drawn from the library itself and the study's records when the site is built.

``python docs/hooks/make_figures.py OUT NAME...`` writes ``OUT/NAME.png`` for each named figure;
``docs/hooks/figures.py`` runs it while the pages are built, for the figures the pages ask for. Each figure is a
function of the repository's root that returns a pyplot-free matplotlib ``Figure``; :data:`FIGURES` names them. The
library and matplotlib are imported inside the functions, so that the hook can read the names cheaply.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PACKAGE = "lightning_episodes"
#: the record whose test-episode difficulties the weighting figure shows: the baseline of the paper's protocol
#: (glyphs-100 5-way 1-shot, ProtoNet-Euclidean conv4-64, step schedule, 18,400 steps × 16 episodes; docs/study.md)
DIFFICULTY_RECORD = "studies/paper_gpu/step/glyphs_100_5w1s__protonet_euclidean_conv4/seed0/baseline_online"
#: the study whose records the study figure shows (docs/study.md, the data-scarce split)
SCARCE_STUDY = "studies/scarce/n60"
#: the forest plot of the data-scarce studies' answer (docs/study.md, the README): per family of comparisons, its
#: scenario folder, the heading its rows are drawn under, its baseline arm, and each treatment with the settings in
#: which it differs from the baseline; a family or treatment without records yet is left out.
_MECHANISM_ARMS: dict[str, tuple[str, ...]] = dict.fromkeys(
    ("uniform_online", "uniform_online_placebo", "uniform_online_self", "uniform_online_scale", "uniform_offline"), ()
)
FOREST_FAMILIES: tuple[tuple[str, str, str, dict[str, tuple[str, ...]]], ...] = (
    *((f"studies/scarce5/n60/glyphs_100_5w5s__protonet_{distance}_conv4", f"60 images a class, {name}: mechanism",
       "baseline_online", _MECHANISM_ARMS) for distance, name in (("cosine", "cosine"), ("euclidean", "Euclidean"))),
    ("studies/scarce5/n60_regularisers/glyphs_100_5w5s__protonet_cosine_conv4", "60 images a class: regularisers",
     "baseline_online", {"weight_decay": ("model.optimizer.weight_decay",),
                         "label_smoothing": ("model.label_smoothing",), "augmentation": ("data.augment",),
                         "task_interpolation": ("data.task_interpolation",),
                         "uniform_augmentation": ("data.augment",)}),
    ("studies/scarce5/n60_regularisers/glyphs_100_5w5s__protonet_cosine_conv4", "60 images a class: regularisers",
     "augmentation", {"uniform_augmentation": ()}),
    ("studies/scarce_classes/k12/glyphs_100_5w5s__protonet_cosine_conv4", "12 classes", "baseline_online",
     {**dict.fromkeys(("uniform_online", "uniform_online_placebo", "uniform_online_scale"), ()),
      "task_interpolation": ("data.task_interpolation",), "augmentation": ("data.augment",)}),
    *((f"studies/scarce_dose/n{n}/glyphs_100_5w5s__protonet_cosine_conv4", f"{n} images a class (dose-response)",
       "baseline_online", {"uniform_online": ()}) for n in (30, 60, 120, 240)),
    ("studies/scarce_resample/n60/glyphs_100_5w5s__protonet_cosine_conv4",
     "60 images a class, cosine: resampling at its target", "baseline_online",
     dict.fromkeys(("uniform_resample_empirical16", "uniform_resample_placebo_empirical16"), ())),
)  # fmt: skip
#: the committed copy of the forest plot that the README shows (a repository's file view draws no figure at build
#: time), and the PNG text key under which it records the rows it drew, so that a test can tell it is current
FOREST_COPY = "docs/img/scarce-forest.png"
FOREST_KEY = "forest rows"
#: the embedded datasets of the dataset figure, and the characters rendered for one whose cache is not on disk
EMBEDDED = ("glyphs", "glyphs-hard", "glyphs-100")
FALLBACK_CHARACTERS = "AλжԱაבע"
#: classes (rows) and images per class (columns) of each dataset in the dataset figure
CLASSES, IMAGES = 6, 8
#: the run length of the schedule figure: the paper's 20,000 steps (configs/schedules/step.yaml halves every 2,000)
SCHEDULE_STEPS = 20_000
#: the training progress t / T at which the weighting figure draws the curriculum target
CURRICULUM_PROGRESS = 0.25

FIGURES: dict[str, Callable[[Path], Figure]] = {}


def figure(name: str) -> Callable[[Callable[[Path], Figure]], Callable[[Path], Figure]]:
    """Registers a figure function under ``name`` (the page's ``<!-- figure NAME: caption -->``)."""

    def register(function: Callable[[Path], Figure]) -> Callable[[Path], Figure]:
        FIGURES[name] = function
        return function

    return register


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained", dpi=110)


def _dataset_sample(name: str) -> tuple[Any, list[int], bool]:
    """``(ImageDataset, class ids to show, whether it is the cached dataset)``: the dataset from its cache when it has
    been rendered on this machine, else a few of its classes rendered by its own renderer (a second or two)."""
    from lightning_episodes.data.datasets import glyphs, glyphs_100, glyphs_hard, load_dataset

    module = {"glyphs": glyphs, "glyphs-hard": glyphs_hard, "glyphs-100": glyphs_100}[name]
    loader = {"glyphs": glyphs.GLYPHS, "glyphs-hard": glyphs_hard.GLYPHS_HARD, "glyphs-100": glyphs_100.GLYPHS_100}[
        name
    ]
    cache = module.cache_file(module.default_cache_dir(), loader.image_size, loader.images_per_class, 0)
    if cache.is_file():
        dataset = load_dataset(name)
        candidates = dataset.splits["test"]
    else:
        payload = module.build_payload(loader.image_size, IMAGES, 0, characters=list(FALLBACK_CHARACTERS))
        dataset = module.to_dataset(payload, loader.channels)
        candidates = list(range(len(dataset.class_names)))
    # evenly spaced through the classes, which are in code point order: the alphabets of the split in proportion
    count = min(CLASSES, len(candidates))
    return dataset, [candidates[i * len(candidates) // count] for i in range(count)], cache.is_file()


@figure("datasets")
def datasets(root: Path) -> Figure:
    """Each embedded dataset's test classes (rows: one class, from as many alphabets as there are rows)."""
    import numpy as np

    fig = _new_figure(3.2 * len(EMBEDDED), 2.7)
    for ax, name in zip(fig.subplots(1, len(EMBEDDED)), EMBEDDED, strict=True):
        dataset, classes, cached = _dataset_sample(name)
        rows = []
        for k in classes:
            images = dataset.images[dataset.labels == k][:IMAGES].numpy()  # [n, C, H, W] uint8
            images = np.repeat(images, 3, axis=1) if images.shape[1] == 1 else images
            padded = np.pad(images.transpose(0, 2, 3, 1), ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=255)
            rows.append(np.concatenate(list(padded), axis=1))
        ax.imshow(np.concatenate(rows, axis=0), interpolation="nearest")
        ax.set_xticks([])
        size = dataset.images.shape[-1]
        height = size + 2
        ax.set_yticks([height * (r + 0.5) for r in range(len(classes))], [dataset.class_names[k] for k in classes])
        ax.tick_params(length=0, labelsize=9)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(f"{name} ({size}×{size}, {'test classes' if cached else 'a few classes'})", fontsize=9)
    return fig


@figure("weighting")
def weighting(root: Path) -> Figure:
    """A real difficulty histogram, the three proposals fitted to it, the targets on the normal's support and the
    weights ``w = p / q``, all computed by ``lightning_episodes.weighting``."""
    import numpy as np
    import torch

    from lightning_episodes.evaluation import SCORES_FILE, DifficultyTable
    from lightning_episodes.weighting import available_targets, get_target, make_proposal, standard_normal_mass

    record = next((root / DIFFICULTY_RECORD).rglob(SCORES_FILE))
    difficulty = torch.from_numpy(np.asarray(DifficultyTable.read(record).difficulty, dtype=np.float64))
    proposals = {}
    for name in ("normal", "lognormal", "empirical"):
        proposals[name] = make_proposal(name, window=difficulty.numel())
        proposals[name].fit(difficulty)
    normal = proposals["normal"]
    low, high = normal.support()
    grid = torch.linspace(float(difficulty.min()) * 0.8, float(difficulty.max()) * 1.05, 600, dtype=torch.float64)

    def truncated_q(q: Any) -> Any:
        """q_S = q / Z on S (S holds the mass Z of q), NaN outside S so that the line stops there."""
        inside = (grid >= q.support()[0]) & (grid <= q.support()[1])
        density = q.log_density(grid).exp() / standard_normal_mass(q.support_sigmas)
        return torch.where(inside, density, torch.nan)

    fig = _new_figure(12.5, 3.6)
    hist, targets, weights = fig.subplots(1, 3)
    hist.hist(difficulty.numpy(), bins=40, density=True, color="0.8", label=f"{difficulty.numel():,} test episodes")
    for (name, q), colour in zip(proposals.items(), ("C0", "C1", "C2"), strict=True):
        hist.plot(grid, truncated_q(q), color=colour, label=f"$q_S$ {name}")
    hist.axvspan(low, high, color="C0", alpha=0.06, label="$S$ of the normal")
    hist.set(xlabel="episode difficulty Ω (test loss)", ylabel="density", title="Difficulty and the proposals q")
    for name, colour in zip(available_targets(), ("0.5", "C0", "C2", "C3", "C4"), strict=False):
        if name == "baseline":
            continue
        target = get_target(name)
        w = normal.weights(grid, target, progress=CURRICULUM_PROGRESS)
        label = f"{name} (t/T = {CURRICULUM_PROGRESS})" if name == "curriculum" else name
        p = w * truncated_q(normal)  # p = w q_S on S
        targets.plot(grid, torch.where(p > 0, p, torch.nan), color=colour, label=label)
        weights.plot(grid, torch.where(w > 0, w, torch.nan), color=colour, label=label)
    targets.plot(grid, truncated_q(normal), color="0.3", linestyle="--", label="$q_S$ normal")
    targets.set(xlabel="Ω", ylabel="density on $S$", title="Targets p (normal proposal)")
    weights.set(xlabel="Ω", ylabel="w = p / q", yscale="log", title="Importance weights (normal proposal)")
    for ax in (hist, targets, weights):
        ax.legend(fontsize=7)
        ax.set_xlim(grid[0], grid[-1])
    return fig


@figure("schedules")
def schedules(root: Path) -> Figure:
    """The learning rate of each schedule of ``configs/schedules/`` over a run, stepped by the schedulers themselves."""
    import importlib

    import torch
    import yaml

    from lightning_episodes.algorithms.schedules import check_schedule

    fig = _new_figure(6.5, 3.0)
    ax = fig.subplots()
    for path in sorted((root / "configs" / "schedules").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())["model"]["init_args"]["lr_scheduler"]
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        scheduler = None
        if spec is not None:
            module, _, name = spec["class_path"].rpartition(".")
            scheduler = getattr(importlib.import_module(module), name)(optimizer, **spec.get("init_args", {}))
            check_schedule(scheduler, SCHEDULE_STEPS)
        rates = []
        for _ in range(SCHEDULE_STEPS):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
        ax.plot(range(SCHEDULE_STEPS), rates, label=path.stem)
    ax.set(xlabel="optimiser step", ylabel="learning rate / initial rate")
    ax.set_title(f"configs/schedules/ over a {SCHEDULE_STEPS:,}-step run", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def _part(module: str) -> str:
    """The part of the package a module belongs to: its first component below the package (``""``: the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(package)"


def import_counts(root: Path) -> dict[tuple[str, str], int]:
    """``{(importing part, imported part): number of files of the first importing the second}``, read with ``ast``
    (every import, lazy ones inside functions included; ``if TYPE_CHECKING:`` blocks skipped, as they never run)."""
    counts: dict[tuple[str, str], int] = {}
    for file in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(file.relative_to(root).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(file.read_text())
        skipped = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for statement in block.body
            for node in ast.walk(statement)
        }
        imported = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if parts[-1] == "__init__" else module.split(".")[:-1]
                    imported.add(".".join([*base[: len(base) - node.level + 1], *filter(None, [node.module])]))
                else:
                    imported.add(node.module or "")
        for target in {_part(name) for name in imported if name.split(".")[0] == PACKAGE}:
            if target != _part(module):
                key = (_part(module), target)
                counts[key] = counts.get(key, 0) + 1
    return counts


def dependency_order(parts: set[str], counts: dict[tuple[str, str], int]) -> list[str]:
    """``parts`` with each after everything it imports (by its longest chain of imports), ties by name."""
    depth: dict[str, int] = {}

    def level(part: str, seen: frozenset[str]) -> int:
        if part not in depth:
            below = [b for (a, b) in counts if a == part and b not in seen]
            depth[part] = 1 + max((level(b, seen | {part}) for b in below), default=-1)
        return depth[part]

    return sorted(parts, key=lambda part: (level(part, frozenset({part})), part))


@figure("layers")
def layers(root: Path) -> Figure:
    """Which part of the package imports which, counted in the source when the site is built."""
    import numpy as np

    counts = import_counts(root)
    order = dependency_order({part for pair in counts for part in pair}, counts)
    matrix = np.zeros((len(order), len(order)))
    for (a, b), n in counts.items():
        matrix[order.index(a), order.index(b)] = n
    fig = _new_figure(7.0, 6.0)
    ax = fig.subplots()
    ax.imshow(np.where(matrix > 0, np.log1p(matrix), np.nan), cmap="Purples", vmin=0)
    for i, j in zip(*np.nonzero(matrix), strict=True):
        ax.text(j, i, f"{int(matrix[i, j])}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(order)), order, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(order)), order, fontsize=8)
    ax.set_xlabel("imported part")
    ax.set_ylabel("importing part")
    ax.set_title("Files of each part of lightning_episodes that import another part", fontsize=10)
    ax.grid(False)
    return fig


@figure("scarce-study")
def scarce_study(root: Path) -> Figure:
    """``lightning-episodes report studies/scarce/n60 --plot``: the arms' test accuracies and validation curves."""
    from lightning_episodes.analysis.plots import plot_study
    from lightning_episodes.analysis.report import build_table, find_results, read_result

    results = [read_result(path) for path in find_results([root / SCARCE_STUDY])]
    return plot_study(build_table(results), results)


def forest_comparisons(root: Path) -> list[Any]:
    """The comparisons of :data:`FOREST_FAMILIES` that have records (``compare --seeds tested``), each labelled with
    its family's heading."""
    from dataclasses import replace

    from lightning_episodes.commands.compare import Untested, compare_scenario

    comparisons = []
    for folder, heading, baseline, treatments in FOREST_FAMILIES:
        scenario = root / folder
        for treatment, differing in treatments.items() if scenario.is_dir() else ():
            try:
                _, comparison, _ = compare_scenario(scenario, baseline, treatment, seeds="tested", differing=differing)
            except Untested:
                continue
            comparisons.append(replace(comparison, folder=heading))
    return comparisons


def forest_description(root: Path) -> str:
    """The rows the forest plot draws from the records, one per line (label, interval, trainings, what it covers):
    the text its committed copy (:data:`FOREST_COPY`) keeps under :data:`FOREST_KEY`."""
    from lightning_episodes.analysis.forest import forest_rows

    return "\n".join(
        f"{row.folder} | {row.label} | {row.mean:+.2f} [{row.low:+.2f}, {row.high:+.2f}] | {row.over}"
        for row in forest_rows(forest_comparisons(root), baselines=True)
    )


@figure("scarce-forest")
def scarce_forest(root: Path) -> Figure:
    """``lightning-episodes compare ... --forest`` of the data-scarce studies (:data:`FOREST_FAMILIES`): every arm −
    its baseline with its 95% t interval over the trainings that have landed, under a heading per family."""
    from lightning_episodes.analysis.forest import plot_forest

    return plot_forest(forest_comparisons(root), "baseline_online", "data-scarce studies", baselines=True)[0]


def main(argv: list[str]) -> int:
    out, names = Path(argv[0]), argv[1:]
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        print(f"unknown figures {unknown}; known: {sorted(FIGURES)}", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[2]
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        metadata = {FOREST_KEY: forest_description(root)} if name == "scarce-forest" else {}
        FIGURES[name](root).savefig(out / f"{name}.png", metadata=metadata)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

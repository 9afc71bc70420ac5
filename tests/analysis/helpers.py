"""Run folders as the command line leaves them (``test_results.json`` and ``config.yaml``), for the tests of the
results table (``analysis.report``), its figure (``analysis.plots``), the ``report`` command and the test record's
writer."""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

import yaml
from scipy import stats

from lightning_episodes.analysis.report import find_results, read_result
from lightning_episodes.callbacks import DifficultyWeightingCallback


def weighting(target: Any, proposal: str = "online") -> dict[str, Any]:
    return {
        "class_path": "lightning_episodes.callbacks.DifficultyWeightingCallback",
        "init_args": {"target": target, "proposal": proposal, "warmup_steps": 100},
    }


#: Every option of a default weighting callback, as a results record stores them (``options`` is the record's source).
DEFAULTS = DifficultyWeightingCallback().options


def sampling(**changed: Any) -> dict[str, Any]:
    """A record's ``sampling`` field: a callback's options, ``changed`` from the defaults."""
    return {**DEFAULTS, **changed}


CHECKPOINT = {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint", "init_args": {"monitor": "val/acc"}}


def write_run(
    folder: Path,
    accuracy: float,
    ci95: float,
    callbacks: list[dict[str, Any]] | None = None,
    algorithm: str = "ProtoNet",
    distance: str | None = "euclidean",
    dataset: str = "mini-imagenet",
    shots: int = 1,
    seed: int = 0,
    mtime: float | None = None,
    config: bool = True,
    **record: Any,
) -> Path:
    """A run folder as the CLI leaves it: ``test_results.json`` and the saved ``config.yaml`` beside it."""
    folder.mkdir(parents=True)
    hparams = {"backbone": "conv4", **({"distance": distance} if distance else {})}
    data = {"dataset": dataset, "ways": 5, "shots": shots, "eval_ways": None, "seed": 0, "test_split": "test"}
    result = {"algorithm": algorithm, "accuracy": accuracy, "ci95": ci95, "episodes": 1000, "hparams": hparams}
    path = folder / "test_results.json"
    path.write_text(json.dumps({**result, "data": data, **record}))
    if config:
        trainer = {"max_steps": 20000, "callbacks": [CHECKPOINT, *(callbacks or [])]}
        (folder / "config.yaml").write_text(yaml.safe_dump({"seed_everything": seed, "trainer": trainer}))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def write_runs(root: Path, seeds: int = 1) -> Path:
    """One column worked out by hand (accuracies in %, intervals [mean - ci, mean + ci]):

    ProtoNet (Euclidean), Mini-ImageNet conv4 5-way 1-shot:
      baseline             50.0 ± 0.8 [49.2, 50.8]
      uniform (online)     52.0 ± 0.8 [51.2, 52.8]  best -> bold; †
      uniform (offline)    51.0 ± 0.5 [50.5, 51.5]  overlaps the best -> bold; †
      easy (online)        48.5 ± 0.6 [47.9, 49.1]  below the baseline, apart -> no †
      hard (online)        49.0 ± 0.2 [48.8, 49.2]  touches the baseline -> †
      curriculum (offline) 49.5 ± 0.1 [49.4, 49.6]  inside the baseline -> †
    MAML, same column:
      baseline             47.0 ± 1.0 [46.0, 48.0]  bold only within its scenario
      uniform (online)     48.0 ± 1.0 [47.0, 49.0]  †; bold only within its scenario

    With ``seeds`` = 1, each cell is one run of that accuracy and interval (over the test episodes alone: the table
    marks none of them). With ``seeds`` >= 2, each cell is that many runs (seed s in ``seed<s>/``) whose combined
    cell has the same mean and interval: each run's test-episode interval 0.6 ci and the seeds' accuracies spread so
    that the interval over seeds, t_{0.975, k-1} sd / √k, is 0.8 ci (√(0.6² + 0.8²) = 1), so the marks above hold.
    """
    arms: list[tuple[str, float, float, list[dict[str, Any]] | None, dict[str, Any]]] = [
        ("pn/baseline", 0.50, 0.008, [weighting("baseline")], {}),
        ("pn/uniform_online", 0.52, 0.008, [weighting("uniform")], {}),
        ("pn/uniform_offline", 0.51, 0.005, [weighting("uniform", "offline")], {}),
        ("pn/easy_online", 0.485, 0.006, [weighting("easy")], {}),
        ("pn/hard_online", 0.49, 0.002, [weighting("hard")], {}),
        ("pn/curriculum_offline", 0.495, 0.001, [weighting("curriculum", "offline")], {}),
        ("maml/baseline", 0.47, 0.01, None, {"algorithm": "MAML", "distance": None}),
        ("maml/uniform_online", 0.48, 0.01, [weighting("uniform")], {"algorithm": "MAML", "distance": None}),
    ]
    for folder, accuracy, ci95, callbacks, algorithm in arms:
        if seeds == 1:
            write_run(root / folder, accuracy, ci95, callbacks, **algorithm)
            continue
        # offsets of mean 0 and sd 1 (ddof 1): z_s = (s - (k - 1) / 2) / sd(0..k-1)
        centre, spread = (seeds - 1) / 2, statistics.stdev(range(seeds))
        sd = 0.8 * ci95 * math.sqrt(seeds) / float(stats.t.ppf(0.975, seeds - 1))
        for seed in range(seeds):
            write_run(root / folder / f"seed{seed}", accuracy + sd * (seed - centre) / spread, 0.6 * ci95, callbacks,
                      seed=seed, **algorithm)  # fmt: skip
    return root


def load(root: Path) -> list[Any]:
    return [read_result(path) for path in find_results([root])]

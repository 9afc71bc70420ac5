"""Which config a run was made with: ``--ckpt_path best|last`` picks a run of the command's own config, and a fresh
``fit`` never writes over the checkpoints of a run of another config.

A run's config is the ``config.yaml`` that LightningCLI saves in its log folder: beside the ``checkpoints`` folder of a
logger's version, or in the log folder that a :class:`~lightning_episodes.callbacks.ResumableCheckpoint` with a
``dirpath`` records; without one, the model's and the data module's hyper-parameters in the checkpoint. Two configs
make the same run when their :func:`run_settings` are equal: the model's and the data module's classes and arguments
(:func:`~lightning_episodes.analysis.protocols.trained_settings`), the callbacks that change what is learnt
(:data:`TRAINING_CALLBACKS`: the weighting callback, not a checkpoint callback nor one that watches the run) and the
Trainer's gradient settings. Not compared: output paths, seeds (runs that differ in their seeds alone are replicates
of one config: the newest is picked), the run's length (a fit resumed for more steps is the same run), the
evaluation's episodes, the devices, the precision and ``test_after_fit``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace
from pytorch_lightning.callbacks import (
    BaseFinetuning,
    GradientAccumulationScheduler,
    ModelPruning,
    StochasticWeightAveraging,
    WeightAveraging,
)

from lightning_episodes.algorithms.loading import CheckpointError, check_class_path, read_checkpoint
from lightning_episodes.analysis.protocols import trained_settings
from lightning_episodes.callbacks import DifficultyWeightingCallback

#: The file LightningCLI's ``SaveConfigCallback`` writes into a run's log folder.
CONFIG_NAME = "config.yaml"
#: The callbacks that change what a run learns, and so belong to its config (and their subclasses): the weighting, and
#: Lightning's that change the weights or the steps. Others (checkpoints, monitors, a user's debugging callback) do not.
TRAINING_CALLBACKS: tuple[type, ...] = (
    DifficultyWeightingCallback, BaseFinetuning, GradientAccumulationScheduler, ModelPruning,
    StochasticWeightAveraging, WeightAveraging,
)  # fmt: skip
#: The Trainer's settings that change the gradient steps (left out at their default, what a config without them does).
TRAINER_SETTINGS = {"accumulate_grad_batches": 1, "gradient_clip_val": None, "gradient_clip_algorithm": None}
#: How many differing settings a message shows for one run.
SHOWN = 3


def callback_class(entry: Any) -> type | None:
    """The class of a ``trainer.callbacks`` entry (a ``class_path``/``init_args`` mapping or namespace, or an object);
    ``None`` if it names none that can be imported without running code the user did not name (a config saved in a
    run folder could name any module: only this library's, Lightning's and those already imported are looked up)."""
    if not isinstance(entry, Namespace | Mapping):
        return type(entry)
    class_path = entry.get("class_path")
    if not isinstance(class_path, str) or "." not in class_path:
        return None
    try:
        check_class_path(class_path, ["pytorch_lightning", "lightning"])
        found = getattr(importlib.import_module(class_path.rpartition(".")[0]), class_path.rpartition(".")[2])
    except (CheckpointError, ImportError, AttributeError):
        return None
    return found if isinstance(found, type) else None


def run_settings(config: Mapping[str, Any]) -> dict[str, str]:
    """What a LightningCLI config (a ``config.yaml``'s contents) trains, as ``{setting: text}`` (see the module's
    docstring): ``{"model": "ProtoNet()", "model.distance": "cosine", "trainer.callbacks.0": "Difficulty...()",
    "trainer.callbacks.0.target": "uniform", ...}``, the training callbacks numbered in their order."""
    trainer = config.get("trainer")
    trainer = trainer if isinstance(trainer, Mapping) else {}
    listed = trainer.get("callbacks") or []
    listed = listed if isinstance(listed, list) else [listed]
    training = []
    for entry in listed:
        cls = callback_class(entry)
        if isinstance(entry, Mapping) and cls is not None and issubclass(cls, TRAINING_CALLBACKS):
            training.append(entry)
    settings = trained_settings(config, training)
    for name, default in TRAINER_SETTINGS.items():
        if trainer.get(name, default) != default:
            settings[f"trainer.{name}"] = str(trainer[name])
    return settings


def _load_yaml(path: Path) -> Mapping[str, Any] | None:
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return loaded if isinstance(loaded, Mapping) else None


def run_config(checkpoint: Path) -> tuple[Mapping[str, Any] | None, bool]:
    """The config of the run that wrote ``checkpoint``, and whether it is whole: the ``config.yaml`` of the log folder
    it records (:class:`~lightning_episodes.callbacks.ResumableCheckpoint`'s), else of the folder that holds its
    ``checkpoints`` folder (a logger's version); ``True``. Else the model's and data module's hyper-parameters saved
    in it (``False``: no callbacks nor Trainer settings); ``(None, False)`` when it records neither.

    Raises:
        CheckpointError: naming the file, if it is broken and no ``config.yaml`` is beside its folder.
    """
    beside = checkpoint.parent.parent / CONFIG_NAME
    beside_ok = checkpoint.parent.name == "checkpoints" and beside.is_file()
    try:
        contents = read_checkpoint(checkpoint)
    except CheckpointError:
        if beside_ok:  # the run is known: reading the file for `--ckpt_path` says what is wrong with it
            return _load_yaml(beside), True
        raise
    for state in (contents.get("callbacks") or {}).values():
        log_dir = state.get("log_dir") if isinstance(state, dict) else None
        if isinstance(log_dir, str) and (Path(log_dir) / CONFIG_NAME).is_file():
            return _load_yaml(Path(log_dir) / CONFIG_NAME), True
    if beside_ok:
        return _load_yaml(beside), True
    sections = {}
    for section, key in (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters")):
        saved = contents.get(key)
        if isinstance(saved, Mapping) and isinstance(saved.get("_class_path"), str):
            arguments = {name: value for name, value in saved.items() if not name.startswith("_")}
            sections[section] = {"class_path": saved["_class_path"], "init_args": arguments}
    return (sections or None), False


def differences(here: Mapping[str, str], there: Mapping[str, str], whole: bool = True) -> list[str]:
    """The settings in which ``there`` (a run's) differs from ``here`` (this command's), in words:
    ``"model.distance=cosine (this config: euclidean)"``; a class's arguments are left out where the class differs.
    Without ``whole`` (a run known by its saved hyper-parameters alone), only the settings that both record."""
    keys = sorted(set(here) | set(there)) if whole else sorted(set(here) & set(there))
    differing = [key for key in keys if here.get(key) != there.get(key)]
    kept = [key for key in differing if not any(key.startswith(f"{other}.") for other in differing)]
    return [f"{key}={there.get(key, '–')} (this config: {here.get(key, '–')})" for key in kept]


def _listed(found: Sequence[str]) -> str:
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return ", ".join(found[:SHOWN]) + more


def _run_name(checkpoint: Path) -> str:
    """The run folder of a checkpoint in ``<version>/checkpoints``, else the checkpoint itself."""
    return str(checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint)


def _compare(checkpoint: Path, here: Mapping[str, str]) -> list[str] | None:
    """How the run of ``checkpoint`` differs from ``here`` (``[]``: the same config); ``None`` if it is unknown."""
    config, whole = run_config(checkpoint)
    return None if config is None else differences(here, run_settings(config), whole)


def pick_run(candidates: Sequence[Path], config: Mapping[str, Any]) -> Path:
    """The first of ``candidates`` (``last.ckpt`` files, newest first) whose run was made with ``config``.

    Raises:
        FileNotFoundError: if none was, naming the nearest runs (the fewest differing settings) and how they differ.
        CheckpointError: if a candidate's config must be read from it and it is broken.
    """
    here = run_settings(config)
    nearest: list[tuple[int, int, str]] = []
    for order, checkpoint in enumerate(candidates):
        differing = _compare(checkpoint, here)
        if differing == []:
            return checkpoint
        words = "its config is not recorded" if differing is None else _listed(differing)
        count = len(differing) if differing is not None else len(here)
        nearest.append((count, order, f"{_run_name(checkpoint)}: {words}"))
    runs = "; ".join(text for _, _, text in sorted(nearest)[:2])
    raise FileNotFoundError(
        f"none of the {len(candidates)} runs with a {candidates[0].name} was made with this config; the nearest, "
        f"{runs} (fit this config first, or name a checkpoint file)"
    )


def check_dirpath_free(dirpath: Path, config: Mapping[str, Any]) -> None:
    """Refuse a fresh fit into a checkpoint ``dirpath`` that holds the checkpoints of a run of another config (its
    ``last.ckpt``, else its newest checkpoint, tells which); a broken or unrecorded one is left to the fit.

    Raises:
        ValueError: naming the folder, the differing settings and what to write instead.
    """
    found = sorted(dirpath.glob("*.ckpt"), key=lambda path: (path.name == "last.ckpt", path.stat().st_mtime))
    if not found:
        return
    try:
        differing = _compare(found[-1], run_settings(config))
    except CheckpointError:
        return
    if differing:
        raise ValueError(
            f"checkpoint dirpath {dirpath} holds the checkpoints of a run of another config ({_listed(differing)}), "
            "which this fit would replace: leave dirpath out of the checkpoint callback (each fit then writes into "
            "its own version folder of the logger), give this config a dirpath of its own, or resume that run with "
            "its own config and --ckpt_path last"
        )

"""The training protocol of a run, so that a report never pools runs trained differently into one cell.

A run's table column names its benchmark (dataset, backbone, ways, shots); runs of one benchmark trained under
different protocols (learning rate or its schedule, optimiser, backbone width, steps, queries, batch of episodes,
validation, precision) are different columns. :func:`protocol_of` reads the protocol from the run's ``config.yaml``
(or, without one, from its record), and :func:`distinguishing_settings` names, for each protocol of a benchmark, the
settings in which it differs from the others: what a column label adds. :func:`trained_settings` is the part of a
config that defines the model a run trains (the command line picks a ``--ckpt_path best|last`` of the same).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from lightning_episodes.evaluation.record import DEFAULT_PRECISION

__all__ = ["Protocol", "class_word", "distinguishing_settings", "precision", "protocol_of", "trained_settings"]

#: ``(setting, value)`` pairs, sorted: a hashable description of how a run was trained.
Protocol = tuple[tuple[str, str], ...]

#: data settings that do not change what a run learns or how it is tested (the seeds are the seed's, not the cell's)
_DATA_IGNORED = frozenset(
    {"seed", "train_seed", "root", "cache_dir", "download", "num_workers", "device_cache", "eval_episodes_per_batch"}
)
#: settings added after runs were recorded, at the value that does what the older runs did: left out at that value,
#: so a run recorded before the setting existed and one at its default are one protocol
_ADDED = {
    "data.train_images_per_class": None,
    "data.train_classes": None,
    "data.task_interpolation": None,
    "model.backbone_weights": None,
    "model.drop_head": None,
    "model.label_smoothing": 0.0,
}
#: settings whose value a parser may give in another type: one text for one value (``data.train_classes`` is a count
#: whether a command line gives it as ``12`` or ``12.0``, as the data module reads it; a fraction stays a float)
_ONE_TEXT = {"data.train_classes": lambda v: int(v) if isinstance(v, float) and v > 1 and v.is_integer() else v}
#: data settings that make a row, not a column: the task sampler chooses the training episodes, as the weighting does
#: (a report names it in the row: ``baseline + HardTaskMining (...)``)
_DATA_ROW = frozenset({"task_sampler"})
#: model settings that change speed or memory, not the numbers (beyond rounding)
_MODEL_IGNORED = frozenset({"channels_last", "compile_backbone", "cuda_graphs"})
#: data settings of the evaluation alone (as is every ``eval_*`` setting of the model and the data)
_DATA_EVALUATION = frozenset({"val_episodes", "test_episodes", "test_split"})
#: the Trainer's settings that change what is trained or which checkpoint is tested (its precision: :func:`precision`)
_TRAINER_KEPT = (
    "max_steps", "max_epochs", "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm",
    "val_check_interval", "check_val_every_n_epoch", "limit_train_batches", "limit_val_batches",
)  # fmt: skip
#: Lightning's short names of its precisions (``precision: 32`` in a config is ``32-true``)
_PRECISION_ALIASES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}
#: settings a protocol leaves out at their default, which a label names: ``precision=32-true``, not ``precision=–``
_LEFT_OUT = {"trainer.precision": DEFAULT_PRECISION}


def _compact(value: Any) -> str:
    """A value as a label shows it, inside a list: ``StepLR(gamma=0.5, step_size=1000)`` for a ``class_path`` entry,
    ``{hidden=32}`` for a mapping."""
    if isinstance(value, Mapping):
        if "class_path" in value:
            name = str(value["class_path"]).rsplit(".", 1)[-1]
            arguments = value.get("init_args") or {}
            return f"{name}({', '.join(f'{k}={_compact(v)}' for k, v in sorted(arguments.items()))})"
        return "{" + ", ".join(f"{k}={_compact(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


#: How a protocol marks a setting whose value is a class (a ``class_path`` entry): its name and this, ``StepLR()``;
#: each of its arguments is a setting of its own, ``model.lr_scheduler.step_size``.
_CLASS = "()"


def _settings(key: str, value: Any) -> Iterator[tuple[str, str]]:
    """``(setting, text)`` of one value: a ``class_path`` entry is its class (``StepLR()``) and one setting per
    argument (``<key>.step_size``), a mapping one setting per entry (``<key>.hidden``), anything else its text."""
    if isinstance(value, Mapping):
        if "class_path" in value:
            yield key, str(value["class_path"]).rsplit(".", 1)[-1] + _CLASS
        arguments = (value.get("init_args") or {}) if "class_path" in value else value
        for name, argument in sorted(arguments.items()):
            yield from _settings(f"{key}.{name}", argument)
    else:
        yield key, _compact(_ONE_TEXT[key](value) if key in _ONE_TEXT else value)


def class_word(name: str) -> str:
    """A class's name as a label word: ``CosineToZero`` -> ``cosine``, ``StepLR`` -> ``step``, ``Adam`` -> ``adam``,
    ``MultiStepLR`` -> ``multi_step``.

    Example::

        >>> [class_word(name) for name in ("CosineToZero", "StepLR", "SGD", "ReduceLROnPlateau")]
        ['cosine', 'step', 'sgd', 'reduce_lr_on_plateau']
    """
    for suffix in ("ToZero", "LR"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name.removesuffix(suffix)
            break
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _arguments(section: Any) -> Mapping[str, Any]:
    if not isinstance(section, Mapping):
        return {}
    arguments = section.get("init_args", section)
    return arguments if isinstance(arguments, Mapping) else {}


def _in_protocol(setting: str, value: Any, rows: bool = False) -> bool:
    """Whether ``setting`` (``data.ways``, ``model.drop_head``) at ``value`` is part of a protocol (with ``rows``: or
    of a row, the task sampler)."""
    section, name = setting.split(".", 1)
    if setting in _ADDED and value == _ADDED[setting]:
        return False
    return name not in (_DATA_IGNORED | (frozenset() if rows else _DATA_ROW) if section == "data" else _MODEL_IGNORED)


def trained_settings(config: Mapping[str, Any], callbacks: Sequence[Mapping[str, Any]] = ()) -> dict[str, str]:
    """What defines the model that a LightningCLI ``config`` trains, as ``{setting: text}``: the model's class and
    the data module's, with their arguments in a protocol (:func:`protocol_of`) or a row (the task sampler), but not
    those of the evaluation alone (``eval_*``, ``data.val_episodes``, ``data.test_episodes``, ``data.test_split``);
    and each of the ``callbacks`` (``class_path`` entries that change training) with its arguments but its ``seed``.

    Example::

        >>> trained_settings({"model": {"class_path": "a.ProtoNet", "init_args": {"distance": "cosine"}}})
        {'model': 'ProtoNet()', 'model.distance': 'cosine'}
    """
    settings: dict[str, str] = {}
    for section in ("model", "data"):
        value = config.get(section)
        if isinstance(value, Mapping) and "class_path" in value:
            settings[section] = str(value["class_path"]).rsplit(".", 1)[-1] + _CLASS
        for name, argument in sorted(_arguments(value).items()):
            evaluation = name.startswith("eval_") or (section == "data" and name in _DATA_EVALUATION)
            if not evaluation and _in_protocol(f"{section}.{name}", argument, rows=True):
                settings.update(_settings(f"{section}.{name}", argument))
    for index, callback in enumerate(callbacks):
        arguments = {name: value for name, value in _arguments(callback).items() if name != "seed"}
        settings.update(_settings(f"trainer.callbacks.{index}", {**callback, "init_args": arguments}))
    return settings


def precision(config: Mapping[str, Any] | None, record: Mapping[str, Any]) -> str:
    """The precision a run was tested in, as Lightning names it (``32-true``, ``bf16-mixed``): its record's (what the
    Trainer ran), else its config's ``trainer.precision`` (a short name, ``bf16``, in full), else Lightning's default
    :data:`~lightning_episodes.evaluation.record.DEFAULT_PRECISION` (an older record, a config that leaves it unset).

    Example::

        >>> precision({"trainer": {"precision": "bf16"}}, {}), precision(None, {})
        ('bf16-mixed', '32-true')
    """
    environment = record.get("environment")
    value = environment.get("precision") if isinstance(environment, Mapping) else None
    trainer = (config or {}).get("trainer")
    if value is None and isinstance(trainer, Mapping):
        value = trainer.get("precision")
    text = DEFAULT_PRECISION if value is None else str(value)
    return _PRECISION_ALIASES.get(text, text)


def protocol_of(config: Mapping[str, Any] | None, record: Mapping[str, Any]) -> Protocol:
    """How the run was trained, from its LightningCLI ``config`` (every model and data argument but the seeds, the
    speed-only ones and a newer setting at what older runs did, and the Trainer's length, clipping and validation),
    or, without a config, from the scalar ``hparams`` and ``data`` of its ``record``; with either, its
    :func:`precision` unless it is the default ``32-true``. The sampling callback is not part of it (it is the row)."""
    settings: dict[str, str] = {}
    if config:
        model, data, trainer = (config.get(section) or {} for section in ("model", "data", "trainer"))
        items = [(f"model.{k}", v) for k, v in _arguments(model).items()]
        items += [(f"data.{k}", v) for k, v in _arguments(data).items()]
        items = [(k, v) for k, v in items if _in_protocol(k, v)]
        if isinstance(trainer, Mapping):
            items += [(f"trainer.{k}", trainer[k]) for k in _TRAINER_KEPT if k in trainer]
    else:
        items = [(f"model.{k}", v) for k, v in (record.get("hparams") or {}).items() if not k.startswith("_")]
        items += [(f"data.{k}", v) for k, v in (record.get("data") or {}).items()]
        items = [(k, v) for k, v in items if _in_protocol(k, v)]
    for key, value in items:
        settings.update(_settings(key, value))
    # added after runs were recorded, as _ADDED's: at the default, what every older run did, it is left out
    if (tested := precision(config, record)) != DEFAULT_PRECISION:
        settings["trainer.precision"] = tested
    return tuple(sorted(settings.items()))


def distinguishing_settings(protocols: Sequence[Protocol]) -> list[str]:
    """For each of ``protocols`` (the distinct protocols of one benchmark), the settings in which they differ, in
    words: ``"lr_scheduler=cosine, max_steps=3000"`` (the section prefix dropped, a class by its
    :func:`class_word`, ``"–"`` for a setting a protocol lacks), a class's arguments in brackets where they tell
    apart protocols of the same class (``lr_scheduler=step(step_size=1000)``); ``""`` for each when there is only one.

    Example::

        >>> none = (("model.lr_scheduler", "none"), ("trainer.max_steps", "3000"))
        >>> cosine = (("model.lr_scheduler", "CosineToZero()"), ("model.lr_scheduler.start", "0"),
        ...           ("trainer.max_steps", "3000"))
        >>> distinguishing_settings([none, cosine])
        ['lr_scheduler=none', 'lr_scheduler=cosine']
    """
    if len(set(protocols)) < 2:
        return ["" for _ in protocols]
    tables = [dict(protocol) for protocol in protocols]
    labels = [_label(table, tables, words=True) for table in tables]
    if len(set(labels)) < len(set(protocols)):  # two classes with one word: their names tell them apart
        labels = [_label(table, tables, words=False) for table in tables]
    return labels


def _label(table: Mapping[str, str], tables: Sequence[Mapping[str, str]], words: bool) -> str:
    """What sets ``table`` apart from the other ``tables`` (see :func:`distinguishing_settings`)."""
    keys = sorted({key for other in tables for key in other})
    owner = {key: _owner(key, set(keys)) for key in keys}
    shown: dict[str, list[str]] = {}  # the top setting -> its arguments shown
    for key in keys:
        if len({other.get(key) for other in tables}) < 2:
            continue
        up = owner[key]
        # an argument of a class counts where it tells this protocol from another of the same class
        if up is None or any(o.get(up) == table.get(up) and o.get(key) != table.get(key) for o in tables):
            top = key
            while owner[top] is not None:
                top = owner[top]  # type: ignore[assignment]
            shown.setdefault(top, [])
            if key != top:
                shown[top].append(key)
    parts = []
    for top, arguments in shown.items():
        inner = ", ".join(f"{key[len(top) + 1 :]}={_text(table.get(key), words)}" for key in arguments)
        value = table.get(top, _LEFT_OUT.get(top))
        parts.append(f"{top.split('.', 1)[-1]}={_text(value, words)}" + (f"({inner})" if inner else ""))
    return ", ".join(parts)


def _owner(key: str, keys: set[str]) -> str | None:
    """The nearest setting above ``key`` (the class whose argument it is), if any."""
    head = key.rpartition(".")[0]
    while head and head not in keys:
        head = head.rpartition(".")[0]
    return head or None


def _text(value: str | None, words: bool) -> str:
    if value is None:
        return "–"
    if value.endswith(_CLASS):
        return class_word(value.removesuffix(_CLASS)) if words else value.removesuffix(_CLASS)
    return value

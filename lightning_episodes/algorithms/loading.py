"""Reading checkpoint files safely, with one clear message for a broken file, and loading any checkpoint of this
library without knowing its algorithm in advance."""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.models import module_class

#: the first bytes of every file ``torch.save`` writes (a zip archive)
_ZIP_MAGIC = b"PK\x03\x04"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: empty, truncated, not a checkpoint, or unsafe to load.

    The message names the file and what is wrong with it.
    """


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def check_checkpoint_file(path: str | Path) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it is a complete checkpoint archive (without loading it).

    Cheap (it reads the archive's directory, not its tensors): what the command line checks before Lightning
    loads a ``--ckpt_path``.

    Raises:
        FileNotFoundError: if ``path`` does not exist (or is a dangling symbolic link).
        CheckpointError: if it is a directory, empty, truncated or not a file written by ``torch.save``.
        OSError: with the path and the operating system's reason, if it cannot be looked at (a link loop).
    """
    path = Path(path)
    try:
        path.stat()  # a link loop or a refused permission: the operating system's reason, with the path
    except FileNotFoundError:
        link = f" (a symbolic link to {os.readlink(path)}, which does not exist)" if path.is_symlink() else ""
        raise FileNotFoundError(f"checkpoint {path} does not exist{link}") from None
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.ckpt"))[:5]
        hint = f" (it holds {', '.join(inside)})" if inside else ""
        raise CheckpointError(f"checkpoint {path} is a directory, not a checkpoint file{hint}")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes): was the run killed while saving it?")
    with path.open("rb") as handle:
        head = handle.read(len(_ZIP_MAGIC))
    if head != _ZIP_MAGIC:
        raise CheckpointError(f"{path} is not a checkpoint: it is not a file written by torch.save (a zip archive)")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"checkpoint {path} is truncated or corrupt ({size:,} bytes, the end of its zip archive is missing): "
            "was the run killed while saving it, or the copy incomplete?"
        )
    return path


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The contents of a Lightning checkpoint file, loaded with ``weights_only=True`` (no code runs) and memory-mapped
    (tensors are read from the file when used).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        CheckpointError: naming the file, if it is a directory, empty, truncated or corrupt, holds objects that
            cannot be loaded safely, or is not a Lightning checkpoint (a dict with a ``state_dict``).
    """
    path = check_checkpoint_file(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"checkpoint {path} holds objects that cannot be loaded safely with weights_only=True: {_first_line(error)}"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError) as error:
        raise CheckpointError(f"checkpoint {path} is corrupt: {_first_line(error)}") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is not a Lightning checkpoint (it has no 'state_dict')")
    return checkpoint


def checkpoint_info(path: str | Path) -> dict[str, Any]:
    """The ``lightning_episodes`` record of a checkpoint: its class path and episode shape.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        CheckpointError: if the file is broken (see :func:`read_checkpoint`).
        ValueError: if the checkpoint was not written by an :class:`EpisodicModule`.
    """
    info = read_checkpoint(path).get("lightning_episodes")
    if not isinstance(info, dict) or "class_path" not in info:
        raise ValueError(f"{path} is not a lightning-episodes checkpoint (it has no 'lightning_episodes' record)")
    return info


#: How torch's ``load_state_dict`` starts the message of weights that do not fit the module.
_STATE_DICT_ERROR = "Error(s) in loading state_dict for "


def state_dict_mismatch(error: BaseException) -> str | None:
    """The message of a ``load_state_dict`` that refused a checkpoint's weights, on one line (``ProtoNet: unexpected
    key(s) in state_dict: "scale"``); ``None`` for any other error.

    Example::

        >>> state_dict_mismatch(RuntimeError('Error(s) in loading state_dict for ProtoNet:\\n\\tUnexpected key(s) in '
        ...                                  'state_dict: "scale". '))
        'ProtoNet: unexpected key(s) in state_dict: "scale"'
    """
    text = str(error)
    if not isinstance(error, RuntimeError) or not text.startswith(_STATE_DICT_ERROR):
        return None
    head, *lines = text.removeprefix(_STATE_DICT_ERROR).splitlines()
    problems = [line.strip().rstrip(". ") for line in lines if line.strip()]
    return f"{head.rstrip(':')}: " + "; ".join(problem[:1].lower() + problem[1:] for problem in problems)


#: The package whose modules a checkpoint may name without the user naming them.
LIBRARY = "lightning_episodes"


def _in_module(module: str, allowed: str) -> bool:
    return module == allowed or module.startswith(allowed + ".")


def check_class_path(class_path: str, allowed_modules: Iterable[str] = (), source: str | Path = "checkpoint") -> str:
    """``class_path`` if loading it imports nothing but trusted code; checked without importing anything.

    Trusted are: this library's modules, the ``allowed_modules`` (and their sub-modules) the user named, and
    modules already imported (importing them again runs nothing).

    Args:
        class_path: ``module.Class`` as a checkpoint records it.
        allowed_modules: modules the user trusts (``--allowed_modules``, the module of ``--model``).
        source: the checkpoint, for the message.

    Raises:
        CheckpointError: naming the checkpoint, the class and how to trust it, for any other module.
    """
    module = class_path.rpartition(".")[0] if isinstance(class_path, str) else ""
    trusted = [LIBRARY, *allowed_modules]
    if module and (any(_in_module(module, name) for name in trusted) or module in sys.modules):
        return class_path
    raise CheckpointError(
        f"{source} records the class {class_path!r}, which is not a {LIBRARY} algorithm nor in a module you named: "
        f"refused before importing it (if you trust the checkpoint, name its module: --allowed_modules {module})"
    )


#: Where a checkpoint's backbone class may come from besides the trusted modules: this library's dependency torchvision.
BACKBONE_MODULES = ("torchvision",)


def _class_paths(value: Any) -> Iterator[Any]:
    """Every ``class_path`` value in a (nested) record of dicts and lists."""
    if isinstance(value, Mapping):
        if "class_path" in value:
            yield value["class_path"]
        for item in value.values():
            yield from _class_paths(item)
    elif isinstance(value, list):
        for item in value:
            yield from _class_paths(item)


def check_backbone_record(
    hparams: Mapping[str, Any], source: str | Path = "checkpoint", allowed_modules: Iterable[str] = ()
) -> None:
    """Refuse a recorded ``backbone`` class path (``{class_path: ..., init_args: ...}``) unless every class path in it
    is trusted (:func:`check_class_path`, or :data:`BACKBONE_MODULES`), checked before importing anything, and the
    backbone's is an ``nn.Module`` class (never a function or another callable), checked after.

    Raises:
        CheckpointError: naming the checkpoint and the class path.
    """
    backbone = hparams.get("backbone")
    if not isinstance(backbone, Mapping):
        return
    for class_path in _class_paths(backbone):
        if not isinstance(class_path, str):
            raise CheckpointError(f"{source} records a backbone class_path that is not a string")
        check_class_path(class_path, [*allowed_modules, *BACKBONE_MODULES], source)
    try:
        module_class(backbone.get("class_path", ""))
    except ValueError as error:
        raise CheckpointError(f"{source} records a backbone that is refused: {error}") from None


#: The instantiators LightningCLI writes into the hyper-parameters it saves (Lightning's allowlist has these alone).
CLI_INSTANTIATORS = frozenset({"pytorch_lightning.cli.instantiate_module", "lightning.pytorch.cli.instantiate_module"})


def check_recorded_classes(
    checkpoint: Mapping[str, Any], source: str | Path = "checkpoint", allowed_modules: Iterable[str] = ()
) -> None:
    """Refuse, in one line, a checkpoint whose saved hyper-parameters (the model's and the data module's) name an
    instantiator other than LightningCLI's, a class outside the trusted modules (:func:`check_class_path`), a backbone
    that is not a trusted ``nn.Module`` class (:func:`check_backbone_record`), or a model class other than the one its
    ``lightning_episodes`` record names: an edited checkpoint, which Lightning would otherwise refuse with a long
    traceback, or (the data module's) silently ignore.

    Raises:
        CheckpointError: naming the checkpoint, the field and the value.
    """
    allowed_modules = list(allowed_modules)
    record = checkpoint.get("lightning_episodes")
    recorded = record.get("class_path") if isinstance(record, Mapping) else None
    for section in ("hyper_parameters", "datamodule_hyper_parameters"):
        hparams = checkpoint.get(section)
        if not isinstance(hparams, Mapping):
            continue
        instantiator = hparams.get("_instantiator")
        if instantiator is not None and instantiator not in CLI_INSTANTIATORS:
            raise CheckpointError(
                f"{source} names the instantiator {instantiator!r} in its {section}, not LightningCLI's: refused "
                "before importing it (an edited checkpoint?)"
            )
        if section == "hyper_parameters":
            check_backbone_record(hparams, source, allowed_modules)
        class_path = hparams.get("_class_path")
        if class_path is None:
            continue
        if not isinstance(class_path, str):
            raise CheckpointError(f"{source} records a _class_path that is not a string in its {section}")
        check_class_path(class_path, allowed_modules, source)
        # the config's name of the class (`lightning_episodes.algorithms.ProtoNet`) and the record's (its module's)
        # may differ; a class of another name, or from a module trusted only because it is imported, may not
        module, _, name = class_path.rpartition(".")
        named = any(_in_module(module, trusted) for trusted in [LIBRARY, *allowed_modules])
        alias = isinstance(recorded, str) and named and name == recorded.rpartition(".")[2]
        if section == "hyper_parameters" and isinstance(recorded, str) and class_path != recorded and not alias:
            raise CheckpointError(
                f"{source} records the model class {recorded!r} and, in its hyper_parameters, {class_path!r}: "
                "refused (an edited checkpoint?)"
            )


def load_episodic_module(
    path: str | Path, map_location: str | torch.device = "cpu", allowed_modules: Iterable[str] = ()
) -> EpisodicModule:
    """Load the :class:`EpisodicModule` saved in ``path`` through its own concrete class.

    The recorded class is checked before its module is imported (:func:`check_class_path`: this library's
    algorithms, the ``allowed_modules`` and modules already imported), only subclasses of :class:`EpisodicModule`
    are accepted, and tensors load with ``weights_only=True``: a checkpoint cannot make this function import or
    run code the user did not name. Tensors saved on a GPU load onto ``map_location``.

    Args:
        path: the checkpoint file.
        map_location: where the tensors go (``"cpu"``, a device).
        allowed_modules: modules besides this library's that the checkpoint's class may come from.

    The module is as it was trained, its ``channels_last`` layout included (a Trainer applies that in
    ``configure_model``; a module loaded for scoring or as an offline reference has no Trainer to do it).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        CheckpointError: if the file is broken (see :func:`read_checkpoint`).
        ValueError: if the recorded class is not an :class:`EpisodicModule`.
    """
    check_recorded_classes(read_checkpoint(path), f"checkpoint {path}", allowed_modules)
    class_path = check_class_path(checkpoint_info(path)["class_path"], allowed_modules, f"checkpoint {path}")
    module_name, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name, None)
    if not (isinstance(cls, type) and issubclass(cls, EpisodicModule)):
        raise ValueError(f"{path} records {class_path!r}, which is not an EpisodicModule")
    module = cls.load_from_checkpoint(path, map_location=map_location, weights_only=True)
    if module.channels_last:
        module.use_channels_last()
    return module

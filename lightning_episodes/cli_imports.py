"""Users' components on the command line: the modules that define or register them, imported before parsing.

A class path (``class_path: mylab.StudentT``) imports its module by itself, as everywhere in LightningCLI. A *name*
(``proposal: mylab.student_t``, ``--model MyAlgorithm``, ``task_sampler: RoundRobin``) is known only once the module
that registers or defines it is imported: ``fit``, ``validate`` and ``test`` first import the modules that

- the installed packages list in the entry-point group ``lightning_episodes.components``
  (:data:`~lightning_episodes.weighting.ENTRY_POINT_GROUP`);
- ``--import MODULE`` names (repeatable; after the subcommand), the ``import:`` list of a ``--config`` file (the
  run's saved ``config.yaml`` keeps it, so a resumed run finds them again), or the environment variable
  ``LIGHTNING_EPISODES_IMPORT`` (modules separated by commas).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from lightning_episodes.weighting.registry import load_entry_points

__all__ = ["IMPORT_ENV", "IMPORT_OPTION", "add_import_option", "import_components", "modules_to_import"]

#: The option, and the key of a config file, that name the modules to import.
IMPORT_OPTION: Final[str] = "import"
#: The environment variable that names modules to import (separated by commas).
IMPORT_ENV: Final[str] = "LIGHTNING_EPISODES_IMPORT"


def _option_values(args: Sequence[str], option: str) -> list[str]:
    """The values of ``--option VALUE`` and ``--option=VALUE`` (also jsonargparse's ``--option+``) in ``args``."""
    values = []
    for i, arg in enumerate(args):
        for flag in (f"--{option}", f"--{option}+"):
            if arg == flag and i + 1 < len(args):
                values.append(args[i + 1])
            elif arg.startswith(f"{flag}="):
                values.append(arg[len(flag) + 1 :])
    return values


def _listed(value: Any) -> list[str]:
    """A config's ``import`` value (a module, or a list of them) as a list."""
    if isinstance(value, str):
        return [value]
    return [str(item) for item in value] if isinstance(value, list) else []


def modules_to_import(args: Sequence[str], environ: dict[str, str] | None = None) -> list[str]:
    """The modules a command line names to import, in order and once each: from :data:`IMPORT_ENV`, then from each
    ``--config`` file's ``import`` list (files that exist; a shipped config's name has none), then ``--import``."""
    environ = dict(os.environ) if environ is None else environ
    modules = [name.strip() for name in environ.get(IMPORT_ENV, "").split(",") if name.strip()]
    for path in _option_values(args, "config"):
        if Path(path).is_file():
            try:
                config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError):
                continue  # the parser reports the file itself
            if isinstance(config, dict):
                modules += _listed(config.get(IMPORT_OPTION))
    modules += _option_values(args, IMPORT_OPTION)
    return list(dict.fromkeys(modules))


def import_components(args: Sequence[str]) -> list[str]:
    """Imports the entry points' modules and those ``args`` names (:func:`modules_to_import`), and returns ``args``
    with each ``--import X`` written ``--import+ X``, the form that adds to a config's list (jsonargparse's).

    Raises:
        ValueError: naming a module that cannot be found, and how to make it importable.
    """
    load_entry_points()
    for module in modules_to_import(args):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name is not None and module.startswith(error.name):
                raise ValueError(
                    f"--import {module}: no module named {error.name!r} (put the folder that holds it on PYTHONPATH, "
                    "or install its package)"
                ) from None
            raise
    flag = f"--{IMPORT_OPTION}"
    return [f"{flag}+" if arg == flag else arg.replace(f"{flag}=", f"{flag}+=", 1) if arg.startswith(f"{flag}=")
            else arg for arg in args]  # fmt: skip


def add_import_option(parser: Any) -> None:
    """Adds ``--import`` to a subcommand's parser (a list: in YAML ``import: [mylab]``)."""
    parser.add_argument(
        f"--{IMPORT_OPTION}",
        type=list[str] | None,
        default=None,
        help=(
            "Modules to import before the rest is read, which define or register components of your own (a target, "
            "proposal, normaliser, task sampler, algorithm) so that their names are known; repeatable: --import "
            f"mylab --import otherlab. Also the environment variable {IMPORT_ENV} (commas between modules) and the "
            "entry-point group lightning_episodes.components of an installed package."
        ),
    )

"""What the commands share: their parser and the ``--device`` option."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, DefaultHelpFormatter

#: Help of the ``--device`` option.
DEVICE_HELP = "cpu, cuda, cuda:1, mps or auto (default: cuda if available, else cpu)"


#: How a type reads in the tools' ``--help``: a word instead of Python's name.
_TYPE_WORDS = {"Path": "path", "str": "string", "int": "integer", "float": "number", "bool": "true or false"}


def readable_type(text: str) -> str:
    """A type as jsonargparse writes it, in words: ``<class 'Path'>`` -> ``path``, ``int | null`` -> ``integer``
    (the default says that it may be left out), ``list[int] | null`` -> ``list of integers``,
    ``Literal['column', 'scenario']`` -> ``column or scenario``.

    Example::

        >>> [readable_type(t) for t in ("<class 'Path'>", "Path | null", "list[int] | null", "Literal['a', 'b', 'c']")]
        ['path', 'path', 'list of integers', 'a, b or c']
    """
    text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", text)
    text = re.sub(r"Literal\[(.*)\]", lambda m: _choices([c.strip().strip("'\"") for c in m.group(1).split(",")]), text)
    text = re.sub(r"list\[(\w+)\]", lambda m: f"list of {_TYPE_WORDS.get(m.group(1), m.group(1))}s", text)
    parts = [part.strip() for part in text.split(" | ")]
    parts = [part for part in parts if part not in ("null", "None", "NoneType")] or parts
    return " or ".join(_TYPE_WORDS.get(part, part) for part in parts)


def _choices(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help (types and defaults) with the description's line breaks kept (its examples) and the
    types in words (:func:`readable_type`)."""

    def _get_type_str(self, action: argparse.Action) -> str | None:
        text = super()._get_type_str(action)
        return None if text is None else readable_type(text)


def command_parser(name: str, description: str) -> ArgumentParser:
    """The parser of ``lightning-episodes <name>``: it raises ``argparse.ArgumentError`` instead of exiting, so the
    console script reports a wrong argument in one line."""
    return ArgumentParser(
        prog=f"lightning-episodes {name}",
        description=description,
        formatter_class=_HelpFormatter,
        exit_on_error=False,
    )


def add_device_argument(parser: ArgumentParser) -> None:
    parser.add_argument("--device", type=str, default="auto", help=DEVICE_HELP)


def add_allowed_modules_argument(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--allowed_modules",
        type=list[str],
        default=[],
        help="modules besides lightning_episodes that a checkpoint's recorded model class may be imported from "
        "(a checkpoint naming any other module is refused before anything is imported)",
    )


def add_skip_unreadable_argument(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--skip-unreadable",
        "--skip_unreadable",  # the spelling of every other option
        action="store_true",
        help="leave out the test records that cannot be read (empty, corrupt), naming each under the table; without "
        "it, such a record stops the command (exit status 2), so that no run drops out of the table silently",
    )


def refuse_unreadable(command: str, unreadable: Sequence[Exception]) -> int:
    """Name each unreadable test record on stderr, one line each, and return the usage error's status, 2."""
    for error in unreadable:
        print(f"lightning-episodes {command}: error: {error} (--skip-unreadable leaves it out)", file=sys.stderr)
    return 2


def unreadable_note(unreadable: Sequence[Exception]) -> str:
    """What a table printed with ``--skip-unreadable`` says under it: each record it left out, by its path and why
    (``""`` when it left out none)."""
    if not unreadable:
        return ""
    count = f"{len(unreadable)} test record{'s' if len(unreadable) > 1 else ''}"
    heading = f"\nLeft out of this table (--skip-unreadable): {count} that cannot be read.\n"
    return heading + "".join(f"- {error}\n" for error in unreadable)


def available_devices() -> list[str]:
    """The device kinds this machine has: ``cpu``, and ``cuda`` and ``mps`` when available."""
    mps = getattr(torch.backends, "mps", None)
    return ["cpu", *(["cuda"] if torch.cuda.is_available() else []), *(["mps"] if mps and mps.is_available() else [])]


def resolve_device(name: str, option: str = "--device") -> torch.device:
    """A ``--device`` value as a device of this machine: ``auto`` is CUDA when available, else the CPU.

    Raises:
        ValueError: naming ``option`` and the available devices, if ``name`` is not a device name or this machine
            does not have it.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"{option} {name!r} is not a device (cpu, cuda, cuda:1, mps or auto)") from None
    available = available_devices()
    if device.type in ("cuda", "mps") and device.type not in available:
        kinds = ", ".join(available)
        raise ValueError(f"{option} {name}: this machine has no {device.type.upper()} device (available: {kinds})")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"{option} {name}: this machine has {torch.cuda.device_count()} CUDA devices (cuda:0 ...)")
    return device


def probe_output(path: Path | str | None, option: str) -> None:
    """Create the folder of an output file and check that it can be written, before any work is done.

    Raises:
        OSError: (``OutputPathError``) naming ``option``, the path and the reason, if it cannot be written.
    """
    from lightning_episodes.run_folder import OutputPathError, probe_writable

    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{option} {path} cannot be written: it is a folder (give a file name)", path)
    probe_writable(path.parent, f"{option} {path}: the folder")


def check_positive(option: str, value: int | None) -> None:
    """Raises ``ValueError`` naming ``option`` if ``value`` is given and below 1."""
    if value is not None and value < 1:
        raise ValueError(f"{option} must be >= 1, got {value}")


def arguments(argv: Sequence[str] | None) -> list[str]:
    """``argv``, or the console script's arguments after the command's name."""
    return sys.argv[2:] if argv is None else list(argv)

"""What the commands share: their parser and the ``--device`` option."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from jsonargparse import ArgumentParser, DefaultHelpFormatter

#: Help of the ``--device`` option.
DEVICE_HELP = "cpu, cuda, cuda:1, mps or auto (default: cuda if available, else cpu)"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help (types and defaults) with the description's line breaks kept (its examples)."""


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


def resolve_device(name: str) -> torch.device:
    """A ``--device`` value as a device: ``auto`` is CUDA when available, else the CPU.

    Raises:
        ValueError: if ``name`` is not a device name.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name!r} is not a device (cpu, cuda, cuda:1, mps or auto)") from None


def check_positive(option: str, value: int | None) -> None:
    """Raises ``ValueError`` naming ``option`` if ``value`` is given and below 1."""
    if value is not None and value < 1:
        raise ValueError(f"{option} must be >= 1, got {value}")


def arguments(argv: Sequence[str] | None) -> list[str]:
    """``argv``, or the console script's arguments after the command's name."""
    import sys

    return sys.argv[2:] if argv is None else list(argv)

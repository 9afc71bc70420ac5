"""``lightning-episodes configs [NAME ...] [--all] [--to DIR] [--force]``: the YAML configs shipped in the package.

They live in ``lightning_episodes/configs/`` (the repository's ``configs/`` is a link to that folder), so an installed
wheel has them too. A config's name is its path in that folder without ``.yaml``: ``quickstart``,
``sampling/uniform_online``. ``--config`` takes a name wherever it takes a file, from any folder::

    lightning-episodes fit --config quickstart
    lightning-episodes fit --config data/glyphs_5w5s --config models/protonet_euclidean_conv4 \
        --config sampling/uniform_online

A file on disk always wins: a name is looked up only when no file of that name exists. ``configs/<name>.yaml``, as
the documentation writes them, also finds the shipped ``<name>`` when the current folder has no such file (a note
says so). ``lightning-episodes configs`` lists the names; given names (or ``--all``) it copies those files into
``./configs/`` (``--to``), where the documentation's ``--config configs/...`` commands then read the copies, to edit.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jsonargparse import ActionConfigFile

from lightning_episodes.commands._common import arguments, command_parser

#: The shipped configs' folder. Read as files (jsonargparse opens them by path): pip installs a wheel unzipped.
CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"
#: The help of ``--config`` in ``fit``, ``validate`` and ``test``.
CONFIG_HELP = (
    "a YAML config file, or a shipped config's name (quickstart, sampling/uniform_online: `lightning-episodes "
    "configs` lists them); repeat it to compose files, later ones override earlier ones"
)
#: The folder prefix under which the documentation names the configs (``configs/quickstart.yaml``).
PREFIX = "configs/"


def shipped_configs() -> dict[str, Path]:
    """Every shipped config by name (``quickstart``, ``sampling/uniform_online``), sorted: top-level files first."""
    paths = sorted(CONFIGS_DIR.rglob("*.yaml"), key=lambda p: (len(p.relative_to(CONFIGS_DIR).parts), p))
    return {path.relative_to(CONFIGS_DIR).with_suffix("").as_posix(): path for path in paths}


def shipped_config(value: str) -> Path | None:
    """The shipped config that a ``--config`` value names, or ``None``: ``None`` whenever a file ``value`` exists.

    Args:
        value: a name (``quickstart``, ``sampling/uniform_online``), with or without ``.yaml``, optionally after
            ``configs/``.
    """
    if Path(value).exists():
        return None
    name = value.removeprefix("./").removeprefix(PREFIX).removesuffix(".yaml")
    return shipped_configs().get(name)


class ConfigFileOrName(ActionConfigFile):
    """``--config``: jsonargparse's (a file, or the configuration itself as a YAML string), or the name of a shipped
    config when no file of that name exists."""

    def __call__(self, parser: Any, cfg: Any, values: Any, option_string: str | None = None) -> None:
        if isinstance(values, str):
            values = self._resolve(values)
        super().__call__(parser, cfg, values, option_string)

    def _resolve(self, value: str) -> str:
        path = shipped_config(value)
        if path is not None:
            if value.removeprefix("./").startswith(PREFIX):  # it named a file; say which one is read instead
                from pytorch_lightning.utilities import rank_zero_info

                rank_zero_info(f"--{self.dest} {value}: no such file here; using the shipped {path}")
            return str(path)
        if not Path(value).exists() and not any(char in value for char in ":{[\n"):
            # not a file, and not a YAML mapping either: jsonargparse would only say that the file does not exist
            raise TypeError(
                f"--{self.dest} {value}: no such file here, nor a shipped config of that name "
                "(`lightning-episodes configs` lists them)"
            )
        return value


def parser() -> Any:
    """The ``configs`` parser."""
    parser = command_parser(
        "configs",
        "List the shipped configs, or copy some into a folder to edit them.\n\n"
        "examples:\n"
        "  lightning-episodes configs                      # the names, with each file's first line\n"
        "  lightning-episodes configs quickstart sampling/uniform_online   # -> ./configs/quickstart.yaml, ...\n"
        "  lightning-episodes fit --config quickstart      # a name runs the shipped file itself",
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", default=[], help="configs to copy, by name (none: list them)"
    )
    parser.add_argument("--all", action="store_true", help="copy every shipped config")
    parser.add_argument("--to", metavar="DIR", type=str, default="configs", help="the folder to copy into")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")
    return parser


def _summary(path: Path) -> str:
    """A config's first comment line."""
    lines = path.read_text().lstrip().splitlines()
    return lines[0].removeprefix("#").strip() if lines and lines[0].startswith("#") else ""


def main(argv: Sequence[str] | None = None) -> int:
    """List the shipped configs, or copy the named ones (all with ``--all``) into ``--to``.

    Returns:
        0.

    Raises:
        ValueError: for a name that is not a shipped config, with ``--all`` and names together, or for a copy that
            would overwrite a file without ``--force`` (nothing is copied then).
    """
    args = parser().parse_args(arguments(argv))
    configs = shipped_configs()
    if args.all and args.names:
        raise ValueError("give names or --all, not both")
    if not args.all and not args.names:
        width = max(map(len, configs)) + 2
        for name, path in configs.items():
            line = f"{name:<{width}}{_summary(path)}"
            print(line if len(line) <= 120 else line[:119] + "…")
        return 0
    names = list(configs) if args.all else [name.removeprefix(PREFIX).removesuffix(".yaml") for name in args.names]
    unknown = [name for name in names if name not in configs]
    if unknown:
        raise ValueError(f"no shipped config {', '.join(map(repr, unknown))} (`lightning-episodes configs` lists them)")
    targets = {name: Path(args.to) / configs[name].relative_to(CONFIGS_DIR) for name in names}
    existing = [str(target) for target in targets.values() if target.exists()]
    if existing and not args.force:
        raise ValueError(f"{', '.join(existing)} exists already (--force overwrites)")
    for name, target in targets.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(configs[name], target)
        print(target)
    return 0

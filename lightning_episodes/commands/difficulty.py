"""``lightning-episodes difficulty``: score fixed episodes with a checkpoint and write one CSV row per episode.

lightning-episodes difficulty --ckpt_path runs/a/checkpoints/last.ckpt --output a.csv
lightning-episodes difficulty --ckpt_path runs/b/checkpoints/last.ckpt --output b.csv --episodes 2000
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lightning_episodes.commands._common import (
    add_allowed_modules_argument,
    add_device_argument,
    arguments,
    check_positive,
    command_parser,
    probe_output,
    resolve_device,
)
from lightning_episodes.commands.configs import shipped_config
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.evaluation.scoring import Split, checkpoint_datamodule, score_episodes

DESCRIPTION = """\
Score fixed episodes with a checkpoint and write one CSV row per episode: its identity (classes, support
and query indices), its difficulty (the query loss) and its accuracy.

The data settings are those the checkpoint was trained with (its saved data module hyper-parameters),
updated by the `data:` section of each --config file (a fit config works as is) and then by --data.KEY
options (any EpisodicDataModule argument: --data.seed 1, --data.eval_shots 5, ...), in that order.
Two checkpoints scored with the same data settings score the same episodes, so their tables join by
episode id. A JSON file next to the CSV records what was scored and how.

example:
  lightning-episodes difficulty --ckpt_path runs/a/checkpoints/last.ckpt --output a.csv --episodes 2000
  lightning-episodes difficulty --ckpt_path b.ckpt --output b.csv --config configs/quickstart.yaml \\
      --data.test_split validation
"""


def parser() -> Any:
    """The ``difficulty`` parser; ``--data.KEY`` options are the data module's arguments (checked by type)."""
    parser = command_parser("difficulty", DESCRIPTION)
    parser.add_argument("--ckpt_path", type=str, required=True, help="checkpoint of any algorithm of this library")
    parser.add_argument("--output", type=str, required=True, help="CSV file to write (its folder is created)")
    parser.add_argument("--episodes", type=int, default=10_000, help="episodes to score")
    parser.add_argument("--split", type=Split, default="test", help="whose fixed episodes")
    parser.add_argument("--batch_size", type=int | None, default=None, help="episodes per forward pass")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        help="YAML with a `data:` section, or a shipped config's name as fit takes it (repeatable)",
    )
    add_device_argument(parser)
    add_allowed_modules_argument(parser)
    parser.add_class_arguments(
        EpisodicDataModule, "data", help="Data settings: each one given overrides the checkpoint's and the configs'."
    )
    return parser


def data_section(path: str) -> dict[str, Any]:
    """The data module's arguments in a YAML config (``data: {class_path, init_args}`` or ``data: {...}``): a file, or
    a shipped config's name where no such file exists (:func:`~lightning_episodes.commands.configs.shipped_config`).

    Raises:
        ValueError: if ``data`` is not a mapping.
    """
    path = str(shipped_config(path) or path)
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    data = config.get("data", {}) if isinstance(config, dict) else {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: `data` must be a mapping, got {data!r}")
    return dict(data.get("init_args", {}) if "class_path" in data or "init_args" in data else data)


def main(argv: Sequence[str] | None = None) -> int:
    """``lightning-episodes difficulty``: score fixed episodes with a checkpoint and write a CSV (see ``--help``).

    Args:
        argv: the arguments after ``difficulty`` (default: ``sys.argv[2:]``).

    Returns:
        0 on success.

    Raises:
        argparse.ArgumentError: for an unknown option or a value of the wrong type.
        ValueError: for a non-positive ``--episodes``, an unknown ``--device``, a broken checkpoint, one whose
            parameters or buffers hold NaN or inf, or invalid data settings.
        FileNotFoundError: if the checkpoint or a config does not exist.
    """
    from lightning_episodes.algorithms.loading import load_episodic_module
    from lightning_episodes.algorithms.nonfinite import NonFiniteError, check_finite

    parser_ = parser()
    # `--data.init_args.KEY` (LightningCLI's spelling) is `--data.KEY`
    argv = [a.replace("--data.init_args.", "--data.", 1) if a.startswith("--data.") else a for a in arguments(argv)]
    given = parser_.parse_args(argv, defaults=False)  # the data options given, not the data module's defaults
    args = parser_.get_defaults()
    for key, value in given.items():
        if not key.startswith("data."):
            args[key] = value
    check_positive("--episodes", args.episodes)
    device = resolve_device(args.device)
    probe_output(args.output, "--output")
    module = load_episodic_module(args.ckpt_path, map_location=device, allowed_modules=args.allowed_modules)
    try:  # the check `test` makes: a model with NaN or inf weights scores every episode alike, meaning nothing
        check_finite(module, f"checkpoint {args.ckpt_path}")
    except NonFiniteError as error:  # the user's file to replace, not a run that failed: a usage error, as predict's
        raise ValueError(str(error)) from None
    overrides: dict[str, Any] = {}
    for config in args.config:
        overrides.update(data_section(config))
    data = given.get("data")
    overrides.update(data.as_dict() if data is not None else {})
    datamodule = checkpoint_datamodule(args.ckpt_path, overrides)
    table = score_episodes(module, datamodule, args.episodes, args.split, args.batch_size)
    output = Path(args.output)
    table.write(output)
    difficulty = table.difficulty[np.isfinite(table.difficulty)]
    record = {
        "checkpoint": str(args.ckpt_path),
        "algorithm": type(module).__name__,
        "eval_batch_norm": module.eval_batch_norm,
        "split": args.split,
        "episodes": len(table),
        "difficulty_mean": float(difficulty.mean()) if difficulty.size else None,
        "difficulty_std": float(difficulty.std()) if difficulty.size else None,
        "accuracy_mean": float(table.accuracy.mean()),
        "data": {k: v for k, v in datamodule.hparams.items() if v is None or isinstance(v, int | float | str | bool)},
    }
    # scores.csv -> scores.json (scores.json.json if the table itself is called .json)
    metadata = output.with_suffix(".json") if output.suffix != ".json" else output.with_name(output.name + ".json")
    metadata.write_text(json.dumps(record, indent=2, sort_keys=True))
    spread = "no finite difficulty" if not difficulty.size else f"{difficulty.mean():.4f} ± {difficulty.std():.4f}"
    print(
        f"scored {len(table)} {args.split} episodes with {record['algorithm']} ({args.ckpt_path}): "
        f"difficulty {spread}, accuracy {record['accuracy_mean']:.4f} -> {output}"
    )
    return 0

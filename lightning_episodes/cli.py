"""The ``lightning-episodes`` command line: LightningCLI over every algorithm and data module."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.cli import LightningCLI

import lightning_episodes  # noqa: F401  (registers algorithms, callbacks and datasets for short names)
from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.data.datamodule import EpisodicDataModule


class EpisodicCLI(LightningCLI):
    """LightningCLI with the data module's image shape and ways linked into the model.

    ``data.channels``, ``data.image_size`` and ``data.ways`` are the single source of the input shape and
    the number of classes, so a model is always built for the episodes it will see. There is no default
    model: ``--model ProtoNet`` (or a config's ``model.class_path``) picks one with its own defaults.
    """

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.link_arguments("data.init_args.channels", "model.init_args.in_channels")
        parser.link_arguments("data.init_args.image_size", "model.init_args.image_size")
        # the head of MAML/ANIL has one output per class; algorithms without `ways` ignore the link
        parser.link_arguments("data.init_args.ways", "model.init_args.ways")
        parser.set_defaults(
            {
                "data": {"class_path": "lightning_episodes.data.EpisodicDataModule"},
            }
        )
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=False,
            help="After `fit`, test the best checkpoint (by the ModelCheckpoint monitor) in the same process.",
        )

    def _resolve_best(self, subcommand: str) -> None:
        """Let ``--ckpt_path best`` work in a new process: read the best path that the configured
        ``ModelCheckpoint`` recorded in its ``last.ckpt`` (Lightning only knows "best" inside ``fit``)."""
        config = self.config_init[subcommand]
        if config.get("ckpt_path") != "best":
            return
        callbacks = self.trainer.callbacks  # type: ignore[attr-defined]
        checkpoints = [cb for cb in callbacks if isinstance(cb, ModelCheckpoint)]
        if not checkpoints or checkpoints[0].dirpath is None:
            raise ValueError(
                "--ckpt_path best in a new process needs a ModelCheckpoint with an explicit dirpath in the config"
            )
        last = Path(checkpoints[0].dirpath) / "last.ckpt"
        if not last.is_file():
            raise FileNotFoundError(f"--ckpt_path best: {last} does not exist (run fit with save_last: true first)")
        state = torch.load(last, map_location="cpu", weights_only=True)["callbacks"]
        best = next((s["best_model_path"] for k, s in state.items() if k.startswith("ModelCheckpoint")), "")
        if not best or not Path(best).is_file():
            raise FileNotFoundError(f"--ckpt_path best: {last} records no existing best checkpoint ({best!r})")
        config["ckpt_path"] = best

    def before_test(self) -> None:
        self._resolve_best("test")

    def before_validate(self) -> None:
        self._resolve_best("validate")

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit"):
            has_best = self.trainer.checkpoint_callback is not None and bool(
                getattr(self.trainer.checkpoint_callback, "best_model_path", "")
            )
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path="best" if has_best else None)


#: subcommands that are not Trainer methods: name -> module with ``main(argv) -> int``
TOOLS = {
    "report": "lightning_episodes.analysis.report",
    "difficulty": "lightning_episodes.analysis.scoring",
    "compare": "lightning_episodes.analysis.paired",
}


def run_tool(argv: list[str]) -> int | None:
    """Run ``argv[0]`` if it names one of :data:`TOOLS` (``None`` otherwise)."""
    if not argv or argv[0] not in TOOLS:
        return None
    return int(importlib.import_module(TOOLS[argv[0]]).main(argv[1:]) or 0)


def entry() -> int:
    """The ``lightning-episodes`` console script: ``fit|validate|test|predict`` or one of :data:`TOOLS`."""
    code = run_tool(sys.argv[1:])
    if code is None:
        main()
        return 0
    return code


def main(args: list[str] | None = None) -> EpisodicCLI:
    """The LightningCLI (``fit``, ``validate``, ``test``, ``predict``), in process when ``args`` is given."""
    return EpisodicCLI(
        EpisodicModule,
        EpisodicDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        auto_configure_optimizers=False,
        save_config_kwargs={"overwrite": True},
        args=args,
    )

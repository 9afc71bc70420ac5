"""Loading any checkpoint of this library without knowing its algorithm in advance."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import torch

from lightning_episodes.algorithms.base import EpisodicModule


def checkpoint_info(path: str | Path) -> dict[str, Any]:
    """The ``lightning_episodes`` record of a checkpoint: its class path and episode shape.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if the checkpoint was not written by an :class:`EpisodicModule`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    info = checkpoint.get("lightning_episodes")
    if not isinstance(info, dict) or "class_path" not in info:
        raise ValueError(f"{path} is not a lightning-episodes checkpoint (it has no 'lightning_episodes' record)")
    return info


def load_episodic_module(path: str | Path, map_location: str | torch.device = "cpu") -> EpisodicModule:
    """Load the :class:`EpisodicModule` saved in ``path`` through its own concrete class.

    Only classes that subclass :class:`EpisodicModule` are accepted, and tensors load with
    ``weights_only=True``: a checkpoint cannot make this function run arbitrary code.

    The module is as it was trained, its ``channels_last`` layout included (a Trainer applies that in
    ``configure_model``; a module loaded for scoring or as an offline reference has no Trainer to do it).

    Raises:
        ValueError: if the recorded class is not an :class:`EpisodicModule`.
    """
    class_path = checkpoint_info(path)["class_path"]
    module_name, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name, None)
    if not (isinstance(cls, type) and issubclass(cls, EpisodicModule)):
        raise ValueError(f"{path} records {class_path!r}, which is not an EpisodicModule")
    module = cls.load_from_checkpoint(path, map_location=map_location, weights_only=True)
    if module.channels_last:
        module.use_channels_last()
    return module

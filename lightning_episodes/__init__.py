"""lightning-episodes: episodic few-shot learning with uniform sampling over episode difficulty.

The public names below are imported when first used (``from lightning_episodes import ProtoNet``), so that
``import lightning_episodes`` and ``lightning-episodes --help`` do not wait seconds for PyTorch and Lightning.
Importing :mod:`lightning_episodes.algorithms`, :mod:`~lightning_episodes.callbacks` and
:mod:`~lightning_episodes.data` registers every algorithm, callback and dataset (the command line does), so
LightningCLI accepts their short names (``--model MAML``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_episodes._lazy import lazy_exports

if TYPE_CHECKING:
    from lightning_episodes.algorithms import (
        ANIL,
        FEAT,
        MAML,
        EpisodeMeanCI,
        EpisodeOutput,
        EpisodicModule,
        Pretrain,
        ProtoNet,
        load_episodic_module,
    )
    from lightning_episodes.callbacks import DifficultyTrackingCallback, DifficultyWeightingCallback
    from lightning_episodes.data import Episode, EpisodeIdentity, EpisodicDataModule
    from lightning_episodes.inference import Prediction, predict

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(
        ("ANIL", "FEAT", "MAML", "EpisodeMeanCI", "EpisodeOutput", "EpisodicModule", "Pretrain", "ProtoNet"),
        "lightning_episodes.algorithms",
    ),
    "load_episodic_module": "lightning_episodes.algorithms",
    "DifficultyTrackingCallback": "lightning_episodes.callbacks",
    "DifficultyWeightingCallback": "lightning_episodes.callbacks",
    **dict.fromkeys(("Episode", "EpisodeIdentity", "EpisodicDataModule"), "lightning_episodes.data"),
    "Prediction": "lightning_episodes.inference",
    "predict": "lightning_episodes.inference",
}

#: the subpackages and modules, imported on first use as attributes (``lightning_episodes.callbacks``)
_SUBMODULES = frozenset(
    (
        "algorithms",
        "analysis",
        "callbacks",
        "cli",
        "commands",
        "console",
        "data",
        "inference",
        "models",
        "testing",
        "weighting",
    )
)

__all__ = [
    "ANIL",
    "FEAT",
    "MAML",
    "DifficultyTrackingCallback",
    "DifficultyWeightingCallback",
    "Episode",
    "EpisodeIdentity",
    "EpisodeMeanCI",
    "EpisodeOutput",
    "EpisodicDataModule",
    "EpisodicModule",
    "Pretrain",
    "Prediction",
    "ProtoNet",
    "__version__",
    "load_episodic_module",
    "predict",
]


__getattr__, __dir__ = lazy_exports("lightning_episodes", globals(), _EXPORTS, _SUBMODULES)

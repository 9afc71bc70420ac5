"""lightning-episodes: episodic few-shot learning with uniform sampling over episode difficulty.

Importing the package registers every algorithm, callback and dataset, so LightningCLI accepts their
short names (``--model MAML``).
"""

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

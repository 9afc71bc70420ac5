"""Episodic algorithms: subclass :class:`EpisodicModule` and implement ``query_logits`` (or ``episode_losses``); the
maths they share is in :mod:`lightning_episodes.algorithms.functional`."""

from lightning_episodes.algorithms.anil import ANIL
from lightning_episodes.algorithms.base import EpisodeOutput, EpisodicModule, WeightingStrategy
from lightning_episodes.algorithms.feat import FEAT
from lightning_episodes.algorithms.loading import checkpoint_info, load_episodic_module
from lightning_episodes.algorithms.maml import MAML
from lightning_episodes.algorithms.metrics import EpisodeMeanCI, EpisodeScores, ScoredEpisodes
from lightning_episodes.algorithms.pretrain import Pretrain
from lightning_episodes.algorithms.protonet import ProtoNet

__all__ = [
    "ANIL",
    "FEAT",
    "MAML",
    "EpisodeMeanCI",
    "EpisodeOutput",
    "EpisodeScores",
    "EpisodicModule",
    "Pretrain",
    "ProtoNet",
    "ScoredEpisodes",
    "WeightingStrategy",
    "checkpoint_info",
    "load_episodic_module",
]

"""Episodes, the vectorised sampler, task samplers, task interpolation, datasets and the episodic data module."""

from lightning_episodes.data.assembly import EpisodeAssembler
from lightning_episodes.data.augment import RandomShiftFlip
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.data.datasets import ImageDataset, available_datasets, load_dataset, register_dataset
from lightning_episodes.data.dpp import DynamicDPP, StaticDPP
from lightning_episodes.data.episode import Episode, EpisodeIdentity
from lightning_episodes.data.interpolation import TaskInterpolation, cutmix, partner_position
from lightning_episodes.data.sampler import EpisodeSampler, keep_classes, keep_per_class, mix_seed
from lightning_episodes.data.streams import EvaluationEpisodes, TrainingEpisodes, rank_slice
from lightning_episodes.data.task_samplers import (
    AdaptiveTaskSampler,
    HardTaskMining,
    NoDiversityBatch,
    NoDiversityTask,
    NoDiversityTasksPerBatch,
    TaskFeedback,
    TaskSampler,
    describe_task_sampler,
)

__all__ = [
    "AdaptiveTaskSampler",
    "DynamicDPP",
    "Episode",
    "EpisodeAssembler",
    "EpisodeIdentity",
    "EpisodeSampler",
    "EpisodicDataModule",
    "EvaluationEpisodes",
    "HardTaskMining",
    "ImageDataset",
    "NoDiversityBatch",
    "NoDiversityTask",
    "NoDiversityTasksPerBatch",
    "RandomShiftFlip",
    "StaticDPP",
    "TaskFeedback",
    "TaskInterpolation",
    "TaskSampler",
    "describe_task_sampler",
    "TrainingEpisodes",
    "available_datasets",
    "cutmix",
    "keep_classes",
    "keep_per_class",
    "load_dataset",
    "mix_seed",
    "partner_position",
    "rank_slice",
    "register_dataset",
]

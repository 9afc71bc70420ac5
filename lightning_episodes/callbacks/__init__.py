"""Lightning callbacks: importance weighting over episode difficulty, difficulty tracking, checkpoints to resume
from, non-finite steps, test records, preemption and task-sampler feedback; :func:`default_callbacks`, the four that
every command-line run gets."""

from lightning_episodes.callbacks.checkpointing import ResumableCheckpoint
from lightning_episodes.callbacks.defaults import default_callbacks
from lightning_episodes.callbacks.difficulty_tracking import DifficultyTrackingCallback
from lightning_episodes.callbacks.difficulty_weighting import (
    ESTIMATES,
    DifficultyWeightingCallback,
    WeightingOptions,
    WeightingState,
    WeightingStep,
)
from lightning_episodes.callbacks.nonfinite import NonFiniteError, NonFiniteGuard
from lightning_episodes.callbacks.preemption import PreemptionHandler
from lightning_episodes.callbacks.results import TestResultsWriter
from lightning_episodes.callbacks.task_sampling import TaskSamplerFeedback

__all__ = [
    "ESTIMATES",
    "DifficultyTrackingCallback",
    "DifficultyWeightingCallback",
    "NonFiniteError",
    "NonFiniteGuard",
    "PreemptionHandler",
    "ResumableCheckpoint",
    "TaskSamplerFeedback",
    "TestResultsWriter",
    "WeightingOptions",
    "WeightingState",
    "WeightingStep",
    "default_callbacks",
]

"""Lightning callbacks: importance weighting over episode difficulty, and difficulty tracking."""

from lightning_episodes.callbacks.difficulty_tracking import DifficultyTrackingCallback
from lightning_episodes.callbacks.difficulty_weighting import ESTIMATES, DifficultyWeightingCallback, WeightingStep
from lightning_episodes.weighting import NORMALIZATIONS, PROPOSALS

__all__ = [
    "ESTIMATES",
    "NORMALIZATIONS",
    "PROPOSALS",
    "DifficultyTrackingCallback",
    "DifficultyWeightingCallback",
    "WeightingStep",
]

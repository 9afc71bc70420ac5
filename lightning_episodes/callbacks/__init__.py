"""Lightning callbacks: importance weighting over episode difficulty, and difficulty tracking."""

from lightning_episodes.callbacks.difficulty_tracking import DifficultyTrackingCallback
from lightning_episodes.callbacks.difficulty_weighting import PROPOSALS, DifficultyWeightingCallback, WeightingStep

__all__ = ["PROPOSALS", "DifficultyTrackingCallback", "DifficultyWeightingCallback", "WeightingStep"]

"""Importance weighting over episode difficulty: pure tensor maths, no Lightning.

Implements the weighting of "Uniform Sampling over Episode Difficulty" (Arnold et al., NeurIPS 2021):
an online estimate of the difficulty distribution (:class:`DifficultyEstimator`), target distributions
over difficulty (:class:`Target` and its registry), importance weights (:func:`importance_weights`) and
the ESS-normalised loss of Algorithm 1 / Eq. 3 (:func:`weighted_loss`, :func:`ess_weighted_loss`).
"""

from lightning_episodes.weighting.estimator import UPDATES, DifficultyEstimator, difficulty_statistics
from lightning_episodes.weighting.loss import (
    NORMALIZATIONS,
    WeightedLoss,
    effective_sample_size,
    ess_weighted_loss,
    weighted_loss,
)
from lightning_episodes.weighting.targets import (
    BaselineTarget,
    CurriculumTarget,
    EasyTarget,
    HardTarget,
    Target,
    UniformTarget,
    available_targets,
    get_target,
    register_target,
    standard_normal_mass,
)
from lightning_episodes.weighting.weights import (
    DEFAULT_SUPPORT_SIGMAS,
    OUT_OF_SUPPORT,
    SIGMA_FLOOR,
    curriculum_progress,
    fraction_outside_support,
    importance_weights,
    support_interval,
)

__all__ = [
    "DEFAULT_SUPPORT_SIGMAS",
    "NORMALIZATIONS",
    "OUT_OF_SUPPORT",
    "SIGMA_FLOOR",
    "UPDATES",
    "BaselineTarget",
    "CurriculumTarget",
    "DifficultyEstimator",
    "EasyTarget",
    "HardTarget",
    "Target",
    "UniformTarget",
    "WeightedLoss",
    "available_targets",
    "curriculum_progress",
    "difficulty_statistics",
    "effective_sample_size",
    "ess_weighted_loss",
    "fraction_outside_support",
    "get_target",
    "importance_weights",
    "register_target",
    "standard_normal_mass",
    "support_interval",
    "weighted_loss",
]

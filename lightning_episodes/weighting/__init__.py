"""Importance weighting over episode difficulty: pure tensor maths, no Lightning.

Implements the weighting of "Uniform Sampling over Episode Difficulty" (Arnold et al., NeurIPS 2021) and the
robust variants of ``docs/method.md``: proposal models of the difficulty distribution (:class:`Proposal`:
normal as in the paper, log-normal, empirical), target distributions over difficulty (:class:`Target` and its
registry), importance weights (:func:`importance_weights`, :func:`density_ratio_weights`), normalisers of the
step's loss scale (:class:`Normalizer`), the ESS-normalised loss of Algorithm 1 / Eq. 3
(:func:`weighted_loss`, :func:`ess_weighted_loss`), diagnostics of the weights (:func:`pareto_k`) and the
selection of a step's episodes from a pool of candidates by their weights (:func:`select_candidates`).
"""

from lightning_episodes.weighting.diagnostics import (
    MISFIT_MARGIN,
    WeightingDiagnostics,
    better_proposal,
    gpd_fit,
    gpd_quantile,
    heldout_log_likelihood,
    normality_p,
    pareto_k,
    skewness,
)
from lightning_episodes.weighting.estimator import UPDATES, DifficultyEstimator, difficulty_statistics
from lightning_episodes.weighting.loss import (
    LOSS_NORMALIZATIONS,
    EpisodeWeights,
    LossNormalization,
    WeightedLoss,
    effective_sample_size,
    ess_weighted_loss,
    weighted_loss,
)
from lightning_episodes.weighting.normalizers import (
    NORMALIZATIONS,
    Normalizer,
    ParetoSmoothedNormalizer,
    RunningNormalizer,
    TruncatedNormalizer,
    make_normalizer,
    pareto_smooth,
    truncate_weights,
)
from lightning_episodes.weighting.proposals import (
    PROPOSALS,
    EmpiricalProposal,
    LogNormalProposal,
    NormalProposal,
    Proposal,
    kde_bandwidth,
    kde_log_density,
    kde_quantiles,
    make_proposal,
)
from lightning_episodes.weighting.resampling import (
    inclusion_probabilities,
    select_candidates,
    selection_generator,
    standardize,
    systematic_resample,
    target_cdf,
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
    density_ratio_weights,
    fraction_outside_support,
    importance_weights,
    support_interval,
)

__all__ = [
    "DEFAULT_SUPPORT_SIGMAS",
    "LOSS_NORMALIZATIONS",
    "MISFIT_MARGIN",
    "NORMALIZATIONS",
    "OUT_OF_SUPPORT",
    "PROPOSALS",
    "SIGMA_FLOOR",
    "UPDATES",
    "BaselineTarget",
    "CurriculumTarget",
    "DifficultyEstimator",
    "EasyTarget",
    "EmpiricalProposal",
    "EpisodeWeights",
    "HardTarget",
    "LogNormalProposal",
    "LossNormalization",
    "NormalProposal",
    "Normalizer",
    "ParetoSmoothedNormalizer",
    "Proposal",
    "RunningNormalizer",
    "Target",
    "TruncatedNormalizer",
    "UniformTarget",
    "WeightedLoss",
    "WeightingDiagnostics",
    "available_targets",
    "better_proposal",
    "curriculum_progress",
    "density_ratio_weights",
    "difficulty_statistics",
    "effective_sample_size",
    "ess_weighted_loss",
    "fraction_outside_support",
    "get_target",
    "gpd_fit",
    "gpd_quantile",
    "heldout_log_likelihood",
    "importance_weights",
    "inclusion_probabilities",
    "kde_bandwidth",
    "kde_log_density",
    "kde_quantiles",
    "make_normalizer",
    "make_proposal",
    "normality_p",
    "pareto_k",
    "pareto_smooth",
    "register_target",
    "select_candidates",
    "selection_generator",
    "skewness",
    "standard_normal_mass",
    "standardize",
    "support_interval",
    "systematic_resample",
    "target_cdf",
    "truncate_weights",
    "weighted_loss",
]

"""Episode-difficulty analyses of "Uniform Sampling over Episode Difficulty" (NeurIPS 2021, §4.2).

Pure functions on numpy arrays or torch tensors:

- normality: is difficulty normal? :func:`shapiro_rejection_rate` (the paper's 50 x 100 subsampled
  Shapiro-Wilk protocol), :func:`fit_normal`, :func:`plot_density`, :func:`plot_qq`;
- transfer: does difficulty agree across models? :func:`rank_correlation` (Spearman),
  :func:`plot_transfer`, aligned by episode with :func:`join_on_episode`;
- training time: do easy and hard episodes stay apart? :func:`extreme_episodes`,
  :func:`lines_cross`, :func:`plot_trajectories`;
- per-episode difficulty tables saved as CSV: :class:`DifficultyTable`, :class:`EpisodeRecord` (defined in
  :mod:`lightning_episodes.evaluation`, which scores the episodes);
- sampling schemes compared on the shared test episodes: :func:`paired_difference` (paired per-episode
  accuracy difference with its interval), :class:`PairedDifference`.
"""

from lightning_episodes.analysis.correlation import RankCorrelation, rank_correlation
from lightning_episodes.analysis.normality import NormalFit, ShapiroResult, fit_normal, shapiro_rejection_rate
from lightning_episodes.analysis.paired import PairedDifference, paired_difference
from lightning_episodes.analysis.plots import plot_density, plot_qq, plot_trajectories, plot_transfer
from lightning_episodes.analysis.trajectories import (
    CrossingReport,
    ExtremeEpisodes,
    extreme_episodes,
    lines_cross,
)
from lightning_episodes.evaluation.tables import DifficultyTable, EpisodeRecord, JoinedDifficulties, join_on_episode

__all__ = [
    "CrossingReport",
    "DifficultyTable",
    "EpisodeRecord",
    "ExtremeEpisodes",
    "JoinedDifficulties",
    "NormalFit",
    "PairedDifference",
    "RankCorrelation",
    "ShapiroResult",
    "extreme_episodes",
    "fit_normal",
    "join_on_episode",
    "lines_cross",
    "paired_difference",
    "plot_density",
    "plot_qq",
    "plot_trajectories",
    "plot_transfer",
    "rank_correlation",
    "shapiro_rejection_rate",
]

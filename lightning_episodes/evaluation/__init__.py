"""Evaluation of trained models (between the algorithms and the callbacks, commands and analyses that use it):

- scoring fixed episodes: :func:`score_episodes` (one difficulty and accuracy per episode, §4.2), the episodes
  themselves (:func:`scoring_episodes`, :func:`scoring_identities`), a checkpoint's data
  (:func:`checkpoint_datamodule`);
- the per-episode table, saved as CSV: :class:`DifficultyTable`, :class:`EpisodeRecord`, aligned by episode with
  :func:`join_on_episode`;
- the record of a test run (:mod:`lightning_episodes.evaluation.record`): its files (:data:`RESULTS_FILE`,
  :data:`SCORES_FILE`, :data:`CONFIG_FILE`) and fields (:func:`results_record`).

It imports the algorithms, models and data, and nothing from the callbacks, analyses or command line.
"""

from lightning_episodes.evaluation.record import CONFIG_FILE, RESULTS_FILE, SCORES_FILE, results_record, scores_table
from lightning_episodes.evaluation.scoring import (
    Split,
    checkpoint_datamodule,
    evaluation_mode,
    score_batches,
    score_episodes,
    scoring_episodes,
    scoring_identities,
)
from lightning_episodes.evaluation.tables import DifficultyTable, EpisodeRecord, JoinedDifficulties, join_on_episode

__all__ = [
    "CONFIG_FILE",
    "RESULTS_FILE",
    "SCORES_FILE",
    "DifficultyTable",
    "EpisodeRecord",
    "JoinedDifficulties",
    "Split",
    "checkpoint_datamodule",
    "evaluation_mode",
    "join_on_episode",
    "results_record",
    "score_batches",
    "score_episodes",
    "scores_table",
    "scoring_episodes",
    "scoring_identities",
]

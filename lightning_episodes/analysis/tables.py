"""Moved to :mod:`lightning_episodes.evaluation.tables`; this module keeps imports written before working."""

from lightning_episodes.evaluation.tables import (
    COLUMNS,
    DifficultyTable,
    EpisodeRecord,
    JoinedDifficulties,
    join_on_episode,
)

__all__ = ["COLUMNS", "DifficultyTable", "EpisodeRecord", "JoinedDifficulties", "join_on_episode"]

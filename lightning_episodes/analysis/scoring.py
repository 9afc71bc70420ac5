"""Moved to :mod:`lightning_episodes.evaluation.scoring`; this module keeps imports written before working."""

from lightning_episodes.evaluation.scoring import (
    Split,
    checkpoint_datamodule,
    evaluation_mode,
    score_batches,
    score_episodes,
    scoring_episodes,
    scoring_identities,
)

__all__ = [
    "Split",
    "checkpoint_datamodule",
    "evaluation_mode",
    "score_batches",
    "score_episodes",
    "scoring_episodes",
    "scoring_identities",
]

"""Moved to :mod:`lightning_episodes.evaluation.scoring`; this module keeps imports written before working."""

from lightning_episodes.evaluation.scoring import *  # noqa: F403
from lightning_episodes.evaluation.scoring import __all__ as __all__

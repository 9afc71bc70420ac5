"""Moved to :mod:`lightning_episodes.evaluation.tables`; this module keeps imports written before working."""

from lightning_episodes.evaluation.tables import *  # noqa: F403
from lightning_episodes.evaluation.tables import __all__ as __all__

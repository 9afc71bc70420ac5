"""Shared fixtures: the tiny registered dataset of :mod:`lightning_episodes.testing.tiny`, whose pixels encode their own
row index."""

from __future__ import annotations

import pytest
import torch

from lightning_episodes.data.datasets import ImageDataset
from lightning_episodes.testing import register_tiny_dataset, tiny_dataset

# Tests run many small models side by side on 2 cores: a second OpenMP thread makes tiny forwards
# 10x slower under contention, and 2-process DDP tests would oversubscribe the cores.
torch.set_num_threads(1)

# the command-line tests name it (--data.dataset tiny) without building a data module first
register_tiny_dataset()


@pytest.fixture
def tiny() -> ImageDataset:
    return tiny_dataset()

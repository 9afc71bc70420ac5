"""The contract every algorithm keeps, checked by :func:`lightning_episodes.testing.check_algorithm` (the idea of
torchmetrics' ``MetricTester``).

A row of :data:`ROWS` is an algorithm with the options that make it small; a new algorithm gets every check by adding
its row, one test per row and property (a property's cases, such as each bad argument or each ``eval_batch_norm``
mode, are one test). The algorithms' own files test their maths.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lightning_episodes.algorithms import ANIL, FEAT, MAML, Pretrain, ProtoNet
from lightning_episodes.testing import ALGORITHM_CHECKS, AlgorithmSpec, check_algorithm, contract_params
from lightning_episodes.testing.algorithms import signature_defaults
from tests.algorithms.builders import HIDDEN
from tests.algorithms.example_algorithm import NearestNeighbour

# a training "episode" of all 12 training classes × 2 images is a class-balanced batch of 24
PRETRAINING = {"ways": 12, "shots": 1, "queries": 1, "eval_ways": 5, "eval_shots": 1, "eval_queries": 3}

ROWS = [
    AlgorithmSpec(
        ProtoNet,
        bad_configs=(
            ({"distance": "manhattan"}, r"model.distance must be 'euclidean' or 'cosine', got 'manhattan'"),
            ({"cosine_scale": 0.0}, r"model.cosine_scale must be > 0, got 0.0"),
        ),
    ),
    AlgorithmSpec(ProtoNet, {"distance": "cosine"}, name="ProtoNet-cosine"),
    AlgorithmSpec(
        MAML,
        {"backbone_options": {"hidden": HIDDEN}, "adaptation_steps": 2, "first_order": True},
        bad_configs=(
            ({"adaptation_steps": 0}, r"model.adaptation_steps must be >= 1, got 0"),
            ({"eval_adaptation_steps": 0}, r"model.eval_adaptation_steps must be >= 1, got 0"),
            ({"adaptation_lr": -0.1}, r"model.adaptation_lr must be > 0, got -0.1"),
            ({"ways": 1}, r"model.ways must be >= 2, got 1"),
            ({"eval_batch_norm": "running"}, r"model.eval_batch_norm='running' needs running statistics"),
            ({"compile_backbone": True}, r"model.compile_backbone=true does not speed up MAML"),
        ),
        eval_batch_norms=("episode",),
    ),
    AlgorithmSpec(
        ANIL,
        {"backbone_options": {"hidden": HIDDEN}, "adaptation_steps": 2, "eval_adaptation_steps": 3},
        bad_configs=(
            ({"adaptation_steps": 0}, r"model.adaptation_steps must be >= 1, got 0"),
            ({"adaptation_lr": -1.0}, r"model.adaptation_lr must be > 0, got -1.0"),
        ),
        eval_batch_norms=("episode",),
    ),
    AlgorithmSpec(
        FEAT,
        {"backbone": "conv4", "temperature": 4.0, "balance": 0.1},
        bad_configs=(
            ({"temperature": 0.0}, r"model.temperature must be > 0, got 0.0"),
            ({"temperature2": -1.0}, r"model.temperature2 must be > 0, got -1.0"),
            ({"balance": -0.1}, r"model.balance must be >= 0, got -0.1"),
            ({"lr_multiplier": 0.0}, r"model.lr_multiplier must be > 0, got 0.0"),
            ({"dropout": 1.0}, r"model.dropout must be in \[0, 1\), got 1.0"),
        ),
        deterministic_training=False,  # dropout
    ),
    AlgorithmSpec(
        Pretrain,
        {"backbone": "conv4"},
        bad_configs=(({"num_classes": 0}, r"model.num_classes must be > 0, got 0"),),
        data=PRETRAINING,
    ),
    # the example of the guide "Your own algorithm": its one row
    AlgorithmSpec(NearestNeighbour, bad_configs=(({"temperature": 0.0}, r"model.temperature must be > 0, got 0.0"),)),
]


@pytest.mark.parametrize(("row", "check"), contract_params(ROWS, ALGORITHM_CHECKS))
def test_the_algorithm_keeps_the_contract(row: AlgorithmSpec, check: str) -> None:
    check_algorithm(row, checks=[check])


def test_help_shows_the_defaults_that_subclasses_change() -> None:
    defaults = {cls: signature_defaults(cls) for cls in (MAML, ANIL, FEAT, Pretrain)}
    assert (defaults[MAML]["adaptation_lr"], defaults[ANIL]["adaptation_lr"]) == (0.01, 0.1)
    assert defaults[ANIL]["eval_batch_norm"] == defaults[MAML]["eval_batch_norm"] == "episode"
    assert defaults[FEAT]["backbone"] == defaults[Pretrain]["backbone"] == "resnet12-wide"
    assert signature_defaults(ProtoNet)["eval_batch_norm"] == "running"


def test_the_guide_shows_the_example_algorithm() -> None:
    """The guide "Your own algorithm" shows ``example_algorithm.py`` (a row of :data:`ROWS`) as it is."""
    root = Path(__file__).resolve().parents[2]
    blocks = re.findall(r"```python\n(.*?)```", (root / "docs/guides/own-algorithm.md").read_text(), flags=re.DOTALL)
    assert (root / "tests/algorithms/example_algorithm.py").read_text() in blocks
    assert any(row.cls is NearestNeighbour for row in ROWS)

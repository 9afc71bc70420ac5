"""The weighted training gives the same numbers, bit for bit, as before the step-overhead work (issue 15).

A 30-step fit per weighting arm (normal and log-normal proposals; ess, running, psis and truncated normalisations;
the placebo; the curriculum with batch updates) ends with parameters and buffers whose SHA-256 equals that of
commit f87cd05, before the weighting callback was split and the guard fused. Bit equality holds only on the same
torch build and CPU kernels, so the test is skipped elsewhere (regenerate the digests there with ``_digest``
on the old commit). The empirical proposal is left out: its support's quantiles moved from bisection to Newton's
method, equal to scipy's KDE at float64 noise (``tests/weighting/test_proposals.py``), not bit for bit.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from lightning_episodes import ProtoNet
from lightning_episodes.callbacks import DifficultyWeightingCallback
from tests.helpers import tiny_datamodule, tiny_trainer

#: where the digests were computed (commit f87cd05)
PLATFORM = ("2.14.1+cu130", "AVX512")

#: options of each arm, and the SHA-256 of its final state_dict at commit f87cd05
ARMS: dict[str, tuple[dict[str, Any], str]] = {
    "uniform/normal/ess": ({}, "658ec2848146818e75c7c606bea2433707b8331a9fdbc0de7fb3eb2e3d690075"),
    "hard/lognormal/running": (
        {"target": "hard", "proposal": "lognormal", "normalization": "running"},
        "02e9b4db82b756f31c61f98d5801221203c1e9535e08370288c457049b864e1d",
    ),
    "uniform/normal/psis/placebo": (
        {"normalization": "psis", "shuffle_weights": True, "window": 20},
        "97c885f6d54ebe9bca2538689d4495d0554afd6a36a897b208d095271f20f204",
    ),
    "curriculum/normal/truncated": (
        {"target": "curriculum", "normalization": "truncated", "update": "batch"},
        "cccc8e9c35129d9dec9e6d59eef5d152cd8c4cb058011fbbf8c754a37a3ab7ee",
    ),
}


def _digest(options: dict[str, Any]) -> str:
    """SHA-256 of the state_dict after 30 weighted steps (warm-up 5) of a small ProtoNet on the tiny data."""
    pl.seed_everything(0)
    model = ProtoNet(image_size=16, backbone_options={"hidden": 8})
    callback = DifficultyWeightingCallback(warmup_steps=5, **options)
    tiny_trainer(max_steps=30, limit_val_batches=0, callbacks=[callback]).fit(model, tiny_datamodule())
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.slow
@pytest.mark.skipif(
    (torch.__version__, torch.backends.cpu.get_cpu_capability()) != PLATFORM,
    reason=f"the digests are of torch {PLATFORM[0]} on {PLATFORM[1]} CPU kernels",
)
@pytest.mark.parametrize("arm", list(ARMS))
def test_a_30_step_fit_ends_with_the_same_parameters_as_before(arm: str) -> None:
    options, expected = ARMS[arm]
    assert _digest(options) == expected, f"{arm}: the final parameters differ from commit f87cd05's"

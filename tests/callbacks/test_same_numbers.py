"""The weighted training gives the same numbers, bit for bit, as before the step-overhead work (issue 15).

A 30-step fit per weighting arm (normal and log-normal proposals; ess, running, psis and truncated normalisations;
the placebo; the curriculum with batch updates) ends with parameters and buffers whose SHA-256 equals that of
commit f87cd05, before the weighting callback was split and the guard fused. Bit equality holds only on the same
torch build and CPU kernels, and an AMD CPU gives other bits than an Intel one with the same instruction set, so
the digests are kept per platform (torch build, CPU capability, CPU vendor), each computed with ``_digest`` at
commit f87cd05 on that platform, and the test is skipped on any other. The empirical proposal is left out: its
support's quantiles moved from bisection to Newton's method, equal to scipy's KDE at float64 noise
(``tests/weighting/test_proposals.py``), not bit for bit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from lightning_episodes import ProtoNet
from lightning_episodes.callbacks import DifficultyWeightingCallback
from tests.helpers import tiny_datamodule, tiny_trainer

#: options of each arm
ARMS: dict[str, dict[str, Any]] = {
    "uniform/normal/ess": {},
    "hard/lognormal/running": {"target": "hard", "proposal": "lognormal", "normalization": "running"},
    "uniform/normal/psis/placebo": {"normalization": "psis", "shuffle_weights": True, "window": 20},
    "curriculum/normal/truncated": {"target": "curriculum", "normalization": "truncated", "update": "batch"},
}

#: per platform (torch build, CPU capability, CPU vendor), the SHA-256 of each arm's final state_dict at commit f87cd05
DIGESTS: dict[tuple[str, str, str], dict[str, str]] = {
    # the machine of commit f87cd05 itself (its vendor inferred: the code of then gives other bits on AMD, below)
    ("2.14.1+cu130", "AVX512", "GenuineIntel"): {
        "uniform/normal/ess": "658ec2848146818e75c7c606bea2433707b8331a9fdbc0de7fb3eb2e3d690075",
        "hard/lognormal/running": "02e9b4db82b756f31c61f98d5801221203c1e9535e08370288c457049b864e1d",
        "uniform/normal/psis/placebo": "97c885f6d54ebe9bca2538689d4495d0554afd6a36a897b208d095271f20f204",
        "curriculum/normal/truncated": "cccc8e9c35129d9dec9e6d59eef5d152cd8c4cb058011fbbf8c754a37a3ab7ee",
    },
    # f87cd05 checked out on an AMD EPYC machine (2026-11-28); the code of then and of now agree there
    ("2.14.1+cu130", "AVX512", "AuthenticAMD"): {
        "uniform/normal/ess": "cc26c6864e205cac66f920e45a9313c1ce38fdb43a4a6cefca2845840253e822",
        "hard/lognormal/running": "8f030774f4fb2e584bcb56bc8a710914934bb7ca458267f7ffd97832b618a3b6",
        "uniform/normal/psis/placebo": "a0b40b5fed331ebb4ae3f32afcebbfa13f8812e0c17a5d00c03d86f11a9eaf19",
        "curriculum/normal/truncated": "25e424476e12ea1e98c0d5fc569a858fa940968f90bcb831e8e125e482ca0a66",
    },
}


def _cpu_vendor() -> str:
    """The CPU's vendor as Linux names it (``GenuineIntel``, ``AuthenticAMD``), or ``""`` where it is not known."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


PLATFORM = (torch.__version__, torch.backends.cpu.get_cpu_capability(), _cpu_vendor())


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
@pytest.mark.skipif(PLATFORM not in DIGESTS, reason=f"no digests of f87cd05 for torch {PLATFORM[0]} on {PLATFORM[1:]}")
@pytest.mark.parametrize("arm", list(ARMS))
def test_a_30_step_fit_ends_with_the_same_parameters_as_before(arm: str) -> None:
    assert _digest(ARMS[arm]) == DIGESTS[PLATFORM][arm], f"{arm}: the final parameters differ from commit f87cd05's"

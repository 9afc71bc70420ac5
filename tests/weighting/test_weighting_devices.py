"""The weighting maths gives the CPU's numbers on an accelerator (skipped where there is none)."""

from __future__ import annotations

import pytest
import torch

from lightning_episodes.weighting import (
    DifficultyEstimator,
    available_targets,
    effective_sample_size,
    fraction_outside_support,
    importance_weights,
    weighted_loss,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("target", available_targets())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_matches_cpu(target: str, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    difficulties = 1.0 + 0.5 * torch.randn(32, generator=gen, dtype=dtype)
    difficulties[3] = float("nan")
    cpu = importance_weights(difficulties, 1.0, 0.5, target, progress=0.3)
    cuda = importance_weights(difficulties.cuda(), 1.0, 0.5, target, progress=0.3)
    assert cuda.device.type == "cuda"
    assert cuda.dtype == dtype
    torch.testing.assert_close(cuda.cpu(), cpu)
    torch.testing.assert_close(effective_sample_size(cuda).cpu(), effective_sample_size(cpu))
    torch.testing.assert_close(
        fraction_outside_support(difficulties.cuda(), 1.0, 0.5).cpu(),
        fraction_outside_support(difficulties, 1.0, 0.5),
    )

    losses_cpu = difficulties.clone().requires_grad_(True)
    losses_cuda = difficulties.cuda().requires_grad_(True)
    out_cpu = weighted_loss(losses_cpu, cpu)
    out_cuda = weighted_loss(losses_cuda, cuda, reduce=lambda t: t, world_size=1)
    assert out_cuda.loss.device.type == "cuda"
    assert out_cuda.nonfinite == out_cpu.nonfinite == 1
    torch.testing.assert_close(out_cuda.loss.cpu(), out_cpu.loss)
    out_cpu.loss.backward()
    out_cuda.loss.backward()
    assert losses_cuda.grad is not None
    assert losses_cpu.grad is not None
    torch.testing.assert_close(losses_cuda.grad.cpu(), losses_cpu.grad)

    estimator_cpu, estimator_cuda = DifficultyEstimator(warmup_steps=2), DifficultyEstimator(warmup_steps=2)
    for _ in range(3):
        estimator_cpu.update(difficulties)
        estimator_cuda.update(difficulties.cuda())
    assert estimator_cuda.state_dict() == estimator_cpu.state_dict()

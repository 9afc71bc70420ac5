"""The per-step work of :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback`, apart from its hooks.

:func:`global_weights` turns the step's gathered difficulties into the global batch's weights (``p / q``, shuffled
for the placebo, normalised), on the device and without a host read; :func:`read_record` is the step's one read
from the device afterwards: its record and the loss's counters in one transfer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_episodes.callbacks._weighting_logs import WeightingStep
from lightning_episodes.weighting import EpisodeWeights, Normalizer, Proposal, Target
from lightning_episodes.weighting.loss import stat_dtype

__all__ = ["global_weights", "placebo_permutation", "read_record"]


def placebo_permutation(seed: int, step: int, size: int, device: torch.device) -> Tensor:
    """The placebo's permutation of a step's ``size`` weights: the same on every rank, from ``seed`` and ``step``.

    ``numpy.random.SeedSequence([seed, step])`` mixes both into the 32 bits that torch's CPU generator keeps (it
    drops a seed's upper bits); drawn on the CPU, it reaches ``device`` without a synchronisation (non-blocking).
    """
    state = np.random.SeedSequence([seed, step]).generate_state(1)[0]
    generator = torch.Generator().manual_seed(int(state))
    return torch.randperm(size, generator=generator).to(device, non_blocking=True)


def global_weights(
    everything: Tensor,
    proposal: Proposal,
    target: Target,
    normalizer: Normalizer,
    out_of_support: str,
    progress: float | None,
    placebo_seed: int | None,
    step: int,
) -> tuple[Tensor, EpisodeWeights]:
    """The global batch's raw weights ``p / q`` and the normalised (for the placebo: shuffled) weights of the loss.

    Args:
        everything: the step's difficulties over the global batch, in rank order.
        proposal: ``q`` as it stands before the step (every weight 1 while not ready: the warm-up).
        target: ``p``.
        normalizer: turns the weights into the loss's normalisation.
        out_of_support: ``"zero"`` or ``"clamp"``.
        progress: ``t / T`` (``None`` without ``max_steps``).
        placebo_seed: the placebo's seed (``None``: no shuffling).
        step: the global step (seeds the placebo's permutation).

    Returns:
        ``(raw, normalised)``, on ``everything``'s device, computed without a host read.
    """
    warmup = not proposal.ready
    raw = torch.ones_like(everything) if warmup else proposal.weights(everything, target, out_of_support, progress)
    shuffled = raw
    if placebo_seed is not None and not warmup:
        shuffled = raw[placebo_permutation(placebo_seed, step, raw.numel(), raw.device)]
    return raw, normalizer.normalize(shuffled)


def read_record(pending: WeightingStep, weighted: Any) -> tuple[WeightingStep, int, int]:
    """The step's record on the host (float64 on the CPU) and the loss's ``skipped`` and ``nonfinite`` counters.

    The step's one read from the device: the difficulties, the weights, the raw weights and both counters are
    concatenated on the device (the counters in float64, or float32 on MPS, which has no float64: the concatenation
    promotes every part to it) and moved in a single transfer.
    """
    assert pending.raw_weights is not None
    device = pending.difficulties.device  # resampling's record is on the CPU already
    counters = torch.stack([weighted.skipped, weighted.nonfinite]).to(device, stat_dtype(device))
    parts = (pending.difficulties, pending.weights, pending.raw_weights, counters)
    host = torch.cat(parts).to("cpu", torch.float64)
    difficulties, weights, raw, counts = host.split([p.numel() for p in parts])
    skipped, nonfinite = (int(v) for v in counts.tolist())
    return pending._replace(difficulties=difficulties, weights=weights, raw_weights=raw), skipped, nonfinite

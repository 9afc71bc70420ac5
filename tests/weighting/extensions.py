"""A test-only target, proposal and normaliser, each written as a researcher writes one in a file of their own.

The contract harnesses (``test_target_contract.py``, ``test_proposal_contract.py``, ``test_normalizer_contract.py``)
register them with :func:`registered` beside the built-in ones and give each one row: that a new target, proposal or
normaliser is its file plus one row is checked by these three. They are registered only inside those tests (and
the registries restored afterwards), so that the misfit check and the other tests see the library's own entries.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from lightning_episodes.weighting import (
    EpisodeWeights,
    MomentProposal,
    Normalizer,
    Target,
    register_normalizer,
    register_proposal,
    register_target,
)
from lightning_episodes.weighting.normalizers import NORMALIZER_REGISTRY
from lightning_episodes.weighting.proposals import PROPOSAL_REGISTRY
from lightning_episodes.weighting.targets import _REGISTRY as TARGET_REGISTRY

#: the dotted names (built-in names never contain a dot, so these can never collide with a later built-in)
TARGET, PROPOSAL, NORMALIZER = "tests.triangular", "tests.gumbel", "tests.batch"

_EULER_GAMMA = 0.5772156649015329


class Triangular(Target):
    """Density rising linearly from 0 at the easiest end of S; unnormalised (the library renormalises it)."""

    def density(self, z: Tensor, support_sigmas: float, progress: float | None) -> Tensor:
        return z + support_sigmas


class GumbelProposal(MomentProposal):
    """``q = Gumbel(m, b)`` matched to the difficulties' mean ``mu`` and standard deviation ``sigma``:
    ``b = sigma sqrt(6) / pi``, ``m = mu - gamma b`` (right-skewed, like losses)."""

    def _parameters(self) -> tuple[float, float]:
        b = self.scale * math.sqrt(6.0) / math.pi
        return self.location - _EULER_GAMMA * b, b

    def log_density(self, x: Tensor) -> Tensor:
        m, b = self._parameters()
        z = (x - m) / b
        return -(z + torch.exp(-z)) - math.log(b)

    def support(self) -> tuple[float, float]:
        m, b = self._parameters()
        mass = math.erf(self.support_sigmas / math.sqrt(2.0))
        return m - b * math.log(-math.log(0.5 - 0.5 * mass)), m - b * math.log(-math.log(0.5 + 0.5 * mass))


class BatchNormalizer(Normalizer):
    """``sum w L / |B|``: the plain importance-sampling estimate, no state."""

    def normalize(self, weights: Tensor) -> EpisodeWeights:
        return EpisodeWeights(weights, "denominator", weights.new_tensor(float(weights.numel())))


@contextmanager
def registered() -> Iterator[None]:
    """The registries hold the built-in entries and these three, under their dotted names, for the duration (whatever
    else an earlier test or doctest registered is set aside), and are restored afterwards."""
    registries = (TARGET_REGISTRY, PROPOSAL_REGISTRY, NORMALIZER_REGISTRY)
    saved = [dict(registry._entries) for registry in registries]
    for registry, entries in zip(registries, saved, strict=True):
        registry._entries = {name: entry for name, entry in entries.items() if name in registry.order}
    register_target(TARGET, Triangular)
    register_proposal(PROPOSAL, GumbelProposal)
    register_normalizer(NORMALIZER, BatchNormalizer)
    try:
        yield
    finally:
        for registry, entries in zip(registries, saved, strict=True):
            registry._entries = entries

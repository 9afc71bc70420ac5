"""How a step's importance weights become its loss scale: the paper's ESS and four tail-robust alternatives.

Each normaliser maps the step's *global* weights (every rank holds the same ordered vector, so every rank gets
the same result) to an :class:`~lightning_episodes.weighting.EpisodeWeights` for
:func:`~lightning_episodes.weighting.weighted_loss` (see ``docs/method.md``, "Normalisation"):

- ``ess``: ``sum w L / ESS`` (Algorithm 1, Eq. 3; the default);
- ``self``: ``sum w L / sum w`` (self-normalised importance sampling);
- ``truncated``: weights capped at ``mean(w) sqrt(|B|)`` (Ionides, JCGS 2008), then self-normalised;
- ``psis``: the largest weights replaced by quantiles of a generalised Pareto fitted to the tail of the last
  ``window`` weights (Vehtari et al., JMLR 2024), then self-normalised;
- ``running``: ``sum w L / D`` with ``D`` an exponential moving average of the global ``sum w``;
- ``scale``: the study's scale-only arm, ``(sum w / ESS) mean(L)``: the step's loss scaled by the factor the paper's
  normalisation gives these weights, with every episode weighted 1 (no aim, no spread).

:meth:`Normalizer.normalize` reads the state without changing it; :meth:`Normalizer.update` commits the step.
:func:`register_normalizer` adds one under a name that configs can use.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Final, overload

import numpy as np
import torch
from torch import Tensor

from lightning_episodes.weighting.diagnostics import gpd_fit, gpd_quantile, tail_size
from lightning_episodes.weighting.loss import EpisodeWeights, stat_dtype
from lightning_episodes.weighting.registry import Component, Registry, subclass_of

__all__ = [
    "NORMALIZER_OPTIONS",
    "ESSNormalizer",
    "Normalizer",
    "ParetoSmoothedNormalizer",
    "RunningNormalizer",
    "ScaleOnlyNormalizer",
    "SelfNormalizer",
    "TruncatedNormalizer",
    "available_normalizers",
    "make_normalizer",
    "pareto_smooth",
    "register_normalizer",
    "truncate_weights",
]

#: The weighting callback's options a normaliser it names is built with (see :meth:`~Component.from_options`).
NORMALIZER_OPTIONS: Final[tuple[str, ...]] = ("window", "running_decay")


def truncate_weights(weights: Tensor) -> Tensor:
    """Truncated importance weights (Ionides 2008): ``min(w, mean(w) sqrt(n))`` over the ``n`` weights given.

    Example::

        >>> truncate_weights(torch.tensor([0.0, 0.0, 0.0, 8.0])).tolist()  # cap = 2 * sqrt(4) = 4
        [0.0, 0.0, 0.0, 4.0]
    """
    cap = weights.mean() * math.sqrt(weights.numel())
    return torch.minimum(weights, cap)


def pareto_smooth(weights: Tensor, reference: Tensor) -> tuple[Tensor, float]:
    """Pareto-smoothed weights: the step's tail weights mapped through a GPD fitted to a window's tail.

    PSIS (Vehtari et al. 2024) fits a generalised Pareto to the ``M = ceil(min(0.2 n, 3 sqrt(n)))`` largest of
    ``n`` weights (exceedances of the threshold ``u``, the ``(M + 1)``-th largest) and replaces the ``i``-th
    smallest of them by ``u + F^-1((i - 1/2) / M)``, capped at the largest raw weight. A step holds 4-16
    weights, too few to fit, so here ``reference`` (the last ``window`` weights, the step's included) gives
    ``u``, the fit and the ranks: a step weight ``w > u`` whose rank among the reference's tail is ``i``
    (ties: the highest) becomes ``min(u + F^-1((i - 1/2) / M), max(reference))``; weights ``<= u`` stay.

    Args:
        weights: the step's weights (any device).
        reference: recent weights including the step's (at least 10 finite ones to smooth anything).

    Returns:
        ``(smoothed weights on weights' device and dtype, k-hat)`` (``k-hat`` is ``nan`` and the weights are
        unchanged when the tail cannot be fitted).
    """
    r = reference.detach().to("cpu", torch.float64).numpy()
    r = np.sort(r[np.isfinite(r)])
    if r.size < 10:
        return weights, math.nan
    m = tail_size(r.size)
    threshold, tail = r[-m - 1], r[-m:]
    exceedances = tail - threshold
    if np.sum(exceedances > 0) < 5:
        return weights, math.nan
    k, sigma = gpd_fit(exceedances[exceedances > 0])
    if not (math.isfinite(k) and math.isfinite(sigma) and sigma > 0):
        return weights, k
    w = weights.detach().to("cpu", torch.float64).numpy().copy()
    above = w > threshold
    ranks = np.clip(np.searchsorted(tail, w[above], side="right"), 1, m)
    w[above] = np.minimum(threshold + gpd_quantile((ranks - 0.5) / m, k, sigma), r[-1])
    return torch.from_numpy(w).to(device=weights.device, dtype=weights.dtype), k


class Normalizer(Component, ABC):
    """Turns a step's global weights into the loss's weights and normalisation, with state across steps.

    Subclasses implement :meth:`normalize`; stateful ones also :meth:`update`, :meth:`state_dict` and
    :meth:`load_state_dict`. Its options are its constructor's arguments (a config gives them as ``init_args`` of its
    class path); register a subclass with :func:`register_normalizer` to name it in YAML configs, where
    :meth:`~Component.from_options` builds it from the weighting callback's options.
    """

    @abstractmethod
    def normalize(self, weights: Tensor) -> EpisodeWeights:
        """The step's global weights, transformed, and how the loss divides by them (state unchanged)."""

    def update(self, weights: Tensor, warmup: bool = False) -> None:  # noqa: B027 (stateless ones keep nothing)
        """Commits the step's raw global weights (CPU) into the state (``warmup``: they are the warm-up's 1s)."""

    def state_dict(self) -> dict[str, Any]:
        """The state, as plain numbers and CPU tensors."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: B027 (stateless ones keep nothing)
        """Restores :meth:`state_dict`'s output exactly."""


#: the built-in normalisers: the paper's first
NORMALIZER_REGISTRY: Final[Registry[type[Normalizer]]] = Registry(
    "normalization",
    Normalizer,
    subclass_of("normalization", Normalizer),
    ("ess", "self", "truncated", "psis", "running", "scale"),
)


class ESSNormalizer(Normalizer):
    """``ess``: ``sum w L / ESS``, the paper's (Algorithm 1, Eq. 3); no state."""

    def normalize(self, weights: Tensor) -> EpisodeWeights:
        return EpisodeWeights(weights, "ess")


class SelfNormalizer(Normalizer):
    """``self``: ``sum w L / sum w``, self-normalised importance sampling; no state."""

    def normalize(self, weights: Tensor) -> EpisodeWeights:
        return EpisodeWeights(weights, "sum_weights")


class TruncatedNormalizer(Normalizer):
    """``truncated``: :func:`truncate_weights` over the global batch, then ``sum w L / sum w``."""

    def normalize(self, weights: Tensor) -> EpisodeWeights:
        return EpisodeWeights(truncate_weights(weights), "sum_weights")


class ParetoSmoothedNormalizer(Normalizer):
    """``psis``: :func:`pareto_smooth` against the last ``window`` raw weights, then ``sum w L / sum w``.

    Needs the weights on the host every step (a device sync). :attr:`last_k` is the step's ``k-hat``.

    Args:
        window: number of recent raw weights (after the warm-up) the tail is fitted to.
    """

    def __init__(self, window: int = 1000) -> None:
        self.window = window
        self.recent = torch.zeros(0, dtype=torch.float64)
        self.last_k = math.nan

    def normalize(self, weights: Tensor) -> EpisodeWeights:
        current = weights.detach().to("cpu", torch.float64).flatten()
        reference = torch.cat([self.recent, current])[-self.window :]
        smoothed, self.last_k = pareto_smooth(weights, reference)
        return EpisodeWeights(smoothed, "sum_weights")

    def update(self, weights: Tensor, warmup: bool = False) -> None:
        if warmup:  # the warm-up's weights are all 1: no tail to learn from
            return
        self.recent = torch.cat([self.recent, weights.to("cpu", torch.float64).flatten()])[-self.window :]

    def state_dict(self) -> dict[str, Any]:
        return {"recent": self.recent.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        recent = state.get("recent")
        self.recent = torch.zeros(0) if recent is None else torch.as_tensor(recent)
        self.recent = self.recent.to("cpu", torch.float64).flatten()[-self.window :]


class RunningNormalizer(Normalizer):
    """``running``: ``sum w L / D_t``, ``D_t = decay D_(t-1) + (1 - decay) sum_t w`` (``D_0`` = the first step's).

    ``D`` averages the global ``sum w`` over every step, warm-up included (where ``sum w = |B|``), so at the end
    of the warm-up ``D = |B|`` and the loss is the plain importance-sampling estimate ``sum w L / |B|`` scaled by
    ``|B| / D``, which moves slowly. The step's own ``sum w`` enters ``D_t`` (no division by a stale value on a
    first step). Computed on the device: no sync.

    Args:
        decay: the weight of the old average, in ``[0, 1)`` (default 0.99: about the last 100 steps); the
            callback's ``running_decay``.
    """

    callback_options = {"decay": "running_decay"}

    def __init__(self, decay: float = 0.99) -> None:
        self.decay = decay
        self.average: float | None = None

    def _next(self, total: Tensor) -> Tensor:
        return total if self.average is None else self.decay * self.average + (1.0 - self.decay) * total

    def normalize(self, weights: Tensor) -> EpisodeWeights:
        dtype = stat_dtype(weights.device)
        return EpisodeWeights(weights, "denominator", self._next(weights.detach().to(dtype).sum()))

    def update(self, weights: Tensor, warmup: bool = False) -> None:
        self.average = float(self._next(weights.to("cpu", torch.float64).sum()))

    def state_dict(self) -> dict[str, Any]:
        return {} if self.average is None else {"average": float(self.average)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.average = None if state.get("average") is None else float(state["average"])


class ScaleOnlyNormalizer(Normalizer):
    """``scale``: ``f mean(L)`` with ``f = sum w / ESS = sum w^2 / sum w`` of the step's global weights; no state.

    The study's control that keeps only the loss's step-to-step scale of the paper's estimator (``sum w L / ESS =
    f sum w L / sum w``): every episode weighs 1, so the weights' aim and their spread within the step are gone, and
    the step's loss is the plain mean scaled by the factor the weights would have given it. Written as ``sum 1 L / D``
    with ``D = |B| / f``; a step whose weights sum to 0 is skipped, as under ``ess``.
    """

    def normalize(self, weights: Tensor) -> EpisodeWeights:
        w = weights.detach().to(stat_dtype(weights.device))
        w = torch.where(torch.isfinite(w) & (w > 0), w, 0.0)
        s1, s2 = w.sum(), (w * w).sum()
        # D = |B| s1 / s2 (0, a skipped step, when every weight is 0), without a host read
        denominator = torch.where(s2 > 0, weights.numel() * s1 / torch.where(s2 > 0, s2, 1.0), 0.0)
        return EpisodeWeights(torch.ones_like(weights), "denominator", denominator)


NORMALIZER_REGISTRY.builtin("ess", ESSNormalizer)
NORMALIZER_REGISTRY.builtin("self", SelfNormalizer)
NORMALIZER_REGISTRY.builtin("truncated", TruncatedNormalizer)
NORMALIZER_REGISTRY.builtin("psis", ParetoSmoothedNormalizer)
NORMALIZER_REGISTRY.builtin("running", RunningNormalizer)
NORMALIZER_REGISTRY.builtin("scale", ScaleOnlyNormalizer)

_NormalizerClass = type[Normalizer]


@overload
def register_normalizer(
    name: str, normalizer: None = None, *, overwrite: bool = False
) -> Callable[[_NormalizerClass], _NormalizerClass]: ...
@overload
def register_normalizer(name: str, normalizer: _NormalizerClass, *, overwrite: bool = False) -> _NormalizerClass: ...
def register_normalizer(
    name: str, normalizer: _NormalizerClass | None = None, *, overwrite: bool = False
) -> _NormalizerClass | Callable[[_NormalizerClass], _NormalizerClass]:
    """Registers a :class:`Normalizer` subclass under ``name`` (configs then write ``normalization: <name>``), like
    :func:`~lightning_episodes.weighting.register_proposal`; the weighting callback builds it with
    :meth:`~lightning_episodes.weighting.registry.Component.from_options`."""
    return NORMALIZER_REGISTRY.register_or_decorate(name, normalizer, overwrite)


def available_normalizers() -> tuple[str, ...]:
    """The names :func:`make_normalizer` accepts: the built-in ``ess``, ``self``, ``truncated``, ``psis``,
    ``running``, ``scale``, then registered ones in registration order."""
    return NORMALIZER_REGISTRY.names()


def make_normalizer(
    normalization: str | Normalizer | type[Normalizer] | Mapping[str, Any], **options: Any
) -> Normalizer:
    """The normaliser ``normalization`` names (one of :func:`available_normalizers`, a class path, or a mapping with
    ``class_path`` and ``init_args``; else a ``ValueError`` that lists the names), its class built from the callback's
    ``options`` its constructor takes (:meth:`~Component.from_options`); an instance is returned as it is."""
    return NORMALIZER_REGISTRY.resolve(normalization, options)

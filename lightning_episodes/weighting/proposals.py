"""Proposal models ``q`` of the difficulty of plainly sampled episodes, and a registry to name them from configs.

Each proposal owns its state (warm-up sums, moving averages or a window of recent difficulties), learns it
online from each step's ordered global batch (:meth:`Proposal.update`) or once offline from a reference
model's scores (:meth:`Proposal.fit`), and gives the importance weights of a target on its support
``S = [low, high]``, the central interval of mass ``Phi(c) - Phi(-c)`` (``c = support_sigmas``). Built in:
``normal`` (the paper's), ``lognormal`` (here) and ``empirical`` (a kernel density estimate, in
:mod:`~lightning_episodes.weighting.empirical`); :func:`register_proposal` adds one. See ``docs/method.md``,
"Proposals". State is plain Python numbers and CPU tensors, restored exactly.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, overload

import torch
from torch import Tensor

from lightning_episodes.weighting.estimator import DifficultyEstimator, difficulty_statistics
from lightning_episodes.weighting.registry import Component, Registry, subclass_of
from lightning_episodes.weighting.targets import Target
from lightning_episodes.weighting.weights import (
    DEFAULT_SUPPORT_SIGMAS,
    density_ratio_weights,
    importance_weights,
    support_interval,
)

__all__ = [
    "PROPOSAL_OPTIONS",
    "LogNormalProposal",
    "MomentProposal",
    "NormalProposal",
    "Proposal",
    "available_proposals",
    "make_proposal",
    "register_proposal",
]

#: The weighting callback's options a proposal it names is built with (see :meth:`~Component.from_options`).
PROPOSAL_OPTIONS: Final[tuple[str, ...]] = ("support_sigmas", "decay", "warmup_steps", "update", "window")

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def cpu64(values: Tensor | list[float]) -> Tensor:
    """``values`` as a flat float64 CPU tensor (detached)."""
    if isinstance(values, Tensor):
        return values.detach().to(device="cpu", dtype=torch.float64).flatten()
    return torch.tensor(values, dtype=torch.float64)


class Proposal(Component, ABC):
    """A model ``q`` of the difficulty distribution, with its support and importance weights.

    Subclasses implement :meth:`update` (online: absorb one step's ordered global batch), :meth:`fit`
    (offline: fix ``q`` from a sample), :meth:`log_density` (untruncated ``log q``), :meth:`support`,
    :attr:`location`/:attr:`scale` (logged as ``weighting/mu``, ``weighting/sigma``) and the state. Its options are
    its constructor's arguments (a config gives them as ``init_args`` of its class path); register a subclass with
    :func:`register_proposal` to name it in YAML configs, where :meth:`~Component.from_options` builds it from the
    weighting callback's options; :meth:`heldout_log_likelihood` scores its fit (the misfit warning).

    Args:
        support_sigmas: ``c``: the support holds the central mass ``Phi(c) - Phi(-c)`` of ``q``.
    """

    #: ``True`` where ``q`` models log-difficulty: the diagnostics then also log the log-difficulties' shape.
    log_difficulty: ClassVar[bool] = False

    def __init__(self, support_sigmas: float = DEFAULT_SUPPORT_SIGMAS) -> None:
        self.support_sigmas = float(support_sigmas)

    @property
    @abstractmethod
    def ready(self) -> bool:
        """Whether ``q`` is known (after the online warm-up, or once fitted offline)."""

    @property
    @abstractmethod
    def steps(self) -> int:
        """Online steps absorbed (warm-up included)."""

    @property
    @abstractmethod
    def nonfinite(self) -> int:
        """Difficulties skipped so far because ``q`` cannot use them (non-finite; non-positive for log-normal)."""

    @property
    @abstractmethod
    def location(self) -> float:
        """Normal: ``mu``; log-normal: the mean of log-difficulty; empirical: the window's mean."""

    @property
    @abstractmethod
    def scale(self) -> float:
        """Normal: ``sigma``; log-normal: the std of log-difficulty; empirical: the window's std (ddof 0)."""

    @abstractmethod
    def update(self, difficulties: Tensor) -> None:
        """Absorbs one step's difficulties (the ordered global batch, on the CPU)."""

    @abstractmethod
    def fit(self, difficulties: Tensor) -> None:
        """Fixes ``q`` from a sample (the offline reference's scores); :attr:`ready` afterwards."""

    @abstractmethod
    def log_density(self, x: Tensor) -> Tensor:
        """``log q(x)``, untruncated, for float64 ``x`` (``-inf`` where ``q`` has no mass)."""

    @abstractmethod
    def support(self) -> tuple[float, float]:
        """``S = [low, high]``: the central interval of mass ``Phi(c) - Phi(-c)`` of ``q``."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The state, as plain numbers and CPU tensors."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output exactly."""

    @classmethod
    def heldout_log_likelihood(cls, train: Tensor, test: Tensor) -> float:
        """``sum log q(test)`` of a fresh instance fitted (:meth:`fit`) to ``train``.

        ``-inf`` when the fit left values of ``train`` out (e.g. non-positive ones for the log-normal): ``q`` has
        no mass where the data has some. :func:`~lightning_episodes.weighting.heldout_log_likelihood` averages it
        over two folds for every registered proposal.

        Args:
            train: finite float64 values to fit.
            test: finite float64 values to score.
        """
        q = cls.from_options(window=max(train.numel(), 10))
        q.fit(train)
        return -math.inf if q.nonfinite else float(q.log_density(test).sum())

    def weights(
        self, difficulties: Tensor, target: Target, out_of_support: str = "zero", progress: float | None = None
    ) -> Tensor:
        """``w = p / q`` of each difficulty under the current ``q`` (see :func:`density_ratio_weights`).

        Args:
            difficulties: the step's difficulties, any shape and device.
            target: the target ``p`` on the support.
            out_of_support: ``"zero"`` or ``"clamp"``.
            progress: training progress ``t / T``, for the curriculum.

        Returns:
            Detached weights of ``difficulties``' shape, dtype and device.
        """
        low, high = self.support()
        return density_ratio_weights(
            difficulties, self.log_density, low, high, target, self.support_sigmas, out_of_support, progress
        )


#: the built-in proposals: the paper's first, then the skew-aware ones (``empirical`` registers from its own module)
PROPOSAL_REGISTRY: Final[Registry[type[Proposal]]] = Registry(
    "proposal", Proposal, subclass_of("proposal", Proposal), ("normal", "lognormal", "empirical")
)


class MomentProposal(Proposal):
    """A proposal fitted by the mean and variance of (a transform of) the difficulties: :class:`DifficultyEstimator`
    online (the paper's warm-up and moving averages), the sample's mean and variance (ddof 0) offline.

    Subclasses give :meth:`log_density` and :meth:`support` from :attr:`location` and :attr:`scale` (and may
    override ``_transform``, the map of the difficulties whose moments are estimated); the state is the
    estimator's.

    Args:
        support_sigmas: ``c`` (default 2.58).
        decay: the moving average's weight of the old value.
        warmup_steps: steps of plain sampling before ``q`` is used.
        update: ``"episode"`` or ``"batch"``.
    """

    def __init__(
        self, support_sigmas: float = DEFAULT_SUPPORT_SIGMAS, decay: float = 0.9, warmup_steps: int = 100,
        update: str = "episode",
    ) -> None:  # fmt: skip
        super().__init__(support_sigmas)
        self.estimator = DifficultyEstimator(decay, warmup_steps, update)

    def _transform(self, difficulties: Tensor) -> Tensor:
        return difficulties

    @property
    def ready(self) -> bool:
        return self.estimator.ready

    @property
    def steps(self) -> int:
        return self.estimator.steps

    @property
    def nonfinite(self) -> int:
        return self.estimator.nonfinite

    @property
    def location(self) -> float:
        return self.estimator.mu

    @property
    def scale(self) -> float:
        return self.estimator.sigma

    def update(self, difficulties: Tensor) -> None:
        self.estimator.update(self._transform(cpu64(difficulties)))

    def fit(self, difficulties: Tensor) -> None:
        values = self._transform(cpu64(difficulties))
        finite = values[torch.isfinite(values)]
        mu, variance = difficulty_statistics(finite)
        self.estimator.load_state_dict(
            {"ready": True, "mu": mu, "variance": variance, "nonfinite": values.numel() - finite.numel()}
        )

    def state_dict(self) -> dict[str, Any]:
        return self.estimator.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.estimator.load_state_dict(state)


class NormalProposal(MomentProposal):
    """``q = N(mu, sigma^2)``, the paper's: :class:`DifficultyEstimator` online, mean and variance offline.

    Its weights are exactly :func:`importance_weights` (``S = [mu - c sigma, mu + c sigma]``).
    """

    def log_density(self, x: Tensor) -> Tensor:
        z = (x - self.location) / self.scale
        return -0.5 * z * z - _LOG_SQRT_2PI - math.log(self.scale)

    def support(self) -> tuple[float, float]:
        return support_interval(self.location, self.scale, self.support_sigmas)

    def weights(
        self, difficulties: Tensor, target: Target, out_of_support: str = "zero", progress: float | None = None
    ) -> Tensor:
        return importance_weights(
            difficulties, self.location, self.scale, target, self.support_sigmas, out_of_support, progress
        )


class LogNormalProposal(MomentProposal):
    """``log(difficulty) ~ N(m, s^2)``: the normal's estimator on log-difficulty, ``S = [e^(m - c s), e^(m + c s)]``.

    A non-positive difficulty has no log: like a non-finite one it gets weight 0, stays out of the
    estimate and is counted in :attr:`nonfinite` (``log q = -inf`` there). The target lives on ``S`` in difficulty
    units.
    """

    log_difficulty = True

    def _transform(self, difficulties: Tensor) -> Tensor:
        return torch.where(difficulties > 0, difficulties, math.nan).log()

    def log_density(self, x: Tensor) -> Tensor:
        log_x = self._transform(x)
        z = (log_x - self.location) / self.scale
        log_q = -0.5 * z * z - _LOG_SQRT_2PI - math.log(self.scale) - log_x
        return torch.where(x > 0, log_q, -math.inf)

    def support(self) -> tuple[float, float]:
        low, high = support_interval(self.location, self.scale, self.support_sigmas)
        return math.exp(low), math.exp(high)

    def weights(
        self, difficulties: Tensor, target: Target, out_of_support: str = "zero", progress: float | None = None
    ) -> Tensor:
        positive = torch.where(difficulties > 0, difficulties, math.nan)
        return super().weights(positive, target, out_of_support, progress)


PROPOSAL_REGISTRY.builtin("normal", NormalProposal)
PROPOSAL_REGISTRY.builtin("lognormal", LogNormalProposal)

_ProposalClass = type[Proposal]


@overload
def register_proposal(
    name: str, proposal: None = None, *, overwrite: bool = False
) -> Callable[[_ProposalClass], _ProposalClass]: ...
@overload
def register_proposal(name: str, proposal: _ProposalClass, *, overwrite: bool = False) -> _ProposalClass: ...
def register_proposal(
    name: str, proposal: _ProposalClass | None = None, *, overwrite: bool = False
) -> _ProposalClass | Callable[[_ProposalClass], _ProposalClass]:
    """Registers a :class:`Proposal` subclass under ``name`` (configs then write ``proposal: <name>``): as a call,
    or as a class decorator when ``proposal`` is omitted. Built-in names cannot be replaced (they never contain a
    dot: a dotted name such as ``"mylab.laplace"`` is safe from later ones), a custom one only with ``overwrite``;
    anything but a :class:`Proposal` subclass is a ``TypeError``. The weighting callback builds it with
    :meth:`Proposal.from_options`, and the misfit warning scores it with :meth:`Proposal.heldout_log_likelihood`.
    """
    return PROPOSAL_REGISTRY.register_or_decorate(name, proposal, overwrite)


def available_proposals() -> tuple[str, ...]:
    """The names :func:`make_proposal` accepts: the built-in ``normal``, ``lognormal``, ``empirical``, then registered
    ones in registration order."""
    return PROPOSAL_REGISTRY.names()


def make_proposal(proposal: str | Proposal | type[Proposal] | Mapping[str, Any], **options: Any) -> Proposal:
    """The proposal ``proposal`` names (one of :func:`available_proposals`, a class path, or a mapping with
    ``class_path`` and ``init_args``; else a ``ValueError`` that lists the names), its class built from the callback's
    ``options`` its constructor takes (:meth:`~Component.from_options`); an instance is returned as it is."""
    return PROPOSAL_REGISTRY.resolve(proposal, options)

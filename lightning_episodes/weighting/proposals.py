"""Proposal models ``q`` of the difficulty of plainly sampled episodes: normal, log-normal, empirical (KDE).

Each proposal owns its state (warm-up sums, moving averages or a window of recent difficulties), learns it
online from each step's ordered global batch (:meth:`Proposal.update`) or once offline from a reference
model's scores (:meth:`Proposal.fit`), and gives the importance weights of a target on its support
``S = [low, high]``, the central interval of mass ``Phi(c) - Phi(-c)`` (``c = support_sigmas``). See
``docs/method.md``, "Proposals". State is plain Python numbers and CPU tensors, restored exactly.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Final

import numpy as np
import torch
from scipy import special
from torch import Tensor

from lightning_episodes.weighting.estimator import DifficultyEstimator, difficulty_statistics
from lightning_episodes.weighting.targets import Target
from lightning_episodes.weighting.weights import (
    DEFAULT_SUPPORT_SIGMAS,
    SIGMA_FLOOR,
    density_ratio_weights,
    importance_weights,
    support_interval,
)

__all__ = [
    "PROPOSALS",
    "EmpiricalProposal",
    "LogNormalProposal",
    "NormalProposal",
    "Proposal",
    "kde_bandwidth",
    "kde_log_density",
    "kde_quantiles",
    "make_proposal",
]

#: Accepted values of ``proposal``.
PROPOSALS: Final[tuple[str, ...]] = ("normal", "lognormal", "empirical")

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_MAX_STEPS = 200  # of kde_quantiles: bisection alone reaches float64 resolution of any bracket in fewer


def _cpu64(values: Tensor | list[float]) -> Tensor:
    if isinstance(values, Tensor):
        return values.detach().to(device="cpu", dtype=torch.float64).flatten()
    return torch.tensor(values, dtype=torch.float64)


def kde_bandwidth(data: Tensor) -> float:
    """Scott's rule, as ``scipy.stats.gaussian_kde``: ``h = std(data, ddof=1) * n^(-1/5)`` (floored).

    Args:
        data: the window, a 1-d float tensor with at least 2 values.

    Returns:
        The Gaussian kernel's standard deviation, at least :data:`SIGMA_FLOOR`.
    """
    n = data.numel()
    return max(float(data.std(correction=1)) * n ** (-0.2), SIGMA_FLOOR)


def kde_log_density(x: Tensor, data: Tensor, bandwidth: float) -> Tensor:
    """``log q(x)`` of the Gaussian kernel density estimate ``q(x) = mean_i phi((x - x_i) / h) / h``.

    Args:
        x: where to evaluate, any shape (float64 recommended).
        data: the kernel centres, 1-d, moved to ``x``'s device.
        bandwidth: ``h``, the kernels' standard deviation.

    Returns:
        ``log q`` of ``x``'s shape (log-sum-exp: no underflow far from the data).
    """
    # non-blocking: the window (on the CPU) reaches a GPU without a synchronisation inside the training step
    centres = data.to(device=x.device, dtype=x.dtype, non_blocking=True)
    u = (x.reshape(-1, 1) - centres.reshape(1, -1)) / bandwidth
    log_q = torch.logsumexp(-0.5 * u * u, dim=1) - math.log(centres.numel() * bandwidth) - _LOG_SQRT_2PI
    return log_q.reshape(x.shape)


def kde_quantiles(data: Tensor, bandwidth: float, probabilities: list[float]) -> list[float]:
    """Quantiles of the kernel density estimate: the roots of ``F(x) = mean_i Phi((x - x_i) / h) = p``.

    Newton's method on all levels at once (``F' = q``, the estimate's density), started at the sample's quantiles
    and kept inside a bracket ``[low, high]`` with ``F(low) < p <= F(high)`` that every step narrows: a step that
    would leave it is a bisection instead, so it converges for any data (typically in 4-6 steps, against the 60-80
    of plain bisection). It stops after the step that moved no level by more than ``1e-10 h`` (or 64 units in
    the last place of ``x``: the next step would be below float64's noise), or after :data:`_MAX_STEPS` steps
    (on the CPU, where the window lives: no device is read).

    Args:
        data: the kernel centres (1-d).
        bandwidth: ``h``.
        probabilities: the levels, each in ``(0, 1)``.

    Returns:
        One quantile per level, as Python floats.
    """
    centres = _cpu64(data).numpy()
    levels = [float(p) for p in probabilities]
    # the few levels' bookkeeping in Python floats (the same IEEE arithmetic as NumPy's, without its per-call cost);
    # only the [levels x window] evaluations are arrays
    low = [float(centres.min() - 40.0 * bandwidth)] * len(levels)
    high = [float(centres.max() + 40.0 * bandwidth)] * len(levels)
    x = np.quantile(centres, levels).tolist()
    scale = bandwidth * _SQRT_2PI
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(_MAX_STEPS):
            z = (np.asarray(x)[:, None] - centres[None, :]) / bandwidth
            cdf = special.ndtr(z).mean(axis=1).tolist()
            density = (np.exp(-0.5 * z * z).mean(axis=1) / scale).tolist()
            done = True
            for i, level in enumerate(levels):
                if cdf[i] < level:
                    low[i] = x[i]
                else:
                    high[i] = x[i]
                newton = x[i] - (cdf[i] - level) / density[i] if density[i] != 0.0 else math.nan
                step = newton if math.isfinite(newton) and low[i] <= newton <= high[i] else 0.5 * (low[i] + high[i])
                # Newton's step shrinks the error quadratically: after one of 1e-10 h it is at float64's noise
                ulp = math.ulp(abs(x[i])) if math.isfinite(x[i]) else math.nan
                done = done and abs(step - x[i]) <= 1e-10 * bandwidth + 64.0 * ulp
                x[i] = step
            if done:
                break
    return x


class Proposal(ABC):
    """A model ``q`` of the difficulty distribution, with its support and importance weights.

    Subclasses implement :meth:`update` (online: absorb one step's ordered global batch), :meth:`fit`
    (offline: fix ``q`` from a sample), :meth:`log_density` (untruncated ``log q``), :meth:`support`,
    :attr:`location`/:attr:`scale` (logged as ``weighting/mu``, ``weighting/sigma``) and the state.

    Args:
        support_sigmas: ``c``: the support holds the central mass ``Phi(c) - Phi(-c)`` of ``q``.
    """

    name: ClassVar[str]

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


class NormalProposal(Proposal):
    """``q = N(mu, sigma^2)``, the paper's: :class:`DifficultyEstimator` online, mean and variance offline.

    Its weights are exactly :func:`importance_weights` (``S = [mu - c sigma, mu + c sigma]``).

    Args:
        support_sigmas: ``c`` (default 2.58).
        decay: the moving average's weight of the old value.
        warmup_steps: steps of plain sampling before ``q`` is used.
        update: ``"episode"`` or ``"batch"``.
    """

    name = "normal"

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
        self.estimator.update(self._transform(_cpu64(difficulties)))

    def fit(self, difficulties: Tensor) -> None:
        values = self._transform(_cpu64(difficulties))
        finite = values[torch.isfinite(values)]
        mu, variance = difficulty_statistics(finite)
        self.estimator.load_state_dict(
            {"ready": True, "mu": mu, "variance": variance, "nonfinite": values.numel() - finite.numel()}
        )

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

    def state_dict(self) -> dict[str, Any]:
        return self.estimator.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.estimator.load_state_dict(state)


class LogNormalProposal(NormalProposal):
    """``log(difficulty) ~ N(m, s^2)``: the normal's estimator on log-difficulty, ``S = [e^(m - c s), e^(m + c s)]``.

    A non-positive difficulty has no log: like a non-finite one it gets weight 0, stays out of the
    estimate and is counted in :attr:`nonfinite`. The target lives on ``S`` in difficulty units.
    """

    name = "lognormal"

    def _transform(self, difficulties: Tensor) -> Tensor:
        return torch.where(difficulties > 0, difficulties, math.nan).log()

    def log_density(self, x: Tensor) -> Tensor:
        log_x = self._transform(x)
        z = (log_x - self.location) / self.scale
        return -0.5 * z * z - _LOG_SQRT_2PI - math.log(self.scale) - log_x

    def support(self) -> tuple[float, float]:
        low, high = support_interval(self.location, self.scale, self.support_sigmas)
        return math.exp(low), math.exp(high)

    def weights(
        self, difficulties: Tensor, target: Target, out_of_support: str = "zero", progress: float | None = None
    ) -> Tensor:
        positive = torch.where(difficulties > 0, difficulties, math.nan)
        return Proposal.weights(self, positive, target, out_of_support, progress)


class EmpiricalProposal(Proposal):
    """A Gaussian kernel density estimate over the last ``window`` finite difficulties (Scott's bandwidth).

    Online, the window fills during the warm-up (``warmup_steps`` steps, at least 2 values) and then slides:
    each step is weighted with the window as it stands, then appended (the oldest values drop out).
    Offline, the window is the last ``window`` of the reference's scores. The support is the central interval
    of the estimate (its quantiles ``Phi(-c)`` and ``Phi(c)``, by bisection); bandwidth and support are
    recomputed when the window changes. ``q`` equals ``scipy.stats.gaussian_kde(window)``.

    Args:
        support_sigmas: ``c`` (default 2.58: the central 99%).
        window: number of recent difficulties kept (>= 2).
        warmup_steps: steps of plain sampling before ``q`` is used.
    """

    name = "empirical"

    def __init__(self, support_sigmas: float = DEFAULT_SUPPORT_SIGMAS, window: int = 1000, warmup_steps: int = 100):
        super().__init__(support_sigmas)
        self.window, self.warmup_steps = window, warmup_steps
        self._data = torch.zeros(0, dtype=torch.float64)
        self._steps = self._nonfinite = 0
        self._ready = False
        self._refresh()

    def _summarise(self) -> None:
        # the window's mean and std, read by every step's weights: computed once per change of the window
        n = self._data.numel()
        self._location = float(self._data.mean()) if n else 0.0
        self._scale = max(float(self._data.std(correction=0)), SIGMA_FLOOR) if n else SIGMA_FLOOR

    def _refresh(self) -> None:
        self._summarise()
        self._bandwidth = kde_bandwidth(self._data) if self._data.numel() >= 2 else SIGMA_FLOOR
        self._support = (0.0, 1.0)
        if self._data.numel() >= 2:
            mass = math.erf(self.support_sigmas / _SQRT2)
            low, high = kde_quantiles(self._data, self._bandwidth, [0.5 - 0.5 * mass, 0.5 + 0.5 * mass])
            self._support = (low, max(high, low + SIGMA_FLOOR))

    def _absorb(self, difficulties: Tensor) -> None:
        values = _cpu64(difficulties)
        finite = values[torch.isfinite(values)]
        self._nonfinite += values.numel() - finite.numel()
        self._data = torch.cat([self._data, finite])[-self.window :]

    @property
    def data(self) -> Tensor:
        """The window (float64, CPU, oldest first)."""
        return self._data

    @property
    def bandwidth(self) -> float:
        return self._bandwidth

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def nonfinite(self) -> int:
        return self._nonfinite

    @property
    def location(self) -> float:
        return self._location

    @property
    def scale(self) -> float:
        return self._scale

    def update(self, difficulties: Tensor) -> None:
        self._steps += 1
        self._absorb(difficulties)
        self._ready = self._ready or (self._steps >= self.warmup_steps and self._data.numel() >= 2)
        self._refresh()

    def fit(self, difficulties: Tensor) -> None:
        self._data = torch.zeros(0, dtype=torch.float64)
        self._absorb(difficulties)
        if self._data.numel() < 2:
            raise ValueError("the empirical proposal needs at least 2 finite difficulties")
        self._ready = True
        self._refresh()

    def log_density(self, x: Tensor) -> Tensor:
        return kde_log_density(x, self._data, self._bandwidth)

    def support(self) -> tuple[float, float]:
        return self._support

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": int(self._steps),
            "ready": bool(self._ready),
            "nonfinite": int(self._nonfinite),
            "window": self._data.clone(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._steps = int(state.get("steps", 0))
        self._ready = bool(state.get("ready", False))
        self._nonfinite = int(state.get("nonfinite", 0))
        self._data = _cpu64(state.get("window", torch.zeros(0)))[-self.window :]
        self._refresh()


def make_proposal(
    proposal: str,
    support_sigmas: float = DEFAULT_SUPPORT_SIGMAS,
    decay: float = 0.9,
    warmup_steps: int = 100,
    update: str = "episode",
    window: int = 1000,
) -> Proposal:
    """Builds the proposal named ``proposal`` (one of :data:`PROPOSALS`) with its options.

    Raises:
        ValueError: if ``proposal`` is unknown.
    """
    if proposal == "normal":
        return NormalProposal(support_sigmas, decay, warmup_steps, update)
    if proposal == "lognormal":
        return LogNormalProposal(support_sigmas, decay, warmup_steps, update)
    if proposal == "empirical":
        return EmpiricalProposal(support_sigmas, window, warmup_steps)
    raise ValueError(f"proposal must be one of {list(PROPOSALS)}, got {proposal!r}")

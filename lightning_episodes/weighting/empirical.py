"""The empirical proposal: a Gaussian kernel density estimate over a window of recent difficulties.

:func:`kde_bandwidth`, :func:`kde_log_density` and :func:`kde_quantiles` are the estimate's maths (``q`` equals
``scipy.stats.gaussian_kde`` of the window); :class:`EmpiricalProposal` is registered as ``"empirical"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from scipy import special
from torch import Tensor

from lightning_episodes.weighting.proposals import PROPOSAL_REGISTRY, Proposal, cpu64
from lightning_episodes.weighting.weights import DEFAULT_SUPPORT_SIGMAS, SIGMA_FLOOR

__all__ = ["EmpiricalProposal", "kde_bandwidth", "kde_log_density", "kde_quantiles"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_MAX_STEPS = 200  # of kde_quantiles: bisection alone reaches float64 resolution of any bracket in fewer


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
    centres = cpu64(data).numpy()
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
        values = cpu64(difficulties)
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
        self._data = cpu64(state.get("window", torch.zeros(0)))[-self.window :]
        self._refresh()


PROPOSAL_REGISTRY.builtin("empirical", EmpiricalProposal)

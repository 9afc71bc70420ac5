"""Diagnostics of importance weights and of the proposal's fit (see ``docs/method.md``, "Diagnostics").

- :func:`pareto_k`: the shape ``k`` of a generalised Pareto fitted to the largest weights (Vehtari et al.,
  "Pareto smoothed importance sampling", JMLR 2024): ``k < 0.5`` fine, ``0.5-0.7`` slow convergence,
  ``> 0.7`` the weighted estimate is unreliable (its variance is practically infinite).
- :func:`skewness` and :func:`normality_p` (Shapiro-Wilk) of recent difficulties.
- :func:`heldout_log_likelihood` / :func:`better_proposal`: which proposal model fits the difficulties best.
- :class:`WeightingDiagnostics`: windows of recent weights and difficulties with exact checkpoint state.

Host-side NumPy/SciPy on small windows: callers compute these on logging steps only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from lightning_episodes.weighting.proposals import PROPOSAL_REGISTRY

__all__ = [
    "MISFIT_MARGIN",
    "MISFIT_MIN_VALUES",
    "WeightingDiagnostics",
    "better_proposal",
    "gpd_fit",
    "gpd_quantile",
    "heldout_log_likelihood",
    "normality_p",
    "pareto_k",
    "skewness",
    "tail_size",
]

#: A proposal is reported as misfitting when another fits the difficulties better by more than this many nats
#: of held-out log-likelihood per episode.
MISFIT_MARGIN: Final[float] = 0.05

#: No verdict on fewer difficulties than this: the held-out comparison is noise on small samples.
MISFIT_MIN_VALUES: Final[int] = 100


def _numpy(values: Tensor | np.ndarray | list[float]) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    array = np.asarray(values, dtype=np.float64).ravel()
    return array[np.isfinite(array)]


def tail_size(n: int) -> int:
    """PSIS's number of tail draws, ``M = ceil(min(0.2 n, 3 sqrt(n)))``."""
    return math.ceil(min(0.2 * n, 3.0 * math.sqrt(n)))


def gpd_fit(exceedances: np.ndarray) -> tuple[float, float]:
    """Shape ``k`` and scale ``sigma`` of a generalised Pareto fitted to positive exceedances.

    The empirical-Bayes estimate of Zhang & Stephens (Technometrics 2009) with the weakly informative prior on
    ``k`` that PSIS uses (Vehtari et al. 2024, as in ``arviz``/``loo``): a posterior mean of ``theta = -k / sigma``
    over a quadrature grid, then ``k`` shrunk towards 0.5 with the weight of 10 observations.

    Args:
        exceedances: values above the threshold (any order, > 0 for a useful fit).

    Returns:
        ``(k, sigma)`` in scipy's ``genpareto`` convention (``c = k``, ``scale = sigma``).
    """
    x = np.sort(np.asarray(exceedances, dtype=np.float64))
    n = x.size
    grid = 30 + int(math.sqrt(n))
    theta = 1.0 - np.sqrt(grid / (np.arange(1, grid + 1) - 0.5))
    theta /= 3.0 * x[int(n / 4 + 0.5) - 1]
    theta += 1.0 / x[-1]
    k_grid = np.log1p(-theta[:, None] * x).mean(axis=1)
    profile = n * (np.log(-theta / k_grid) - k_grid - 1.0)
    with np.errstate(over="ignore"):  # exp overflows to inf for negligible grid points: their weight is then 0
        weights = 1.0 / np.exp(profile - profile[:, None]).sum(axis=1)
    keep = weights >= 10 * np.finfo(float).eps
    weights, theta = weights[keep] / weights[keep].sum(), theta[keep]
    theta_post = float(np.sum(theta * weights))
    k = float(np.log1p(-theta_post * x).mean())
    sigma = -k / theta_post
    return (n * k + 10 * 0.5) / (n + 10), sigma


def gpd_quantile(p: np.ndarray, k: float, sigma: float) -> np.ndarray:
    """Quantiles of the generalised Pareto ``(k, sigma)``: ``sigma / k ((1 - p)^(-k) - 1)`` (k = 0: the limit)."""
    p = np.asarray(p, dtype=np.float64)
    if abs(k) < 1e-12:
        return -sigma * np.log1p(-p)
    return sigma * np.expm1(-k * np.log1p(-p)) / k


def pareto_k(weights: Tensor | np.ndarray | list[float]) -> float:
    """``k-hat`` of the largest importance weights: a GPD fitted to the ``M = tail_size(n)`` largest exceedances
    of the ``(M + 1)``-th largest weight (PSIS's tail). ``nan`` for fewer than 10 finite weights or a flat tail.

    Example::

        >>> rng = np.random.default_rng(0)
        >>> pareto_k(np.abs(rng.standard_cauchy(2000))) > 0.7  # infinite-mean weights: unreliable
        True
    """
    w = np.sort(_numpy(weights))
    if w.size < 10:
        return math.nan
    m = tail_size(w.size)
    exceedances = w[-m:] - w[-m - 1]
    if not np.any(exceedances > 0):
        return math.nan
    return gpd_fit(exceedances[exceedances > 0])[0] if np.sum(exceedances > 0) >= 5 else math.nan


def skewness(values: Tensor | np.ndarray | list[float]) -> float:
    """Moment skewness ``m3 / m2^(3/2)`` (``scipy.stats.skew``, biased); ``nan`` for fewer than 3 values."""
    x = _numpy(values)
    if x.size < 3 or np.ptp(x) == 0:
        return math.nan
    return float(stats.skew(x))


def normality_p(values: Tensor | np.ndarray | list[float]) -> float:
    """Shapiro-Wilk p-value of the values (at most the last 5,000); ``nan`` for fewer than 3 or constant ones."""
    x = _numpy(values)[-5000:]
    if x.size < 3 or np.ptp(x) == 0:
        return math.nan
    return float(stats.shapiro(x).pvalue)


def heldout_log_likelihood(values: Tensor | np.ndarray | list[float]) -> dict[str, float]:
    """Mean held-out log-likelihood per value of each registered proposal model (2-fold: even and odd positions).

    Each model is fitted on one half and scored on the other, both ways, by its own
    :meth:`~lightning_episodes.weighting.Proposal.heldout_log_likelihood`: normal (mean, variance), log-normal
    (the same on log-values; ``-inf`` if a value is <= 0), empirical (Gaussian KDE, Scott's bandwidth), and any
    registered with :func:`~lightning_episodes.weighting.register_proposal`.

    Returns:
        ``{"normal": ..., "lognormal": ..., "empirical": ..., <registered>: ...}`` (``nan`` for fewer than 8
        values).
    """
    x = _numpy(values)
    if x.size < 8:
        return dict.fromkeys(PROPOSAL_REGISTRY, math.nan)
    folds = (torch.from_numpy(x[0::2]), torch.from_numpy(x[1::2]))
    scores = {}
    for name in PROPOSAL_REGISTRY:
        proposal = PROPOSAL_REGISTRY[name]
        total = sum(proposal.heldout_log_likelihood(train, test) for train, test in (folds, folds[::-1]))
        scores[name] = total / x.size
    return scores


def better_proposal(
    values: Tensor | np.ndarray | list[float], chosen: str, margin: float = MISFIT_MARGIN
) -> tuple[str | None, dict[str, float]]:
    """The proposal that fits ``values`` better than ``chosen`` by more than ``margin`` nats per value, if any.

    Returns:
        ``(name or None, the held-out log-likelihoods)``; ``None`` below :data:`MISFIT_MIN_VALUES` finite values.
    """
    if _numpy(values).size < MISFIT_MIN_VALUES:
        return None, dict.fromkeys(PROPOSAL_REGISTRY, math.nan)
    scores = heldout_log_likelihood(values)
    finite = {name: score for name, score in scores.items() if math.isfinite(score)}
    if not finite or chosen not in finite:
        return None, scores
    best = max(finite, key=finite.__getitem__)
    return (best if finite[best] > finite[chosen] + margin else None), scores


def _host_values(values: Tensor) -> np.ndarray:
    """``values`` as a flat float64 NumPy array on the host (a view where they already are one)."""
    return values.detach().to("cpu", torch.float64).reshape(-1).numpy()


def _appended(window: Tensor, values: np.ndarray, size: int) -> Tensor:
    """The last ``size`` of ``window`` followed by ``values`` (a float64 CPU tensor)."""
    return torch.from_numpy(np.concatenate([window.numpy(), values])[-size:])


class WeightingDiagnostics:
    """Windows of the last ``window`` difficulties and weights (global batch order) for the logged diagnostics.

    :meth:`observe` only keeps a step's values aside; they enter the windows when these are read (at most
    ``window`` values later): the windows cost the training step a list append, not a few tensor operations.

    Args:
        window: number of recent values kept in each window.
    """

    def __init__(self, window: int = 1000) -> None:
        self.window = window
        self._difficulties = torch.zeros(0, dtype=torch.float64)
        self._weights = torch.zeros(0, dtype=torch.float64)
        self._pending: list[tuple[Tensor, Tensor | None]] = []
        self._pending_values = 0

    @property
    def difficulties(self) -> Tensor:
        """The last ``window`` finite difficulties observed (float64, CPU)."""
        self._absorb_pending()
        return self._difficulties

    @property
    def weights(self) -> Tensor:
        """The last ``window`` weights observed after the warm-up (float64, CPU)."""
        self._absorb_pending()
        return self._weights

    def observe(self, difficulties: Tensor, weights: Tensor | None) -> None:
        """Appends a step's finite difficulties, and its weights unless ``None`` (the warm-up's are all 1).

        The tensors are read later, when the windows are: they must not be changed in place afterwards.
        """
        self._pending.append((difficulties, weights))
        self._pending_values += difficulties.numel()
        if self._pending_values >= self.window:  # bounded memory when nothing reads the windows
            self._absorb_pending()

    def _absorb_pending(self) -> None:
        # in NumPy: a few dozen values on the host, where each torch op costs more than the arithmetic
        if not self._pending:
            return
        d = np.concatenate([_host_values(d) for d, _ in self._pending])
        self._difficulties = _appended(self._difficulties, d[np.isfinite(d)], self.window)
        weights = [_host_values(w) for _, w in self._pending if w is not None]
        if weights:
            self._weights = _appended(self._weights, np.concatenate(weights), self.window)
        self._pending, self._pending_values = [], 0

    def summary(self, log_difficulty: bool = False) -> dict[str, float]:
        """``pareto_k`` of the weights, ``skewness`` and ``normality_p`` of the difficulties (and of their logs)."""
        values = {
            "pareto_k": pareto_k(self.weights),
            "skewness": skewness(self.difficulties),
            "normality_p": normality_p(self.difficulties),
        }
        if log_difficulty:
            positive = self.difficulties[self.difficulties > 0]
            values["log_skewness"] = skewness(positive.log())
            values["log_normality_p"] = normality_p(positive.log())
        return values

    def state_dict(self) -> dict[str, Any]:
        return {"difficulties": self.difficulties.clone(), "weights": self.weights.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._pending, self._pending_values = [], 0
        for key in ("difficulties", "weights"):
            value = state.get(key)
            tensor = torch.zeros(0) if value is None else torch.as_tensor(value)
            setattr(self, f"_{key}", tensor.to("cpu", torch.float64).flatten()[-self.window :])

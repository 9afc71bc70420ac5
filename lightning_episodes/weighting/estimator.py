"""Online estimate of the difficulty distribution ``N(mu, sigma^2)`` (Arnold et al., NeurIPS 2021, Sec. 3.3).

A warm-up of plain sampling accumulates ``(sum Omega, sum Omega^2, n)``; afterwards an exponential moving
average follows the distribution as the model learns. Everything is kept in Python floats (float64),
so the state checkpoints as plain numbers and restores exactly.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, Final

import torch
from torch import Tensor

from lightning_episodes.weighting.weights import SIGMA_FLOOR

__all__ = ["UPDATES", "DifficultyEstimator", "difficulty_statistics"]

#: Accepted values of ``update``.
UPDATES: Final[tuple[str, ...]] = ("episode", "batch")


def _finite_values(difficulties: Tensor | Iterable[float]) -> tuple[list[float], int]:
    """The finite difficulties as Python floats, in order, and how many were not finite."""
    if isinstance(difficulties, Tensor):
        values = difficulties.detach().to(device="cpu", dtype=torch.float64).flatten().tolist()
    else:
        values = [float(v) for v in difficulties]
    finite = [v for v in values if math.isfinite(v)]
    return finite, len(values) - len(finite)


def difficulty_statistics(difficulties: Tensor | Iterable[float]) -> tuple[float, float]:
    """Mean and variance (ddof = 0) of the finite difficulties, e.g. for the offline estimate.

    Args:
        difficulties: per-episode difficulties; non-finite values are left out.

    Returns:
        ``(mu, variance)`` as Python floats.

    Raises:
        ValueError: if no difficulty is finite.

    Example::

        >>> difficulty_statistics(torch.tensor([1.0, 2.0, 3.0, float("inf")]))
        (2.0, 0.6666666666666666)
    """
    values, _ = _finite_values(difficulties)
    if not values:
        raise ValueError("difficulties must contain at least one finite value")
    mu = math.fsum(values) / len(values)
    return mu, math.fsum((v - mu) ** 2 for v in values) / len(values)


class DifficultyEstimator:
    """Warm-up then exponential moving average of the mean and variance of episode difficulty.

    During the first ``warmup_steps`` calls of :meth:`update` (one per optimizer step, with the
    step's ordered global batch) it accumulates ``(sum Omega, sum Omega^2, n)`` over the finite
    difficulties; the call that completes the warm-up sets ``mu = sum Omega / n`` and
    ``sigma^2 = sum Omega^2 / n - mu^2`` (ddof 0, clamped at 0). If fewer than 2 finite
    difficulties were seen by then, the warm-up goes on until there are. Afterwards each call
    updates, with ``lambda = decay`` (the weight of the old value):

    - ``update="episode"`` (default), for each episode ``j = 0..|B|-1`` in order:
      ``mu' = lambda mu + (1 - lambda) Omega_j`` and
      ``sigma^2' = lambda sigma^2 + (1 - lambda) (Omega_j - mu)^2``, with the old ``mu`` in the second;
    - ``update="batch"``, once with the batch mean ``m`` and variance ``v`` (ddof 0):
      ``mu' = lambda mu + (1 - lambda) m`` and ``sigma^2' = lambda sigma^2 + (1 - lambda) (v + (m - mu)^2)``.

    Non-finite difficulties are skipped and counted in :attr:`nonfinite`; a step whose
    difficulties are all non-finite still counts as a step (it advances the warm-up and leaves the
    moving average unchanged). Callers compute the step's weights from :attr:`mu` and
    :attr:`sigma` *before* calling :meth:`update`, and use weight 1 while not :attr:`ready`.

    Args:
        decay: ``lambda`` in ``[0, 1)``, the weight of the old value (default 0.9).
        warmup_steps: number of optimizer steps of plain sampling, an integer >= 2 (default 100).
        update: ``"episode"`` (default) or ``"batch"``.

    Raises:
        ValueError: if an argument is outside its range.

    Example::

        >>> est = DifficultyEstimator(decay=0.5, warmup_steps=2)
        >>> est.update(torch.tensor([1.0, 3.0]))
        >>> est.update(torch.tensor([1.0, 3.0]))
        >>> est.ready, est.mu, est.variance
        (True, 2.0, 1.0)
        >>> est.update(torch.tensor([4.0]))  # mu = 0.5 * 2 + 0.5 * 4; var = 0.5 * 1 + 0.5 * (4 - 2)^2
        >>> est.mu, est.variance
        (3.0, 2.5)
    """

    decay: float
    warmup_steps: int
    update_mode: str

    def __init__(self, decay: float = 0.9, warmup_steps: int = 100, update: str = "episode") -> None:
        if isinstance(decay, bool) or not isinstance(decay, numbers.Real) or not 0.0 <= float(decay) < 1.0:
            raise ValueError(f"decay must be a number in [0, 1), got {decay!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 2:
            raise ValueError(f"warmup_steps must be an integer >= 2, got {warmup_steps!r}")
        if update not in UPDATES:
            raise ValueError(f"update must be one of {list(UPDATES)}, got {update!r}")
        self.decay = float(decay)
        self.warmup_steps = warmup_steps
        self.update_mode = update
        self.reset()

    def reset(self) -> None:
        """Forgets everything: back to the start of the warm-up."""
        self._steps = 0
        self._ready = False
        self._sum = 0.0
        self._sum_squares = 0.0
        self._count = 0
        self._mu = 0.0
        self._variance = 0.0
        self._nonfinite = 0
        self._episodes = 0

    @property
    def ready(self) -> bool:
        """Whether the warm-up is over (``mu`` and ``sigma`` may be used for weighting)."""
        return self._ready

    @property
    def mu(self) -> float:
        """Mean difficulty; during warm-up, the mean of the difficulties seen so far (0 if none)."""
        if self._ready:
            return self._mu
        return self._sum / self._count if self._count else 0.0

    @property
    def variance(self) -> float:
        """Variance of difficulty (ddof 0, >= 0); during warm-up, that of the difficulties so far."""
        if self._ready:
            return self._variance
        if not self._count:
            return 0.0
        mean = self._sum / self._count
        return max(self._sum_squares / self._count - mean * mean, 0.0)

    @property
    def sigma(self) -> float:
        """Standard deviation, floored at :data:`~lightning_episodes.weighting.SIGMA_FLOOR`."""
        return max(math.sqrt(self.variance), SIGMA_FLOOR)

    @property
    def steps(self) -> int:
        """Number of :meth:`update` calls (optimizer steps) seen, warm-up included."""
        return self._steps

    @property
    def episodes(self) -> int:
        """Number of finite difficulties absorbed so far."""
        return self._episodes

    @property
    def nonfinite(self) -> int:
        """Number of non-finite difficulties skipped so far."""
        return self._nonfinite

    def update(self, difficulties: Tensor | Iterable[float]) -> None:
        """Absorbs one optimizer step's difficulties (the ordered global batch).

        Args:
            difficulties: the step's per-episode difficulties in global batch order (detached;
                moved to the CPU, which synchronises with the device).
        """
        values, nonfinite = _finite_values(difficulties)
        self._steps += 1
        self._nonfinite += nonfinite
        self._episodes += len(values)
        if not self._ready:
            self._sum += math.fsum(values)
            self._sum_squares += math.fsum(v * v for v in values)
            self._count += len(values)
            if self._steps >= self.warmup_steps and self._count >= 2:
                self._mu = self._sum / self._count
                self._variance = max(self._sum_squares / self._count - self._mu * self._mu, 0.0)
                self._ready = True
            return
        if not values:
            return
        lam = self.decay
        mu, var = self._mu, self._variance
        if self.update_mode == "episode":
            for value in values:
                mu, var = lam * mu + (1.0 - lam) * value, lam * var + (1.0 - lam) * (value - mu) ** 2
        else:
            m = math.fsum(values) / len(values)
            v = math.fsum((value - m) ** 2 for value in values) / len(values)
            mu, var = lam * mu + (1.0 - lam) * m, lam * var + (1.0 - lam) * (v + (m - mu) ** 2)
        self._mu, self._variance = mu, max(var, 0.0)

    def state_dict(self) -> dict[str, Any]:
        """The state as plain Python numbers (safe for ``torch.load(weights_only=True)``)."""
        return {
            "steps": int(self._steps),
            "ready": bool(self._ready),
            "sum": float(self._sum),
            "sum_squares": float(self._sum_squares),
            "count": int(self._count),
            "mu": float(self._mu),
            "variance": float(self._variance),
            "nonfinite": int(self._nonfinite),
            "episodes": int(self._episodes),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output; missing keys keep their initial values.

        Args:
            state: a mapping as returned by :meth:`state_dict` (values may be 0-d tensors).
        """
        self.reset()
        self._steps = int(state.get("steps", self._steps))
        self._ready = bool(state.get("ready", self._ready))
        self._sum = float(state.get("sum", self._sum))
        self._sum_squares = float(state.get("sum_squares", self._sum_squares))
        self._count = int(state.get("count", self._count))
        self._mu = float(state.get("mu", self._mu))
        self._variance = max(float(state.get("variance", self._variance)), 0.0)
        self._nonfinite = int(state.get("nonfinite", self._nonfinite))
        self._episodes = int(state.get("episodes", self._episodes))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(decay={self.decay}, warmup_steps={self.warmup_steps}, "
            f"update={self.update_mode!r}, steps={self._steps}, ready={self._ready}, "
            f"mu={self.mu:.6g}, sigma={self.sigma:.6g})"
        )

"""Importance weights ``w = p(difficulty) / q(difficulty)`` (Arnold et al., NeurIPS 2021, Sec. 3.2).

The proposal ``q`` is the normal ``N(mu, sigma^2)`` fitted to the difficulties of plainly sampled
episodes, truncated to the support ``S = [mu - c sigma, mu + c sigma]`` (closed) and renormalised there
by ``Z = Phi(c) - Phi(-c)``. The target ``p`` (see :mod:`~lightning_episodes.weighting.targets`) is
renormalised on ``S`` as well. Both are evaluated in standardised units ``z = (difficulty - mu) / sigma``
because ``sigma`` cancels in the ratio.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import torch
from torch import Tensor

from lightning_episodes.weighting.targets import Target, get_target, standard_normal_mass

__all__ = [
    "DEFAULT_SUPPORT_SIGMAS",
    "OUT_OF_SUPPORT",
    "SIGMA_FLOOR",
    "curriculum_progress",
    "density_ratio_weights",
    "fraction_outside_support",
    "importance_weights",
    "support_interval",
]

#: Smallest standard deviation used anywhere (in difficulty units, i.e. nats of query loss): a
#: collapsed estimate (sigma = 0, e.g. identical difficulties) would otherwise divide by zero.
SIGMA_FLOOR: Final[float] = 1e-6

#: ``c``: the support spans ``c`` standard deviations either side of ``mu`` (about 99% of a normal).
DEFAULT_SUPPORT_SIGMAS: Final[float] = 2.58

#: Accepted values of ``out_of_support``.
OUT_OF_SUPPORT: Final[tuple[str, ...]] = ("zero", "clamp")

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _as_float(value: float | Tensor, name: str) -> float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        return float(value.item())
    return float(value)


def _check_support_sigmas(support_sigmas: float) -> float:
    c = float(support_sigmas)
    if not (math.isfinite(c) and c > 0):
        raise ValueError(f"support_sigmas must be a finite number > 0, got {support_sigmas!r}")
    return c


def _floored_sigma(sigma: float) -> float:
    # NaN stays NaN (and then gives weight 0); everything else is floored.
    return sigma if math.isnan(sigma) else max(sigma, SIGMA_FLOOR)


def _work_device(x: Tensor) -> torch.device:
    # MPS has no float64: compute there on the CPU (batches hold a few dozen episodes).
    return torch.device("cpu") if x.device.type == "mps" else x.device


def _out_dtype(x: Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def _checked(
    target: str | Target, support_sigmas: float, out_of_support: str, progress: float | None
) -> tuple[Target, float, float | None]:
    """The target, ``c`` and ``progress`` of both weight functions, checked (``ValueError`` naming the argument)."""
    target_obj = get_target(target)
    c = _check_support_sigmas(support_sigmas)
    if out_of_support not in OUT_OF_SUPPORT:
        raise ValueError(f"out_of_support must be one of {list(OUT_OF_SUPPORT)}, got {out_of_support!r}")
    if progress is not None and not 0.0 <= float(progress) <= 1.0:
        raise ValueError(f"progress must be in [0, 1], got {progress!r}")
    return target_obj, c, None if progress is None else float(progress)


def _finished(w: Tensor, valid: Tensor, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Weight 0 outside ``valid`` and for non-positive or NaN weights, overflow (+inf included) capped at ``dtype``'s
    maximum."""
    return torch.where(valid & (w > 0), w, 0.0).clamp(max=torch.finfo(dtype).max).to(device=device, dtype=dtype)


def support_interval(
    mu: float | Tensor, sigma: float | Tensor, support_sigmas: float = DEFAULT_SUPPORT_SIGMAS
) -> tuple[float, float]:
    """The support ``S = [mu - c sigma, mu + c sigma]`` (closed), with ``sigma`` floored.

    Args:
        mu: mean of the proposal.
        sigma: standard deviation of the proposal (floored at :data:`SIGMA_FLOOR`).
        support_sigmas: ``c``, half-width of ``S`` in standard deviations (default 2.58).

    Returns:
        ``(low, high)`` as Python floats.

    Raises:
        ValueError: if ``support_sigmas`` is not a finite number > 0.
    """
    c = _check_support_sigmas(support_sigmas)
    m, s = _as_float(mu, "mu"), _floored_sigma(_as_float(sigma, "sigma"))
    return m - c * s, m + c * s


def importance_weights(
    difficulties: Tensor,
    mu: float | Tensor,
    sigma: float | Tensor,
    target: str | Target = "uniform",
    support_sigmas: float = DEFAULT_SUPPORT_SIGMAS,
    out_of_support: str = "zero",
    progress: float | None = None,
) -> Tensor:
    """Importance weight ``w = p(difficulty) / q(difficulty)`` of each episode (detached).

    ``q`` is ``N(mu, sigma^2)`` truncated to ``S = [mu - c sigma, mu + c sigma]`` and renormalised
    (``Z = Phi(c) - Phi(-c)``); ``p`` is ``target`` renormalised on S. With ``z = (difficulty - mu) / sigma``
    the weight is ``w = p_z(z) Z sqrt(2 pi) exp(z^2 / 2)``; e.g. the uniform target gives
    ``w = Z / (2 c phi(z))``, from 0.48 at ``z = 0`` to 13.4 at ``|z| = c = 2.58``. These weights
    multiply the per-episode losses of Algorithm 1 (see :func:`weighted_loss`).

    Ends of S (and ``mu`` itself for the ``easy``/``hard`` halves) belong to the intervals. Computed
    in float64; non-finite difficulties (and NaN ``mu``/``sigma``) get weight 0; the result is always
    finite and >= 0 (capped at the largest value of the output dtype).

    Args:
        difficulties: per-episode difficulties (episode losses), any shape.
        mu: mean of the proposal.
        sigma: standard deviation of the proposal, floored at :data:`SIGMA_FLOOR` (1e-6).
        target: ``"baseline"`` (w = 1 for every finite difficulty, even outside S), ``"uniform"``,
            ``"easy"``, ``"hard"``, ``"curriculum"``, a name registered with
            :func:`~lightning_episodes.weighting.register_target`, or a
            :class:`~lightning_episodes.weighting.Target` instance.
        support_sigmas: ``c``, half-width of S in standard deviations (default 2.58).
        out_of_support: ``"zero"`` (default): weight 0 outside S; ``"clamp"``: evaluate both
            densities at the nearest end of S.
        progress: training progress ``t / T`` in ``[0, 1]``; required by ``"curriculum"``.

    Returns:
        Weights of the same shape as ``difficulties``, in its dtype (the default dtype for
        non-floating input) and on its device.

    Raises:
        ValueError: if ``target`` is unknown, ``support_sigmas`` is not a finite number > 0,
            ``out_of_support`` is not ``"zero"`` or ``"clamp"``, ``progress`` is outside
            ``[0, 1]``, or ``progress`` is missing for ``"curriculum"``.

    Example::

        >>> difficulties = torch.tensor([0.0, 2.58, 3.0], dtype=torch.float64)
        >>> w = importance_weights(difficulties, mu=0.0, sigma=1.0)  # uniform; 2.58 is the end of S
        >>> [round(v, 4) for v in w.tolist()]
        [0.481, 13.4136, 0.0]
        >>> w = importance_weights(difficulties, mu=0.0, sigma=1.0, out_of_support="clamp")
        >>> [round(v, 4) for v in w.tolist()]
        [0.481, 13.4136, 13.4136]
    """
    target_obj, c, progress = _checked(target, support_sigmas, out_of_support, progress)
    out_dtype = _out_dtype(difficulties)
    x = difficulties.detach().to(device=_work_device(difficulties), dtype=torch.float64)
    finite = torch.isfinite(x)
    if target_obj.plain_sampling:
        return finite.to(device=difficulties.device, dtype=out_dtype)

    m, s = _as_float(mu, "mu"), _floored_sigma(_as_float(sigma, "sigma"))
    low, high = m - c * s, m + c * s
    # Membership is decided in difficulty units, so an episode exactly at mu +- c sigma is inside.
    inside = finite & (x >= low) & (x <= high)
    z = ((x - m) / s).clamp(-c, c)  # clamp: the nearest end of S, also for z = +-inf
    valid = inside if out_of_support == "zero" else finite & ~torch.isnan(z)
    z = torch.where(valid, z, 0.0)

    normalizer = target_obj.normalizer(c, progress)
    if not (math.isfinite(normalizer) and normalizer > 0):
        return torch.zeros_like(x).to(device=difficulties.device, dtype=out_dtype)
    p = target_obj.density(z, c, progress).to(torch.float64) / normalizer
    # 1 / q_z(z) = Z sqrt(2 pi) exp(z^2 / 2), in log space to postpone overflow.
    w = p * torch.exp(0.5 * z * z + _LOG_SQRT_2PI + math.log(standard_normal_mass(c)))
    return _finished(w, valid, difficulties.device, out_dtype)


def density_ratio_weights(
    difficulties: Tensor,
    log_density: Callable[[Tensor], Tensor],
    low: float,
    high: float,
    target: str | Target = "uniform",
    support_sigmas: float = DEFAULT_SUPPORT_SIGMAS,
    out_of_support: str = "zero",
    progress: float | None = None,
) -> Tensor:
    """Importance weights ``w = p(difficulty) / q(difficulty)`` for any proposal density ``q`` (detached).

    The general form of :func:`importance_weights` (see ``docs/method.md``, "Proposals"). ``q`` is the
    proposal's density (``log_density``, untruncated) truncated to its central interval
    ``S = [low, high]`` of mass ``Z = Phi(c) - Phi(-c)`` and renormalised there: ``q_S = q / Z``. The target
    is defined on ``S`` through the affine standardisation ``z = (difficulty - a) / s`` with
    ``a = (low + high) / 2`` and ``s = (high - low) / (2 c)``, which maps ``S`` onto ``[-c, c]``: uniform is
    uniform over ``S``, easy/hard are its lower/upper halves, the curriculum's centre moves from ``low`` to
    ``high``. Then ``w = p_z(z) / (N s) * Z / q(difficulty)`` with ``N`` the target's normaliser. For a normal
    proposal ``a = mu``, ``s = sigma`` and this is :func:`importance_weights` (which the normal proposal uses,
    for its exact rounding).

    Args:
        difficulties: per-episode difficulties, any shape; non-finite ones get weight 0.
        log_density: ``log q`` of the proposal (untruncated), evaluated on float64 tensors inside ``S``.
        low: lower end of ``S`` (included).
        high: upper end of ``S`` (included), ``> low``.
        target: as in :func:`importance_weights`.
        support_sigmas: ``c``: ``S`` holds the mass ``Phi(c) - Phi(-c)`` of ``q``.
        out_of_support: ``"zero"`` or ``"clamp"`` (both densities at the nearest end of ``S``).
        progress: training progress ``t / T`` in ``[0, 1]``; required by ``"curriculum"``.

    Returns:
        Finite, non-negative weights of the shape, dtype and device of ``difficulties``.

    Raises:
        ValueError: for an unknown ``target`` or ``out_of_support``, ``support_sigmas`` not > 0, ``progress``
            outside ``[0, 1]``, or ``low``/``high`` not finite with ``low < high``.

    Example::

        >>> import math
        >>> log_q = lambda x: -0.5 * x * x - 0.5 * math.log(2 * math.pi)  # N(0, 1)
        >>> x = torch.tensor([0.0, 2.58], dtype=torch.float64)
        >>> torch.allclose(density_ratio_weights(x, log_q, -2.58, 2.58), importance_weights(x, 0.0, 1.0))
        True
    """
    target_obj, c, progress = _checked(target, support_sigmas, out_of_support, progress)
    low, high = float(low), float(high)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"the support [low, high] must be finite with low < high, got [{low!r}, {high!r}]")
    out_dtype = _out_dtype(difficulties)
    x = difficulties.detach().to(device=_work_device(difficulties), dtype=torch.float64)
    finite = torch.isfinite(x)
    if target_obj.plain_sampling:
        return finite.to(device=difficulties.device, dtype=out_dtype)
    center, scale = 0.5 * (low + high), (high - low) / (2.0 * c)
    inside = finite & (x >= low) & (x <= high)
    valid = inside if out_of_support == "zero" else finite
    x = torch.where(valid, x.clamp(low, high), center)
    z = ((x - center) / scale).clamp(-c, c)
    normalizer = target_obj.normalizer(c, progress)
    if not (math.isfinite(normalizer) and normalizer > 0):
        return torch.zeros_like(x).to(device=difficulties.device, dtype=out_dtype)
    p = target_obj.density(z, c, progress).to(torch.float64)
    log_ratio = math.log(standard_normal_mass(c)) - math.log(normalizer * scale) - log_density(x).to(torch.float64)
    w = p * torch.exp(log_ratio)
    return _finished(w, valid, difficulties.device, out_dtype)


def fraction_outside_support(
    difficulties: Tensor,
    mu: float | Tensor,
    sigma: float | Tensor,
    support_sigmas: float = DEFAULT_SUPPORT_SIGMAS,
) -> Tensor:
    """Fraction of the finite difficulties that lie outside ``S = [mu - c sigma, mu + c sigma]``.

    Args:
        difficulties: per-episode difficulties, any shape; non-finite values are left out of both
            the numerator and the denominator (they are counted separately as non-finite).
        mu: mean of the proposal.
        sigma: standard deviation of the proposal (floored at :data:`SIGMA_FLOOR`).
        support_sigmas: ``c``, half-width of S in standard deviations (default 2.58).

    Returns:
        A 0-d float64 tensor in ``[0, 1]`` on the device of ``difficulties`` (0 if no difficulty is
        finite).

    Raises:
        ValueError: if ``support_sigmas`` is not a finite number > 0.

    Example::

        >>> fraction_outside_support(torch.tensor([0.0, 1.0, 3.0, float("nan")]), 0.0, 1.0).item()
        0.3333333333333333
    """
    low, high = support_interval(mu, sigma, support_sigmas)
    x = difficulties.detach().to(device=_work_device(difficulties), dtype=torch.float64)
    finite = torch.isfinite(x)
    outside = finite & ~((x >= low) & (x <= high))
    count = finite.sum().to(torch.float64)
    fraction = outside.sum().to(torch.float64) / count.clamp(min=1.0)
    return fraction.to(difficulties.device)


def curriculum_progress(step: int, max_steps: int) -> float:
    """Training progress ``t / T`` for the curriculum target, clamped to ``[0, 1]``.

    Args:
        step: ``t``, the global optimizer step (warm-up included).
        max_steps: ``T``, the run's total number of optimizer steps (``trainer.max_steps``).

    Returns:
        ``min(max(step / max_steps, 0), 1)``.

    Raises:
        ValueError: if ``max_steps`` is not a positive integer (e.g. Lightning's ``-1`` = unlimited).

    Example::

        >>> curriculum_progress(250, 1000)
        0.25
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps <= 0:
        raise ValueError(
            f"max_steps must be a positive integer (the curriculum target needs trainer.max_steps), got {max_steps!r}"
        )
    return min(max(step / max_steps, 0.0), 1.0)

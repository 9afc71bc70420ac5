"""Target distributions over episode difficulty, and a registry to name them from configs.

A target is the distribution ``p`` that importance weighting moves the training episodes towards
(Arnold et al., NeurIPS 2021, Sec. 3.2). Every target lives on the support
``S = [mu - c sigma, mu + c sigma]`` of the proposal and is expressed in standardised units
``z = (difficulty - mu) / sigma`` on ``[-c, c]`` (``c = support_sigmas``): the importance weight depends
on ``z`` only, because ``sigma`` cancels in ``p / q``.

The extension point is one method, :meth:`Target.density`. The library renormalises the density on
``S`` itself (numerically, see :meth:`Target.normalizer`), so a custom target may return any
non-negative, integrable shape; built-in targets override :meth:`Target.normalizer` with the exact
closed form.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, overload

import numpy as np
import torch
from torch import Tensor

from lightning_episodes.weighting.registry import Component, Registry

__all__ = [
    "BaselineTarget",
    "CurriculumTarget",
    "EasyTarget",
    "HardTarget",
    "Target",
    "UniformTarget",
    "available_targets",
    "get_target",
    "register_target",
    "standard_normal_mass",
]

#: Composite Gauss-Legendre rule used to renormalise custom densities on ``[-c, c]``: ``_PANELS``
#: equal panels (an even number, so ``z = 0`` and both ends are panel edges and a density that
#: jumps there is integrated exactly) of ``_NODES`` nodes each. Smooth densities are integrated to
#: machine precision; a jump inside a panel costs an error of at most (panel width x jump).
_PANELS = 64
_NODES = 16
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(_NODES)

_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def standard_normal_mass(support_sigmas: float) -> float:
    """``Z = Phi(c) - Phi(-c)``: the mass of a standard normal on ``[-c, c]``.

    Args:
        support_sigmas: ``c``, the half-width of the support in standard deviations.

    Returns:
        The normaliser of the truncated normal proposal ``q`` (about 0.990 for ``c = 2.58``).
    """
    return math.erf(support_sigmas / _SQRT2)


def _normal_pdf(z: Tensor) -> Tensor:
    return torch.exp(-0.5 * z * z - _LOG_SQRT_2PI)


class Target(Component, ABC):
    """A target distribution ``p`` over standardised difficulty ``z`` on ``[-c, c]``.

    Subclasses implement :meth:`density`. It is called only with ``z`` inside the support
    ``[-c, c]`` (both ends included), as a float64 tensor, and must return a tensor of the same shape
    with non-negative values. It need not be normalised: the library divides by
    :meth:`normalizer`, which integrates :meth:`density` over ``[-c, c]`` with a composite
    Gauss-Legendre rule (64 panels x 16 nodes; exact to rounding for smooth densities and for
    jumps at ``z = 0`` or at the ends). Override :meth:`normalizer` with a closed form when the
    density jumps elsewhere or when speed matters. Register a subclass with
    :func:`register_target` to name it in YAML configs.

    Example::

        >>> class Triangular(Target):
        ...     '''Density rising linearly from the easiest to the hardest episodes.'''
        ...     def density(self, z, support_sigmas, progress):
        ...         return z + support_sigmas  # unnormalised: the library renormalises it on S
        >>> round(Triangular().normalizer(2.0, None), 12)  # integral of z + 2 over [-2, 2]
        8.0
    """

    #: ``True`` for plain sampling: every finite difficulty gets weight 1, even outside the support (the weighting
    #: callback then never checks the proposal's fit, and its runs are the baseline arm).
    plain_sampling: ClassVar[bool] = False
    #: ``True`` when :meth:`density` needs the training progress ``t / T`` (``ValueError`` for ``None``): the
    #: weighting callback then requires ``trainer.max_steps`` and logs ``weighting/mu_t``.
    needs_progress: ClassVar[bool] = False

    @abstractmethod
    def density(self, z: Tensor, support_sigmas: float, progress: float | None) -> Tensor:
        """Density of the target at standardised difficulties ``z``, up to a constant factor.

        Args:
            z: float64 tensor of standardised difficulties ``(difficulty - mu) / sigma`` in
                ``[-support_sigmas, support_sigmas]``.
            support_sigmas: ``c``, the half-width of the support in standard deviations.
            progress: training progress ``t / T`` in ``[0, 1]``, or ``None`` when unknown.

        Returns:
            Non-negative values of the same shape as ``z``.
        """

    def normalizer(self, support_sigmas: float, progress: float | None) -> float:
        """Integral of :meth:`density` over ``[-c, c]`` (the constant that renormalises it on S).

        Args:
            support_sigmas: ``c``, the half-width of the support in standard deviations.
            progress: training progress ``t / T`` in ``[0, 1]``, or ``None``.

        Returns:
            The integral; the weights are 0 wherever it is not finite and positive.
        """
        c = float(support_sigmas)
        edges = np.linspace(-c, c, _PANELS + 1)
        half = 0.5 * (edges[1:] - edges[:-1])
        mid = 0.5 * (edges[1:] + edges[:-1])
        nodes = (mid[:, None] + half[:, None] * _GL_NODES[None, :]).ravel()
        weights = (half[:, None] * _GL_WEIGHTS[None, :]).ravel()
        values = self.density(torch.from_numpy(nodes), c, progress).to(torch.float64)
        return float((values * torch.from_numpy(weights)).sum())


class BaselineTarget(Target):
    """Plain episode sampling: ``p = q``, so every finite difficulty has weight 1 (even outside S)."""

    plain_sampling = True

    def density(self, z: Tensor, support_sigmas: float, progress: float | None) -> Tensor:
        return _normal_pdf(z)

    def normalizer(self, support_sigmas: float, progress: float | None) -> float:
        return standard_normal_mass(support_sigmas)


class UniformTarget(Target):
    """``U[mu - c sigma, mu + c sigma]``: uniform over the whole support (the paper's method)."""

    def density(self, z: Tensor, support_sigmas: float, progress: float | None) -> Tensor:
        return torch.ones_like(z)

    def normalizer(self, support_sigmas: float, progress: float | None) -> float:
        return 2.0 * support_sigmas


class EasyTarget(Target):
    """``U[mu - c sigma, mu]``: uniform over the easier half of the support (``z = 0`` included)."""

    def density(self, z: Tensor, support_sigmas: float, progress: float | None) -> Tensor:
        return (z <= 0).to(z.dtype)

    def normalizer(self, support_sigmas: float, progress: float | None) -> float:
        return float(support_sigmas)


class HardTarget(Target):
    """``U[mu, mu + c sigma]``: uniform over the harder half of the support (``z = 0`` included)."""

    def density(self, z: Tensor, support_sigmas: float, progress: float | None) -> Tensor:
        return (z >= 0).to(z.dtype)

    def normalizer(self, support_sigmas: float, progress: float | None) -> float:
        return float(support_sigmas)


class CurriculumTarget(Target):
    """``N(mu_t, sigma^2)`` truncated to S, from easy to hard: ``mu_t = mu - c sigma + 2 c sigma t / T``.

    In ``z`` units the mean is ``z_t = c (2 progress - 1)``. Renormalising on S doubles the density
    when ``mu_t`` sits at an end of S; that is intended.

    Raises:
        ValueError: (when evaluated) if ``progress`` is ``None``, not finite or outside ``[0, 1]``.
    """

    needs_progress = True

    @staticmethod
    def center(support_sigmas: float, progress: float | None) -> float:
        """``z_t = -c + 2 c progress``, the standardised mean of the target at this progress."""
        if progress is None or not 0.0 <= progress <= 1.0:
            raise ValueError(
                f"progress must be the training progress t / T in [0, 1] for target 'curriculum', got {progress!r}"
            )
        return support_sigmas * (2.0 * float(progress) - 1.0)

    def density(self, z: Tensor, support_sigmas: float, progress: float | None) -> Tensor:
        return _normal_pdf(z - self.center(support_sigmas, progress))

    def normalizer(self, support_sigmas: float, progress: float | None) -> float:
        center = self.center(support_sigmas, progress)
        # Phi(c - z_t) - Phi(-c - z_t), through erf differences.
        return 0.5 * (math.erf((support_sigmas - center) / _SQRT2) - math.erf((-support_sigmas - center) / _SQRT2))


def _instance(value: Any) -> Target:
    if isinstance(value, type) and issubclass(value, Target):
        return value()
    if isinstance(value, Target):
        return value
    raise TypeError(f"target must be a Target instance or subclass, got {value!r}")


#: the built-in targets in the order of the paper's tables (Arnold et al., 2021, Table 1): plain sampling first
_REGISTRY: Final[Registry[Target]] = Registry(
    "target", Target, _instance, ("baseline", "easy", "hard", "curriculum", "uniform")
)
_REGISTRY.builtin("baseline", BaselineTarget())
_REGISTRY.builtin("easy", EasyTarget())
_REGISTRY.builtin("hard", HardTarget())
_REGISTRY.builtin("curriculum", CurriculumTarget())
_REGISTRY.builtin("uniform", UniformTarget())

_TargetLike = Target | type[Target]


@overload
def register_target(
    name: str, target: None = None, *, overwrite: bool = False
) -> Callable[[type[Target]], type[Target]]: ...
@overload
def register_target(name: str, target: _TargetLike, *, overwrite: bool = False) -> _TargetLike: ...
def register_target(
    name: str, target: _TargetLike | None = None, *, overwrite: bool = False
) -> _TargetLike | Callable[[type[Target]], type[Target]]:
    """Registers a custom target under ``name``, so configs can write ``target: <name>``.

    Use it as a call with a :class:`Target` instance or subclass (a subclass is instantiated once
    without arguments), or as a class decorator when ``target`` is omitted.

    Args:
        name: the name configs use. Built-in names cannot be replaced; they never contain a dot, so a dotted name
            (``"mylab.triangular"``) is safe from the targets later versions add.
        target: a :class:`Target` instance or subclass; ``None`` returns a decorator.
        overwrite: allow replacing a custom target already registered under ``name``.

    Returns:
        ``target`` unchanged, or a class decorator.

    Raises:
        ValueError: if ``name`` is empty, built-in, or taken and ``overwrite`` is false.
        TypeError: if ``target`` is not a :class:`Target` instance or subclass.

    Example::

        >>> @register_target("mylab.linear_hard", overwrite=True)
        ... class LinearHard(Target):
        ...     def density(self, z, support_sigmas, progress):
        ...         return z + support_sigmas
        >>> get_target("mylab.linear_hard")
        LinearHard()
    """
    return _REGISTRY.register_or_decorate(name, target, overwrite)


def available_targets() -> tuple[str, ...]:
    """The names :func:`get_target` accepts: the built-in targets in the paper's order (``baseline``, ``easy``,
    ``hard``, ``curriculum``, ``uniform``), then registered ones in registration order."""
    return _REGISTRY.names()


def get_target(target: str | Target | Mapping[str, Any]) -> Target:
    """Resolves a target name (built-in or registered), a class path, or ``{"class_path": ..., "init_args": ...}``,
    or passes a :class:`Target` through.

    Args:
        target: a name from :func:`available_targets` (a dotted name not registered yet is looked for in the module
            it names, ``mylab.triangular``: ``mylab``), a class path (``"mylab.Triangular"``: built with its
            defaults), a mapping with ``class_path`` and ``init_args``, or a :class:`Target` instance.

    Returns:
        The :class:`Target` instance.

    Raises:
        ValueError: if ``target`` names no target (the message lists the known names and how to make one's own
            found).
    """
    return _REGISTRY.resolve(target)

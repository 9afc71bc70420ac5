"""Determinantal point process (DPP) task samplers: diverse class sets from the classes' features.

Kumar et al. (AAAI 2023, "The Effect of Diversity in Meta-Learning") draw each episode's ``ways`` classes from a
k-DPP whose kernel is ``L = Phi Phi^T``, ``Phi[c]`` the mean feature of class ``c``'s images: a set ``S`` of ``k``
classes comes with probability ``det(L_S) / e_k(L)`` (``e_k``: the k-th elementary symmetric polynomial of ``L``'s
eigenvalues), so classes whose features point in different directions meet more often than under uniform sampling.

- :class:`StaticDPP` (their sDPP): the features of a frozen model trained with plain sampling
  (``reference_checkpoint``), computed once before training;
- :class:`DynamicDPP` (their dDPP): the features of the model being trained, uniform classes for ``warmup_steps``
  steps, then recomputed every ``refresh_every`` steps.

The exact k-DPP sampler (:func:`sample_k_dpp`) is Kulesza and Taskar's ("Determinantal point processes for machine
learning", 2012, Algorithms 1 and 8) on the eigendecomposition of ``L`` in float64, driven by the episode's own
generator: a choice is a pure function of ``(seed, step, j, Phi)``. The features are the sampler's state (the
eigendecomposition is recomputed from them), checkpointed with the data module.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lightning_episodes.data.task_samplers import TaskSampler, _draw, _generator, _shuffled

__all__ = ["DynamicDPP", "StaticDPP", "elementary_symmetric", "sample_k_dpp"]

#: eigenvalues below this share of the largest count as zero (the kernel's numerical rank)
_RANK_TOLERANCE = 1e-10


def elementary_symmetric(eigenvalues: Tensor, k: int) -> Tensor:
    """``E[l, n] = e_l(eigenvalues[:n])`` for ``l <= k``, ``n <= N`` (float64 ``[k + 1, N + 1]``), by the recursion
    ``e_l(λ_1..λ_n) = e_l(λ_1..λ_{n-1}) + λ_n e_{l-1}(λ_1..λ_{n-1})``.

    Example::

        >>> elementary_symmetric(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), 2)[:, -1].tolist()
        [1.0, 6.0, 11.0]
    """
    size = len(eigenvalues)
    table = torch.zeros(k + 1, size + 1, dtype=torch.float64)
    table[0] = 1.0
    for n in range(1, size + 1):
        table[1:, n] = table[1:, n - 1] + eigenvalues[n - 1] * table[:-1, n - 1]
    return table


def sample_k_dpp(
    eigenvalues: Tensor, eigenvectors: Tensor, k: int, generator: torch.Generator, table: Tensor | None = None
) -> Tensor:
    """``k`` distinct items of ``0..N-1`` from the k-DPP of ``L = V diag(eigenvalues) V^T``: a set ``S`` with
    probability ``det(L_S) / e_k(eigenvalues)``, in the order the sequential sampler picks them.

    Kulesza and Taskar (2012), Algorithm 8 (``k`` eigenvectors, eigenvector ``n`` kept with probability
    ``λ_n e_{l-1}(λ_1..λ_{n-1}) / e_l(λ_1..λ_n)``) then Algorithm 1 (items from the elementary DPP they span).
    It takes ``N + k`` float64 uniforms of ``generator`` whatever the draw, so the stream after it is fixed.

    Args:
        eigenvalues: ``[N]`` float64, non-negative, at least ``k`` of them positive.
        eigenvectors: ``[N, N]`` float64 orthonormal columns.
        k: the set's size.
        generator: the episode's random numbers.
        table: :func:`elementary_symmetric` of ``eigenvalues`` and ``k``, if already computed.

    Returns:
        int64 ``[k]``.
    """
    size = len(eigenvalues)
    table = elementary_symmetric(eigenvalues, k) if table is None else table
    uniforms = torch.rand(size + k, generator=generator, dtype=torch.float64).tolist()
    values, e = eigenvalues.tolist(), table.tolist()
    chosen, remaining = [], k
    for n in range(size, 0, -1):
        if remaining == 0:
            break
        keep = values[n - 1] * e[remaining - 1][n - 1] / e[remaining][n]
        if uniforms[n - 1] < keep or n == remaining:  # n == remaining: every one left is needed (keep is 1)
            chosen.append(n - 1)
            remaining -= 1
    basis = eigenvectors[:, chosen]  # [N, k] orthonormal columns spanning the elementary DPP
    items = []
    for u in uniforms[size:]:
        weights = basis.square().sum(1)  # P(i) = |row i of the basis|^2 / (columns left)
        item = _draw(weights.clamp(min=0.0).log(), u)
        items.append(item)
        # the subspace orthogonal to e_item: eliminate the column with the largest entry in row item
        pivot = int(basis[item].abs().argmax())
        column = basis[:, pivot]
        basis = basis - column[:, None] * (basis[item] / column[item])[None, :]
        basis = torch.cat([basis[:, :pivot], basis[:, pivot + 1 :]], dim=1)
        if basis.shape[1]:
            basis = torch.linalg.qr(basis).Q
    return torch.tensor(items, dtype=torch.long)


class _DPPSampler(TaskSampler):
    """What both DPP samplers share: the class features as state, the kernel's eigendecomposition, the draw."""

    adaptive = True
    needs_class_features = True

    def __init__(self, images_per_class: int) -> None:
        if isinstance(images_per_class, bool) or not isinstance(images_per_class, int) or images_per_class < 1:
            raise ValueError(f"task_sampler.images_per_class must be an integer >= 1, got {images_per_class!r}")
        self.images_per_class = images_per_class
        #: ``Phi``: float64 ``[N, D]`` mean feature of each training class (``None``: not computed yet)
        self.features: Tensor | None = None
        self._spectrum: tuple[Tensor, Tensor, Tensor] | None = None

    def set_class_features(self, features: Tensor) -> None:
        """Sets ``Phi`` (``[N, D]``) and the kernel's eigendecomposition; warns (and samples uniform classes) when
        ``L`` has fewer than ``ways`` positive eigenvalues, where no set of ``ways`` classes has a positive
        determinant."""
        if features.ndim != 2 or len(features) != self.num_classes:
            raise ValueError(f"expected features [{self.num_classes}, D], got {tuple(features.shape)}")
        self.features = features.detach().to("cpu", torch.float64).clone()
        eigenvalues, eigenvectors = torch.linalg.eigh(self.features @ self.features.T)
        top = float(eigenvalues.max()) if len(eigenvalues) else 0.0
        # the k-DPP is the same for c·L: scaling by the largest eigenvalue keeps e_k(λ) in range
        eigenvalues = torch.where(eigenvalues > _RANK_TOLERANCE * top, eigenvalues / max(top, 1e-300), 0.0)
        if int((eigenvalues > 0).sum()) < self.ways:
            warnings.warn(
                f"{self!r}: the class features span {int((eigenvalues > 0).sum())} dimensions, fewer than "
                f"ways={self.ways}: no {self.ways} classes have a positive determinant, so classes are uniform "
                "until the next features",
                stacklevel=2,
            )
            self._spectrum = None
            return
        self._spectrum = (eigenvalues, eigenvectors, elementary_symmetric(eigenvalues, self.ways))

    def classes(self, seed: int, step: int, episodes: Sequence[int]) -> Tensor:
        if self._spectrum is None or not self._ready(step):
            return torch.stack([self._uniform(seed, step, j) for j in episodes])
        eigenvalues, eigenvectors, table = self._spectrum
        chosen = []
        for j in episodes:
            generator = _generator(seed, step, j)
            picked = sample_k_dpp(eigenvalues, eigenvectors, self.ways, generator, table)
            chosen.append(_shuffled(picked, generator))  # the labels' order: uniform given the set
        return torch.stack(chosen)

    def _ready(self, step: int) -> bool:
        return True

    def state_dict(self) -> dict[str, Any]:
        return {} if self.features is None else {"features": self.features.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("features") is not None:
            self.set_class_features(torch.as_tensor(state["features"]))


class StaticDPP(_DPPSampler):
    """Static DPP task sampling (Kumar et al., AAAI 2023's sDPP): each episode's classes from the k-DPP of
    ``L = Phi Phi^T``, ``Phi`` the mean features (the backbone's, in eval mode) of ``images_per_class`` training
    images of every class under a frozen model trained with plain sampling, computed once before training.

    Args:
        reference_checkpoint: a checkpoint of this library's model trained with plain sampling on the same data.
        images_per_class: training images per class whose features are averaged, ``>= 1``.

    Raises:
        ValueError: for an argument out of its range.
    """

    def __init__(self, reference_checkpoint: str | Path, images_per_class: int = 5) -> None:
        super().__init__(images_per_class)
        self.class_features_from = str(reference_checkpoint)

    def class_features_due(self, step: int) -> bool:
        return step < 0  # once, before the first step


class DynamicDPP(_DPPSampler):
    """Dynamic DPP task sampling (Kumar et al., AAAI 2023's dDPP): uniform classes for ``warmup_steps`` steps, then
    each episode's classes from the k-DPP of ``L = Phi Phi^T``, ``Phi`` the mean features (the backbone's, in eval
    mode) of ``images_per_class`` training images of every class under the model being trained, recomputed every
    ``refresh_every`` steps.

    Args:
        warmup_steps: steps of uniform sampling first, ``>= 0`` (Kumar et al.: 500).
        refresh_every: steps between two computations of the features, ``>= 1`` (Kumar et al.: 500).
        images_per_class: training images per class whose features are averaged, ``>= 1``.

    Raises:
        ValueError: for an argument out of its range.
    """

    def __init__(self, warmup_steps: int = 500, refresh_every: int = 500, images_per_class: int = 5) -> None:
        super().__init__(images_per_class)
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"task_sampler.warmup_steps must be an integer >= 0, got {warmup_steps!r}")
        if isinstance(refresh_every, bool) or not isinstance(refresh_every, int) or refresh_every < 1:
            raise ValueError(f"task_sampler.refresh_every must be an integer >= 1, got {refresh_every!r}")
        self.warmup_steps, self.refresh_every = warmup_steps, refresh_every

    def class_features_due(self, step: int) -> bool:
        upcoming = step + 1  # the features computed after ``step`` serve the steps from ``step + 1`` on
        return upcoming >= self.warmup_steps and (upcoming - self.warmup_steps) % self.refresh_every == 0

    def _ready(self, step: int) -> bool:
        return step >= self.warmup_steps

"""Input conversion shared by the analysis functions: numpy arrays, torch tensors or sequences in."""

from __future__ import annotations

import numpy as np

from lightning_episodes.evaluation._arrays import ArrayLike, raw_numpy, to_numpy

__all__ = ["ArrayLike", "as_indices", "as_matrix", "as_vector", "check_finite", "raw_numpy", "to_numpy"]


def as_vector(values: ArrayLike, name: str, min_size: int = 1) -> np.ndarray:
    """``values`` as a finite 1-d float64 array of at least ``min_size`` elements.

    Raises:
        ValueError: naming ``name`` if ``values`` is not 1-d, too short or holds NaN/inf.
    """
    array = to_numpy(values)
    if array.ndim != 1:
        raise ValueError(f"`{name}` must be 1-dimensional, got shape {tuple(array.shape)}")
    if array.size < min_size:
        raise ValueError(f"`{name}` needs at least {min_size} values, got {array.size}")
    check_finite(array, name)
    return array


def as_matrix(values: ArrayLike, name: str) -> np.ndarray:
    """``values`` as a finite, non-empty 2-d float64 array.

    Raises:
        ValueError: naming ``name`` if ``values`` is not 2-d, empty or holds NaN/inf.
    """
    array = to_numpy(values)
    if array.ndim != 2 or array.size == 0:
        raise ValueError(f"`{name}` must be a non-empty 2-d array, got shape {tuple(array.shape)}")
    check_finite(array, name)
    return array


def as_indices(indices: ArrayLike, name: str, size: int) -> np.ndarray:
    """``indices`` as a non-empty 1-d int64 array of unique positions in ``range(size)``.

    Raises:
        ValueError: naming ``name`` if the indices are empty, not integral, repeated or out of range.
    """
    array = raw_numpy(indices)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"`{name}` must be a non-empty 1-d array of indices, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"`{name}` must hold integers, got dtype {array.dtype}")
    array = array.astype(np.int64)
    if array.min() < 0 or array.max() >= size:
        raise ValueError(f"`{name}` must lie in [0, {size}), got values in [{array.min()}, {array.max()}]")
    if np.unique(array).size != array.size:
        raise ValueError(f"`{name}` must not repeat an index")
    return array


def check_finite(array: np.ndarray, name: str) -> None:
    """Raise a ValueError naming ``name`` and the count if ``array`` holds NaN or inf."""
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise ValueError(
            f"`{name}` holds {bad} non-finite value(s) (NaN/inf); drop them first, e.g. values[np.isfinite(values)]"
        )

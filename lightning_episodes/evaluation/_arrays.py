"""Numbers in (numpy arrays, torch tensors or sequences) as numpy arrays; shared with the analyses."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Anything the tables and the analysis functions accept as numbers: a numpy array, a torch tensor (any device,
#: with or without grad) or a (nested) sequence of numbers.
ArrayLike = Any


def raw_numpy(values: ArrayLike) -> np.ndarray:
    """``values`` as a numpy array of its own dtype (torch tensors are detached and moved to the CPU)."""
    if hasattr(values, "detach") and hasattr(values, "cpu"):
        values = values.detach().cpu().numpy()
    return np.asarray(values)


def to_numpy(values: ArrayLike) -> np.ndarray:
    """``values`` as a float64 numpy array (torch tensors are detached and moved to the CPU)."""
    return raw_numpy(values).astype(np.float64, copy=False)

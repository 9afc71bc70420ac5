"""Which path a backbone takes on a device: a CPU embeds episodes one at a time, an accelerator all at once.

A dry run on the ``meta`` device (shapes, no data: :mod:`lightning_episodes.algorithms.memory`) stands in for the
device it estimates, inside :func:`meta_stands_for`, so that it takes that device's path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from torch import Tensor

#: the device type a ``meta`` tensor stands for (``meta``: itself)
_META_STANDS_FOR: ContextVar[str] = ContextVar("meta_stands_for", default="meta")


def on_cpu(tensor: Tensor) -> bool:
    """Whether ``tensor`` takes the CPU's path: it is on the CPU, or on ``meta`` in a dry run standing in for a CPU."""
    device = tensor.device.type
    return device == "cpu" or (device == "meta" and _META_STANDS_FOR.get() == "cpu")


@contextlib.contextmanager
def meta_stands_for(device_type: str) -> Iterator[None]:
    """While the block runs, ``meta`` tensors take the path of ``device_type`` (``cpu``, ``cuda``)."""
    token = _META_STANDS_FOR.set(device_type)
    try:
        yield
    finally:
        _META_STANDS_FOR.reset(token)

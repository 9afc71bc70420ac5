"""The non-finite guard's count of skipped steps, kept on the device so that a step is judged without a host read.

:class:`Tally` holds every counter in one small float32 tensor on the model's device; :meth:`Tally.judge` updates it
with one step's flags (a few tiny kernels, no synchronisation) and returns the step's skip flag, which a fused
optimiser consumes as ``found_inf`` (its kernel then changes no parameter and no state). :meth:`Tally.read` brings
the counters to the host in one transfer, when the guard chooses to look (logging steps, every ``max_consecutive``
steps, the end of training).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

# the fields of Tally.values, in order; steps are global steps (float32: exact below 2**24 = 16.7 M steps)
_RUN, _SKIPPED, _LIMIT, _FIRST, _LAST = range(5)
_KINDS = slice(5, 8)  # gradients, parameters, buffers: whether any skipped step since the last read had them


class Reading(NamedTuple):
    """The counters since the last read, on the host."""

    #: non-finite steps in a row up to the last judged step
    run: int
    #: steps skipped since the last read
    skipped: int
    #: the step at which the run of non-finite steps first reached the limit since the last read, or -1
    limit_step: int
    #: the first and the last skipped step since the last read (-1 if none)
    first: int
    last: int
    #: for each of gradients, parameters, buffers: whether a skipped step since the last read had it non-finite
    kinds: tuple[bool, bool, bool]


class Tally:
    """Counters of non-finite steps on ``device``.

    Args:
        limit: the run of non-finite steps in a row whose length stops training (``max_consecutive``).
        device: where the flags are computed.
        run: non-finite steps in a row before the first judged step (from a checkpoint or the host path).

    Example::

        >>> tally = Tally(limit=2, device=torch.device("cpu"))
        >>> [float(tally.judge(torch.tensor(flags), step)) for step, flags in enumerate([[0.0, 0, 0], [1.0, 0, 0]])]
        [0.0, 1.0]
        >>> tally.read()
        Reading(run=1, skipped=1, limit_step=-1, first=1, last=1, kinds=(True, False, False))
        >>> _ = [tally.judge(torch.tensor([0.0, 1, 0]), step) for step in (2, 3)]
        >>> tally.read()
        Reading(run=3, skipped=2, limit_step=2, first=2, last=3, kinds=(False, True, False))
    """

    def __init__(self, limit: int, device: torch.device, run: int = 0) -> None:
        self.limit = limit
        # filled on the device: torch.tensor(list, device="cuda") copies from pageable host memory, a synchronising
        # transfer, and the tally is made inside the first step that the device decides
        self.values = torch.zeros(8, dtype=torch.float32, device=device)
        self.values[_RUN].fill_(run)
        self._reset_window()

    def judge(self, kinds: Tensor, step: int) -> Tensor:
        """Count one step whose ``kinds`` flags (``[3]``, > 0: non-finite gradients, parameters, buffers; summed
        over ranks) are on the device; return its skip flag (0-d float32, 1 = skip) without a host read."""
        v = self.values
        bad = (kinds.sum() > 0).to(v.dtype)
        run = (v[_RUN] + 1) * bad
        reached = (run >= self.limit) & (v[_LIMIT] < 0)
        first = torch.where((v[_FIRST] < 0) & (bad > 0), step, v[_FIRST])
        last = torch.where(bad > 0, step, v[_LAST])
        seen = torch.maximum(v[_KINDS], (kinds > 0).to(v.dtype))
        limit = torch.where(reached, step, v[_LIMIT])
        torch.cat([torch.stack([run, v[_SKIPPED] + bad, limit, first, last]), seen], out=v)
        return bad

    def read(self) -> Reading:
        """The counters since the last read (one host transfer), the window counters then reset on the device."""
        values = [int(x) for x in self.values.tolist()]
        self._reset_window()
        run, skipped, limit_step, first, last, g, p, b = values
        return Reading(run, skipped, limit_step, first, last, kinds=(bool(g), bool(p), bool(b)))

    def _reset_window(self) -> None:
        """Zero the counters since the last read and mark their steps unset (-1), on the device."""
        self.values[_SKIPPED:].fill_(0)
        self.values[_LIMIT : _LAST + 1].fill_(-1)

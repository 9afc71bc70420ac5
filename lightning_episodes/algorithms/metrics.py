"""Mean ± 95% confidence interval over episodes, synchronised across processes."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric


class EpisodeMeanCI(Metric):
    r"""Mean of per-episode values with the few-shot literature's 95% interval half-width.

    .. math:: \bar a = \frac1n\sum_i a_i,\qquad \mathrm{CI}_{95} = 1.96\,\frac{\sigma}{\sqrt n}

    with :math:`\sigma` the standard deviation over episodes (``ddof = 0``, as in ``np.std``). The state is
    float64 sums, so 10,000 episodes lose no precision, and ``compute`` sums them over processes.

    Args:
        z: the normal quantile of the interval (1.96 for 95%).

    Example::

        >>> metric = EpisodeMeanCI()
        >>> metric.update(torch.tensor([0.5, 1.0, 0.75, 0.75]))
        >>> mean, ci, count = metric.compute()
        >>> round(float(mean), 4), round(float(ci), 4), int(count)
        (0.75, 0.1732, 4)
    """

    full_state_update = False
    higher_is_better = True
    total: Tensor
    total_sq: Tensor
    count: Tensor

    def __init__(self, z: float = 1.96, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if z <= 0:
            raise ValueError(f"z must be > 0, got {z}")
        self.z = z
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total_sq", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, values: Tensor) -> None:
        values = values.detach().double().flatten()
        self.total += values.sum()
        self.total_sq += (values**2).sum()
        self.count += values.numel()

    def compute(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(mean, ci95 half-width, number of episodes)`` over all processes."""
        count = self.count.double()
        mean = self.total / count
        var = (self.total_sq / count - mean**2).clamp_min(0)
        return mean, self.z * var.sqrt() / count.sqrt(), count

"""Mean ± 95% confidence interval over episodes, and each episode's scores, synchronised across processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torchmetrics import Metric

from lightning_episodes.weighting.loss import stat_dtype


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


class ScoredEpisodes(NamedTuple):
    """Each evaluated episode's id, difficulty and accuracy, in episode-id order, on the CPU.

    Attributes:
        episode_ids: int64 ``[N]``, ascending.
        difficulty: float64 ``[N]``: each episode's ``EpisodeOutput.difficulty`` (the query loss).
        accuracy: float64 ``[N]``: each episode's query accuracy.
    """

    episode_ids: Tensor
    difficulty: Tensor
    accuracy: Tensor


class EpisodeScores:
    """Collects each evaluated episode's id, difficulty and accuracy on the device (no host sync per batch) and
    gathers them over processes once, at the end, in episode-id order.

    Example::

        >>> scores = EpisodeScores()
        >>> scores.update(torch.tensor([2, 0]), torch.tensor([0.5, 1.5]), torch.tensor([1.0, 0.25]))
        >>> scores.update(torch.tensor([1]), torch.tensor([0.75]), torch.tensor([0.5]))
        >>> scores.compute().episode_ids.tolist(), scores.compute().accuracy.tolist()
        ([0, 1, 2], [0.25, 0.5, 1.0])
    """

    def __init__(self) -> None:
        self.rows: list[Tensor] = []

    def reset(self) -> None:
        self.rows = []

    def update(self, episode_ids: Tensor, difficulty: Tensor, accuracy: Tensor) -> None:
        """Adds a batch: ``[B]`` ids, difficulties and accuracies (detached; kept on their device)."""
        dtype = stat_dtype(difficulty.device)  # ids stay exact: below 2^24 episodes even in float32 (MPS)
        columns = (episode_ids, difficulty.detach(), accuracy.detach())
        self.rows.append(torch.stack([c.reshape(-1).to(difficulty.device, dtype) for c in columns], dim=1))

    def compute(
        self,
        all_gather: Callable[[Tensor], Tensor] | None = None,
        world_size: int = 1,
        device: torch.device | None = None,
    ) -> ScoredEpisodes:
        """Every process's episodes, sorted by id (a collective when ``world_size > 1``: every rank calls it).

        Args:
            all_gather: stacks a tensor of equal shape from every process (``LightningModule.all_gather``).
            world_size: the number of processes.
            device: where the rows are (the module's device; a rank without episodes gathers from there).
        """
        device = torch.device("cpu") if device is None else device
        rows = torch.cat(self.rows) if self.rows else torch.zeros(0, 3, dtype=stat_dtype(device), device=device)
        if world_size > 1:
            assert all_gather is not None, "several processes need all_gather"
            counts = all_gather(torch.tensor([rows.shape[0]], device=rows.device)).reshape(-1).tolist()
            padded = rows.new_zeros(max(counts), 3)  # all_gather needs one shape: pad to the longest, then cut
            padded[: rows.shape[0]] = rows
            gathered = all_gather(padded).reshape(world_size, max(counts), 3)
            rows = torch.cat([gathered[rank, :count] for rank, count in enumerate(counts)])
        rows = rows.to("cpu", torch.float64)
        rows = rows[torch.argsort(rows[:, 0], stable=True)]
        return ScoredEpisodes(rows[:, 0].long(), rows[:, 1].contiguous(), rows[:, 2].contiguous())

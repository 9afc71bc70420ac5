"""The iterable datasets behind the data module's loaders.

Both yield whole batches (``DataLoader(batch_size=None)``). Lightning never shards an
``IterableDataset``, so rank and worker awareness lives here:

* training: global step ``s`` holds episodes ``j = 0..B-1``; rank ``r`` of ``W`` yields the slice
  ``j ∈ [r·B/W, (r+1)·B/W)``, and dataloader worker ``w`` of ``n`` yields the steps ``s ≡ w (mod n)``
  (workers split *steps*, not streams), so the global batch never depends on devices or workers;
* evaluation: a fixed set of episodes ``i = 0..count-1``; rank ``r`` takes ``i ≡ r (mod W)`` (no
  padding, so no episode is counted twice), and workers split the rank's batches; its length is the rank's number
  of batches (so Lightning's progress bars show their totals).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count as count_from

from torch.utils.data import IterableDataset, get_worker_info

from lightning_episodes.data.assembly import EpisodeAssembler
from lightning_episodes.data.episode import Episode, EpisodeIdentity
from lightning_episodes.data.sampler import EpisodeSampler


def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def rank_slice(batch_size: int, rank: int, world_size: int) -> range:
    """The positions ``j`` of a global step's ``batch_size`` training episodes that rank ``rank`` of ``world_size``
    trains on: ``[r B / W, (r + 1) B / W)`` (``batch_size`` divisible by ``world_size``).

    Example:
        >>> rank_slice(8, 1, 2)
        range(4, 8)
    """
    return range(rank * batch_size // world_size, (rank + 1) * batch_size // world_size)


class TrainingEpisodes(IterableDataset):
    """The training stream from global step ``start_step`` on (forever, or to the end of the epoch).

    Args:
        sampler: draws the episodes.
        seed: the run's data seed.
        batch_size: episodes per global step, over all ranks.
        rank: this process's rank.
        world_size: number of processes.
        start_step: the first global step to yield (``trainer.global_step`` when the loader is built).
        steps_per_epoch: if set, stop at the end of the epoch that contains ``start_step``.
        assembler: if set, yield gathered uint8 :class:`Episode` batches, else :class:`EpisodeIdentity`
            batches (gathered later on the device). Normalisation always happens on the device.
    """

    def __init__(
        self,
        sampler: EpisodeSampler,
        seed: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        start_step: int = 0,
        steps_per_epoch: int | None = None,
        assembler: EpisodeAssembler | None = None,
    ) -> None:
        if batch_size % world_size:
            raise ValueError(
                f"data.episodes_per_batch={batch_size} must be divisible by the number of devices ({world_size})"
            )
        self.sampler, self.seed, self.batch_size = sampler, seed, batch_size
        self.local = rank_slice(batch_size, rank, world_size)
        self.start_step, self.steps_per_epoch = start_step, steps_per_epoch
        self.assembler = assembler

    def identities(self, step: int) -> EpisodeIdentity:
        """This rank's episodes of global step ``step``."""
        return self.sampler.sample(self.seed, "train", step, self.local, first_id=step * self.batch_size)

    def __iter__(self) -> Iterator[Episode | EpisodeIdentity]:
        worker, workers = _worker()
        end = None
        if self.steps_per_epoch is not None:
            end = (self.start_step // self.steps_per_epoch + 1) * self.steps_per_epoch
        for step in count_from(self.start_step + worker, workers):
            if end is not None and step >= end:
                return
            identity = self.identities(step)
            yield identity if self.assembler is None else self.assembler.gather(identity)


class EvaluationEpisodes(IterableDataset):
    """A fixed set of ``count`` episodes of ``stream``; episode ``i`` depends only on ``(seed, stream, i)``.

    Args:
        sampler: draws the episodes.
        seed: the run's data seed.
        stream: ``"validation"`` or ``"test"`` (mixed into every episode's seed).
        count: number of episodes in the set, over all ranks.
        batch_size: episodes per batch on this rank.
        rank: this process's rank.
        world_size: number of processes.
        assembler: as for :class:`TrainingEpisodes`.
    """

    def __init__(
        self,
        sampler: EpisodeSampler,
        seed: int,
        stream: str,
        count: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        assembler: EpisodeAssembler | None = None,
    ) -> None:
        self.sampler, self.seed, self.stream = sampler, seed, stream
        mine = list(range(rank, count, world_size))
        self.batches = [mine[i : i + batch_size] for i in range(0, len(mine), batch_size)]
        self.assembler = assembler

    def __len__(self) -> int:
        """The number of batches this rank yields (over all its dataloader workers): exact, since the workers split
        the rank's batches and never repeat one."""
        return len(self.batches)

    def __iter__(self) -> Iterator[Episode | EpisodeIdentity]:
        worker, workers = _worker()
        for episodes in self.batches[worker::workers]:
            identity = self.sampler.sample(self.seed, self.stream, 0, episodes)
            yield identity if self.assembler is None else self.assembler.gather(identity)

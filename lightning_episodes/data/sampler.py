"""Vectorised, counter-based episode sampling.

Episode ``j`` of stream position ``step`` is a pure function of ``(seed, stream, step, j)``: its random
numbers come from a ``torch.Generator`` seeded with ``mix_seed(seed, stream, step, j)`` (never the global
RNG), so the global batch is the same for any number of devices or dataloader workers and a resumed run
continues the identical stream. Each episode takes one block of float64 uniforms; everything after that
is vectorised over the batch, with no Python loop over classes or samples.

An ordered choice of ``k`` of ``n`` items without replacement is drawn in one of two exact ways,
whichever is cheaper for ``(k, n)`` (:func:`oversample`):

* *first distinct draws*: ``m`` i.i.d. uniform draws from ``0..n-1``, keeping the first ``k`` distinct
  values in order. Each new distinct value is uniform over the values not chosen yet, so this is exactly
  an ordered sample without replacement, from ``m ≈ k`` numbers instead of ``n``. ``m`` is chosen so that
  fewer than ``k`` distinct values is rarer than ``1e-6``; such rows are redrawn with random keys.
* *random keys*: the positions of the ``k`` smallest of ``n`` uniform keys (for ``k`` close to ``n``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lightning_episodes.data.episode import EpisodeIdentity

_MASK64 = (1 << 64) - 1

#: Stream ids mixed into the seed, so training, validation, test and offline-scoring episodes never
#: coincide (id 3 seeds augmentation, id 5 the choice of a scarce training split's images, 6 the task samplers,
#: 7 task interpolation, 8 the choice of a training split's kept classes).
STREAMS = {"train": 0, "validation": 1, "test": 2, "offline": 4}
_SUBSET_STREAM = 5
_CLASS_SUBSET_STREAM = 8
#: The constant seed of :func:`keep_classes`: the kept classes depend on no seed of a run.
CLASS_SUBSET_SEED = 0

#: Largest accepted probability that ``m`` draws hold fewer than ``k`` distinct values (such rows are
#: redrawn exactly, so this only trades the size of ``m`` against how often the slow path runs).
_TOLERANCE = 1e-6

# salts of the fallback generators of an episode (classes, then class position c at _SAMPLES_SALT + c)
_CLASSES_SALT, _SAMPLES_SALT = 1, 2


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _mix(h: int, *parts: int) -> int:
    for part in parts:
        h = _splitmix64(h ^ (part & _MASK64))
    return h


def mix_seed(*parts: int) -> int:
    """A 63-bit seed that depends on every part (stable across processes and Python versions)."""
    return _mix(0, *parts) >> 1


def oversample(k: int, n: int) -> int | None:
    """Draws ``m`` that hold ``k`` distinct values of ``0..n-1`` with probability ``>= 1 - 1e-6``.

    ``None`` when random keys over all ``n`` items are cheaper: comparing ``m`` draws pairwise costs
    ``m²`` cheap comparisons, a key costs a random number and its share of a selection (~8 comparisons).
    """
    # p[d] = probability of d distinct values so far (d = k absorbs); the classic occupancy chain
    p = [1.0] + [0.0] * k
    for m in range(1, n + 1):
        if m * m > 8 * n:
            return None
        step = [0.0] * k + [p[k]]
        for d in range(k):
            step[d] += p[d] * d / n
            step[d + 1] += p[d] * (n - d) / n
        p = step
        if 1.0 - p[k] <= _TOLERANCE:
            return m
    return None


def _first_distinct(draws: Tensor, k: int, n: int) -> tuple[Tensor, Tensor]:
    """The first ``k`` distinct values of each row of ``draws`` ``[..., m]`` (values in ``0..n-1``), and
    which rows have ``k`` of them (the others hold garbage)."""
    m = draws.shape[-1]
    small = torch.int16 if m < 2**15 else torch.int64  # the n-slot table is the biggest tensor: keep it small
    position = torch.arange(m, dtype=small, device=draws.device).expand_as(draws)
    # first[v] = position of the first draw of v: a draw is fresh if it is the first of its value
    # (a scatter over n slots is ~5x faster than comparing the m draws pairwise)
    first = torch.full((*draws.shape[:-1], n), m, dtype=small, device=draws.device)
    first.scatter_reduce_(-1, draws, position, "amin")
    fresh = first.gather(-1, draws) == position
    count = fresh.cumsum(-1)
    # the r-th fresh draw goes to slot r - 1; repeats and fresh draws beyond k go to a spare slot k
    slot = torch.where(fresh & (count <= k), count - 1, k)
    out = draws.new_empty(*draws.shape[:-1], k + 1).scatter_(-1, slot, draws)
    return out[..., :k], count[..., -1] >= k


def keep_per_class(labels: Tensor, classes: Sequence[int], count: int, seed: int, name: str = "count") -> Tensor:
    """The dataset rows of ``count`` images of each of ``classes``, sorted: a scarce training split.

    Each class keeps the first ``count`` of its rows in a fixed random order seeded by ``(seed, class id)`` alone,
    so the choice depends on nothing else (not the other classes, sizes or seeds of a run) and the subsets are
    nested: the images kept for a smaller ``count`` are among those kept for a larger one.

    Args:
        labels: ``[N]`` global class id of each dataset row.
        classes: the global class ids whose images are kept.
        count: images kept per class.
        seed: the selection seed.
        name: the argument's name in error messages.

    Raises:
        ValueError: if ``count`` exceeds the smallest of ``classes``.

    Example::

        >>> labels = torch.arange(3).repeat_interleave(4)  # rows 0-3 are class 0, 4-7 class 1, 8-11 class 2
        >>> kept = keep_per_class(labels, classes=[0, 2], count=2, seed=0)
        >>> labels[kept].tolist()
        [0, 0, 2, 2]
        >>> bool(torch.isin(kept, keep_per_class(labels, [0, 2], 3, seed=0)).all())
        True
    """
    class_ids = [int(c) for c in classes]
    counts = torch.bincount(labels, minlength=max(class_ids) + 1)
    smallest = int(counts[class_ids].min())
    if count > smallest:
        raise ValueError(f"{name}={count} exceeds the smallest class of this split ({smallest} samples)")
    by_class = torch.argsort(labels, stable=True)  # each class's rows in ascending order, class after class
    starts = torch.cumsum(counts, 0) - counts
    kept = []
    for class_id in class_ids:
        rows = by_class[int(starts[class_id]) : int(starts[class_id] + counts[class_id])]
        generator = torch.Generator().manual_seed(mix_seed(seed, _SUBSET_STREAM, class_id))
        order = torch.rand(len(rows), generator=generator, dtype=torch.float64).argsort()
        kept.append(rows[order[:count]])
    return torch.cat(kept).sort().values


def keep_classes(classes: Sequence[int], count: int) -> list[int]:
    """``count`` of ``classes``, in their order: the classes a training split keeps (``train_classes``).

    Class ``c`` has the key ``mix_seed(CLASS_SUBSET_SEED, 8, c)`` (a 63-bit hash of its global id; a tie, never
    seen, goes to the smaller id) and the ``count`` classes of smallest keys are kept: a fixed random order of the
    class ids, seeded by the constant :data:`CLASS_SUBSET_SEED` = 0. The choice is a pure function of the class ids
    and ``count`` (no seed of a run, no worker or process count), and nested: the classes kept for a smaller
    ``count`` are among those kept for a larger one.

    Args:
        classes: global class ids (a split's class list).
        count: classes kept, in ``0..len(classes)``.

    Raises:
        ValueError: if ``count`` is outside ``0..len(classes)``.

    Example::

        >>> keep_classes(range(5), 2), keep_classes(range(5), 3)
        ([2, 3], [1, 2, 3])
    """
    class_ids = [int(c) for c in classes]
    if not 0 <= count <= len(class_ids):
        raise ValueError(f"count={count} must be in 0..{len(class_ids)}, the classes given")
    keys = {c: (mix_seed(CLASS_SUBSET_SEED, _CLASS_SUBSET_STREAM, c), c) for c in class_ids}
    kept = set(sorted(class_ids, key=keys.__getitem__)[:count])
    return [c for c in class_ids if c in kept]


class EpisodeSampler:
    """Draws episodes over a set of classes of a labelled dataset.

    Args:
        labels: ``[N]`` global class id of each dataset row.
        classes: the global class ids this sampler draws from (a split).
        ways: classes per episode.
        shots: support samples per class.
        queries: query samples per class.
        prefix: prefix of the argument names in error messages (``"eval_"`` for evaluation sizes).
        rows: the dataset rows it may draw from (default: all; e.g. a scarce split from :func:`keep_per_class`).

    Raises:
        ValueError: if a size is not positive, ``ways`` exceeds the number of classes, or
            ``shots + queries`` exceeds the smallest class.

    Example::

        >>> labels = torch.arange(10).repeat_interleave(6)
        >>> sampler = EpisodeSampler(labels, classes=range(10), ways=3, shots=1, queries=2)
        >>> ident = sampler.sample(seed=0, stream="train", step=0, episodes=range(4))
        >>> tuple(ident.classes.shape), tuple(ident.support_indices.shape), tuple(ident.query_indices.shape)
        ((4, 3), (4, 3, 1), (4, 3, 2))
    """

    def __init__(
        self,
        labels: Tensor,
        classes: Sequence[int],
        ways: int,
        shots: int,
        queries: int,
        prefix: str = "",
        rows: Tensor | None = None,
    ) -> None:
        for name, value in (("ways", ways), ("shots", shots), ("queries", queries)):
            if value < 1:
                raise ValueError(f"{prefix}{name} must be >= 1, got {value}")
        class_ids = torch.as_tensor(list(classes), dtype=torch.long)
        if ways > len(class_ids):
            raise ValueError(f"{prefix}ways={ways} exceeds the {len(class_ids)} classes of this split")
        drawable = labels if rows is None else labels[rows]
        order = torch.argsort(drawable, stable=True)
        if rows is not None:
            order = rows[order]  # back to dataset rows
        counts_all = torch.bincount(drawable, minlength=int(class_ids.max()) + 1)
        starts_all = torch.cumsum(counts_all, 0) - counts_all
        counts = counts_all[class_ids]
        smallest = int(counts.min())
        if shots + queries > smallest:
            raise ValueError(
                f"{prefix}shots + {prefix}queries = {shots + queries} exceeds the smallest class of this "
                f"split ({smallest} samples)"
            )
        width = int(counts.max())
        offsets = torch.arange(width)
        valid = offsets < counts[:, None]
        # table[c, i] = row index of the i-th sample of class classes[c]; padding repeats a valid row
        # but is never drawn (draws stay below the class's count, padded keys are +inf).
        positions = starts_all[class_ids][:, None] + torch.where(valid, offsets, 0)
        self.table = order[positions]
        self.invalid = ~valid
        self.counts = counts
        self.even = smallest == width  # every class has the same size: no per-class scaling of draws
        self.classes = class_ids
        self.ways, self.shots, self.queries = ways, shots, queries
        # None: random keys; else the number of draws (per episode, per class) of the first-distinct rule
        self.class_draws = oversample(ways, len(class_ids))
        self.sample_draws = oversample(shots + queries, smallest)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def sample(
        self,
        seed: int,
        stream: str,
        step: int,
        episodes: Sequence[int],
        first_id: int = 0,
        classes: Tensor | None = None,
    ) -> EpisodeIdentity:
        """Identities of the episodes at positions ``episodes`` of ``step`` in ``stream``.

        Episode ``j`` depends only on ``(seed, stream, step, j)`` (and on this sampler's classes and
        sizes); its ``episode_ids`` entry is ``first_id + j``. ``classes`` (int64 ``[len(episodes), ways]``,
        positions in this sampler's class list, distinct within a row; e.g. a
        :class:`~lightning_episodes.data.TaskSampler`'s choice) replaces the uniform choice of classes: the images
        of each class are still drawn from the episode's own random numbers.

        Raises:
            ValueError: if ``classes`` has another shape or holds a position outside the class list.
        """
        prefix = _mix(0, seed, STREAMS[stream], step)  # mix_seed(seed, stream, step, j) == _mix(prefix, j) >> 1
        seeds = [_mix(prefix, j) >> 1 for j in episodes]
        class_width = self.class_draws or self.num_classes
        sample_width = self.sample_draws or self.table.shape[1]
        # one block of float64 uniforms per episode (53 random bits: no ties between keys in practice,
        # and floor(u * n) is uniform on 0..n-1 up to 2^-53)
        width = class_width + self.ways * sample_width
        generator = torch.Generator()
        uniforms = torch.stack(
            [torch.rand(width, generator=generator.manual_seed(s), dtype=torch.float64) for s in seeds]
        )
        if classes is None:
            chosen = self._choose_classes(uniforms[:, :class_width], seeds)  # [B, ways] positions in self.classes
        else:
            chosen = self._given_classes(classes, len(seeds))
        sample_u = uniforms[:, class_width:].view(-1, self.ways, sample_width)
        picked = self._choose_samples(sample_u, chosen, seeds)  # [B, ways, k+q] positions within each class
        rows = self.table.view(-1).take(picked.add_(chosen[..., None] * self.table.shape[1]))
        return EpisodeIdentity(
            classes=self.classes.take(chosen),
            support_indices=rows[..., : self.shots],
            query_indices=rows[..., self.shots :],
            episode_ids=torch.as_tensor(list(episodes), dtype=torch.long).add_(first_id),
        )

    def _given_classes(self, classes: Tensor, episodes: int) -> Tensor:
        chosen = torch.as_tensor(classes, dtype=torch.long)
        if chosen.shape != (episodes, self.ways):
            raise ValueError(f"classes must have shape {(episodes, self.ways)}, got {tuple(chosen.shape)}")
        if chosen.numel() and not (int(chosen.min()) >= 0 and int(chosen.max()) < self.num_classes):
            raise ValueError(f"classes must be positions in 0..{self.num_classes - 1}, got {chosen.tolist()}")
        return chosen.clone()

    def _choose_classes(self, uniforms: Tensor, seeds: list[int]) -> Tensor:
        if self.class_draws is None:
            return uniforms.topk(self.ways, dim=1, largest=False).indices
        draws = uniforms.mul(self.num_classes).long().clamp_(max=self.num_classes - 1)
        chosen, complete = _first_distinct(draws, self.ways, self.num_classes)
        if not bool(complete.all()):  # about one episode in a million
            for b in complete.logical_not().nonzero().flatten().tolist():
                keys = self._keys(seeds[b], _CLASSES_SALT, self.num_classes)
                chosen[b] = keys.topk(self.ways, largest=False).indices
        return chosen

    def _choose_samples(self, uniforms: Tensor, chosen: Tensor, seeds: list[int]) -> Tensor:
        per_class = self.shots + self.queries
        if self.sample_draws is None:
            keys = uniforms.masked_fill(self.invalid[chosen], float("inf"))
            return keys.topk(per_class, dim=2, largest=False).indices
        if self.even:
            draws = uniforms.mul(self.table.shape[1]).long().clamp_(max=self.table.shape[1] - 1)
        else:
            counts = self.counts.take(chosen)[..., None]  # [B, ways, 1]
            draws = torch.minimum(uniforms.mul(counts).long(), counts - 1)
        picked, complete = _first_distinct(draws, per_class, self.table.shape[1])
        if not bool(complete.all()):  # about one class in a million
            for b, c in complete.logical_not().nonzero().tolist():
                keys = self._keys(seeds[b], _SAMPLES_SALT + c, self.table.shape[1])
                keys.masked_fill_(self.invalid[chosen[b, c]], float("inf"))
                picked[b, c] = keys.topk(per_class, largest=False).indices
        return picked

    @staticmethod
    def _keys(episode_seed: int, salt: int, size: int) -> Tensor:
        generator = torch.Generator().manual_seed(mix_seed(episode_seed, salt))
        return torch.rand(size, generator=generator, dtype=torch.float64)

"""Task interpolation (MLTI): each training episode CutMix-ed with the next episode of its step.

:func:`cutmix` is the pure maths (two batches of episodes, a permutation of the partners' classes and one box per
episode in, the mixed images out); :class:`TaskInterpolation` draws what it needs for each episode as a pure function
of ``(seed, step, position)``, and :class:`~lightning_episodes.data.EpisodicDataModule` applies it to the training
batches where they are normalised (``docs/method.md``, "Task interpolation (MLTI)").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import torch
from scipy import special
from torch import Tensor

from lightning_episodes.data.episode import Episode
from lightning_episodes.data.sampler import mix_seed

__all__ = ["InterpolationPlan", "TaskInterpolation", "box_lambda", "cutmix", "cutmix_box", "partner_position"]

#: the stream id of task interpolation's random numbers (the sampler's streams and salts use 0-5, task samplers 6)
_INTERPOLATION_STREAM: Final[int] = 7
#: the class paths that name :class:`TaskInterpolation` (the package's export first: what a record writes)
_CLASS_PATHS: Final = ("lightning_episodes.data.TaskInterpolation", f"{__name__}.TaskInterpolation")


def partner_position(position: int, batch_size: int) -> int:
    """The partner of episode ``position`` of a step: the next one, ``(j + 1) mod |B|`` for the step's batch.

    Positions past the batch (more episodes of the same step, such as resampling's candidates) pair within their own
    block of ``batch_size``.

    Example::

        >>> [partner_position(j, 4) for j in range(8)]
        [1, 2, 3, 0, 5, 6, 7, 4]
    """
    block = position - position % batch_size
    return block + (position % batch_size + 1) % batch_size


def cutmix_box(lam: float, row: int, col: int, height: int, width: int) -> tuple[int, int, int, int]:
    """CutMix's box of area fraction ``1 - lam`` centred at pixel ``(row, col)``, as CutMix's ``rand_bbox`` draws it.

    The sides are ``int(height sqrt(1 - lam))`` and ``int(width sqrt(1 - lam))``; half of each (``side // 2``) goes on
    either side of the centre, and the box is clipped to the image (so its area may be smaller than ``1 - lam``:
    :func:`box_lambda` gives the share that remains).

    Returns:
        ``(top, left, bottom, right)``: rows ``top..bottom-1`` and columns ``left..right-1``.

    Example::

        >>> cutmix_box(0.75, row=0, col=3, height=8, width=8)  # a 4 x 4 box, its top half cut off
        (0, 1, 2, 5)
    """
    ratio = math.sqrt(1.0 - lam)
    half_height, half_width = int(height * ratio) // 2, int(width * ratio) // 2
    return (
        min(max(row - half_height, 0), height),
        min(max(col - half_width, 0), width),
        min(max(row + half_height, 0), height),
        min(max(col + half_width, 0), width),
    )


def box_lambda(boxes: Tensor, height: int, width: int) -> Tensor:
    """float64 ``[n]``: ``1 - area / (height width)`` of each box ``(top, left, bottom, right)``: the share of a mixed
    image that is the first episode's, the effective λ that CutMix recomputes from the clipped box."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return 1.0 - area.to(torch.float64) / (height * width)


def cutmix(first: Tensor, partner: Tensor, permutation: Tensor, boxes: Tensor) -> Tensor:
    """The first episodes' images with one box of each pasted from the partner's images of the permuted class.

    Image ``k`` of class ``c`` (position ``c n + k``, class-major) of episode ``b`` becomes ``first[b, c n + k]``
    outside ``boxes[b]`` and ``partner[b, permutation[b, c] n + k]`` inside it. Nothing else changes (the labels stay
    the first episode's).

    Args:
        first: ``[B, ways n, C, H, W]`` the episodes' images, class-major (``n`` images a class).
        partner: ``[B, ways n, C, H, W]`` each episode's partner's images, class-major.
        permutation: int64 ``[B, ways]``: class ``c`` of episode ``b`` takes its box from the partner's class
            ``permutation[b, c]``.
        boxes: int64 ``[B, 4]``: ``(top, left, bottom, right)``, rows ``top..bottom-1`` and columns
            ``left..right-1`` (an empty box leaves the episode as it is).

    Returns:
        ``[B, ways n, C, H, W]``, a new tensor.

    Raises:
        ValueError: if the shapes do not fit together.

    Example::

        >>> first = torch.zeros(1, 2, 1, 4, 4)  # one episode, 2 ways, 1 image a class, all 0
        >>> partner = torch.tensor([1.0, 2.0]).view(1, 2, 1, 1, 1).expand(1, 2, 1, 4, 4)  # its classes 1 and 2
        >>> mixed = cutmix(first, partner, torch.tensor([[1, 0]]), torch.tensor([[0, 0, 2, 2]]))
        >>> mixed[0, 0, 0].tolist()  # class 0 got class 1's pixels (2) in rows 0-1, columns 0-1
        [[2.0, 2.0, 0.0, 0.0], [2.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    """
    if first.dim() != 5 or partner.shape != first.shape:
        raise ValueError(f"first {tuple(first.shape)} and partner {tuple(partner.shape)} must be equal [B, N, C, H, W]")
    batch, count, _, height, width = first.shape
    if permutation.dim() != 2 or permutation.shape[0] != batch or count % permutation.shape[1]:
        raise ValueError(
            f"permutation {tuple(permutation.shape)} must be [B, ways] with B={batch}, ways dividing {count}"
        )
    if tuple(boxes.shape) != (batch, 4):
        raise ValueError(f"boxes {tuple(boxes.shape)} must be [B, 4] with B={batch}")
    device = first.device
    per_class = count // permutation.shape[1]
    permutation, boxes = permutation.to(device), boxes.to(device)
    source = (permutation[:, :, None] * per_class + torch.arange(per_class, device=device)).reshape(batch, count)
    permuted = partner[torch.arange(batch, device=device)[:, None], source]
    rows, cols = torch.arange(height, device=device), torch.arange(width, device=device)
    inside_rows = (rows >= boxes[:, 0:1]) & (rows < boxes[:, 2:3])  # [B, H]
    inside_cols = (cols >= boxes[:, 1:2]) & (cols < boxes[:, 3:4])  # [B, W]
    inside = inside_rows[:, None, None, :, None] & inside_cols[:, None, None, None, :]
    return torch.where(inside, permuted, first)


class InterpolationPlan(NamedTuple):
    """How each episode of a batch is mixed (CPU tensors, a row per episode; see :meth:`TaskInterpolation.plan`).

    Attributes:
        partners: int64 ``[n]``: the position of each episode's partner in its step (its own when not mixed).
        mixed: bool ``[n]``: whether the episode is mixed.
        permutations: int64 ``[n, ways]``: the partner's class whose images class ``c`` takes (``c`` when not mixed).
        lam: float64 ``[n]``: the λ drawn from Beta(alpha, beta) (1 when not mixed).
        support_boxes: int64 ``[n, 4]``: the support set's box (empty when not mixed).
        query_boxes: int64 ``[n, 4]``: the query set's box (empty when not mixed).
    """

    partners: Tensor
    mixed: Tensor
    permutations: Tensor
    lam: Tensor
    support_boxes: Tensor
    query_boxes: Tensor


class TaskInterpolation:
    """Task interpolation by CutMix: MLTI (Yao, Zhang & Finn, "Meta-Learning with Fewer Tasks through Task
    Interpolation", ICLR 2022) for ProtoNet on images, as its reference code (``ProtoNet/Image_NLS``) mixes tasks.

    Each training episode ``j`` of a step is mixed, with probability ``probability``, with the next episode of the
    global batch (position ``(j + 1) mod |B|``; with ``|B| = 1`` the episode itself, its classes then mixed among
    themselves), else kept as it is. A mixed episode permutes its partner's classes at random (``π``), draws
    ``λ ~ Beta(alpha, beta)`` and two CutMix boxes of area fraction ``1 - λ`` at uniform centres, clipped to the image
    as CutMix's reference ``rand_bbox`` does (the effective λ, the first episode's share of each set, is then
    recomputed from the clipped box's area, as the CutMix reference does: ``box_lambda``). Image ``k`` of class ``c``
    of the support set is the first episode's with the support box pasted from the partner's class-``π(c)`` image
    ``k``; the queries likewise, with the other box. The labels stay the first episode's, and so does the identity
    (rebuilding a mixed episode from it gives the unmixed one). Everything downstream (the loss, the weighting
    callback, difficulties, logs) sees the mixed episodes as ordinary ones, so the step's loss is the usual ProtoNet
    loss averaged over them.

    Where the reference code differs: it pastes the box from the first episode into the partner's images (the first
    episode then covers ``1 - λ``; the same law for Beta(2, 2), which is symmetric, but the label's content is the box
    rather than the frame around it), and an episode it does not pair with the next one it mixes with itself under a
    permutation of its own classes; here such an episode is left as it is.

    Every choice (partner, ``π``, ``λ``, both boxes) is a pure function of ``(seed, step, j)`` from its own
    ``torch.Generator`` (stream 7 of :func:`~lightning_episodes.data.mix_seed`, which no episode, augmentation or task
    sampler draws from), so a mixed episode is the same on any number of devices (a partner on another rank is rebuilt
    from its identity), with any dataloader workers and after a resume. It composes with a task sampler (the partner
    is the episode the sampler chose for its position) and with ``mode="resample"`` (the candidates are mixed, each
    block of ``|B|`` within itself). Validation and test episodes are never mixed.

    Args:
        probability: chance that an episode is mixed with the next one, in ``[0, 1]`` (MLTI: 0.5).
        alpha: first parameter of λ's Beta distribution, ``> 0`` (MLTI: 2).
        beta: second parameter of λ's Beta distribution, ``> 0`` (MLTI: 2).

    Raises:
        ValueError: for an argument outside its range.

    Example::

        >>> plan = TaskInterpolation(probability=1.0).plan(seed=0, step=3, positions=[2, 3], batch_size=4, ways=5,
        ...                                                 height=28, width=28)
        >>> plan.partners.tolist(), plan.mixed.tolist()
        ([3, 0], [True, True])
    """

    def __init__(self, probability: float = 0.5, alpha: float = 2.0, beta: float = 2.0) -> None:
        if not (_is_number(probability) and 0.0 <= probability <= 1.0):
            raise ValueError(f"task_interpolation.probability must be in [0, 1], got {probability!r}")
        for name, value in (("alpha", alpha), ("beta", beta)):
            if not (_is_number(value) and math.isfinite(value) and value > 0.0):
                raise ValueError(f"task_interpolation.{name} must be a finite number > 0, got {value!r}")
        self.probability, self.alpha, self.beta = float(probability), float(alpha), float(beta)

    def plan(
        self, seed: int, step: int, positions: Sequence[int], batch_size: int, ways: int, height: int, width: int
    ) -> InterpolationPlan:
        """How the episodes at ``positions`` of global step ``step`` are mixed: row ``i`` depends only on
        ``(seed, step, positions[i])`` (and on the sizes).

        Args:
            seed: the training stream's seed.
            step: the global step.
            positions: the episodes' positions in the step (``0..|B|-1`` for its batch).
            batch_size: ``|B|``, the global batch.
            ways: classes per episode.
            height: image height in pixels.
            width: image width in pixels.
        """
        count = len(positions)
        # one block of float64 uniforms per episode: the decision, ways permutation keys, λ, two box centres (row, col)
        generator = torch.Generator()
        draws = [
            torch.rand(ways + 6, generator=generator.manual_seed(mix_seed(seed, _INTERPOLATION_STREAM, step, j)),
                       dtype=torch.float64)
            for j in positions
        ]  # fmt: skip
        uniforms = torch.stack(draws) if draws else torch.zeros(0, ways + 6, dtype=torch.float64)
        mixed = uniforms[:, 0] < self.probability
        permutations = torch.where(
            mixed[:, None], uniforms[:, 1 : ways + 1].argsort(dim=1), torch.arange(ways).expand(count, ways)
        )
        # λ by inverting Beta's distribution function at a uniform (torch's Beta sampler takes no generator)
        lam = torch.from_numpy(special.betaincinv(self.alpha, self.beta, uniforms[:, ways + 1].numpy()))
        lam = torch.where(mixed, lam, torch.ones_like(lam))
        sizes = torch.tensor([height, width, height, width], dtype=torch.float64)
        centres = (uniforms[:, ways + 2 :] * sizes).long().minimum(sizes.long() - 1).tolist()
        boxes = torch.zeros(count, 2, 4, dtype=torch.long)
        for i, (row, col, query_row, query_col) in enumerate(centres):
            if mixed[i]:
                boxes[i, 0] = torch.tensor(cutmix_box(float(lam[i]), row, col, height, width))
                boxes[i, 1] = torch.tensor(cutmix_box(float(lam[i]), query_row, query_col, height, width))
        own = torch.as_tensor(list(positions), dtype=torch.long)
        partners = torch.tensor([partner_position(j, batch_size) for j in positions], dtype=torch.long)
        return InterpolationPlan(torch.where(mixed, partners, own), mixed, permutations, lam, boxes[:, 0], boxes[:, 1])

    def mix(self, episodes: Episode, partners: Episode, plan: InterpolationPlan) -> Episode:
        """``episodes`` mixed by ``plan`` with ``partners`` (each episode's partner, in the same order): the support and
        query images by :func:`cutmix`; labels and identities as they were."""
        support = cutmix(episodes.support, partners.support, plan.permutations, plan.support_boxes)
        query = cutmix(episodes.query, partners.query, plan.permutations, plan.query_boxes)
        return Episode(support, episodes.support_labels, query, episodes.query_labels, episodes.identity)

    def config(self) -> dict[str, Any]:
        """Its class path and ``init_args``, as a YAML config gives it (what the data module's hyper-parameters and a
        run's record keep)."""
        cls = type(self)
        path = _CLASS_PATHS[0] if cls is TaskInterpolation else f"{cls.__module__}.{cls.__qualname__}"
        return {
            "class_path": path,
            "init_args": {"probability": self.probability, "alpha": self.alpha, "beta": self.beta},
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TaskInterpolation:
        """The instance that :meth:`config` describes (e.g. a checkpoint's saved hyper-parameters).

        Raises:
            ValueError: if ``config`` names another class, or an argument is out of its range.
        """
        if config.get("class_path") not in _CLASS_PATHS:
            raise ValueError(
                f"data.task_interpolation: class_path {config.get('class_path')!r} is not {_CLASS_PATHS[0]} "
                "(pass an instance for another class)"
            )
        return TaskInterpolation(**dict(config.get("init_args") or {}))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self), self.probability, self.alpha, self.beta))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(probability={self.probability}, alpha={self.alpha}, beta={self.beta})"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)

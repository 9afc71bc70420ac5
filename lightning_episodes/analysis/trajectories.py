"""Does episode difficulty change during training? (Arnold et al., NeurIPS 2021, §4.2).

The paper picks the easiest and the hardest episodes according to the final model and follows their
difficulties back over the training checkpoints: the two bundles of lines never cross, so an episode
that ends easy was easy all along. Here the data is a matrix ``scores[t, e]``: the difficulty (higher
is harder, e.g. the query loss) of episode ``e`` under checkpoint ``t``. To analyse accuracies, pass
``-accuracy`` (or ``1 - accuracy``) so that higher still means harder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lightning_episodes.analysis._arrays import ArrayLike, as_indices, as_matrix, as_vector, raw_numpy


class ExtremeEpisodes(NamedTuple):
    """Episode indices: ``easiest`` (easiest first) and ``hardest`` (hardest first)."""

    easiest: np.ndarray
    hardest: np.ndarray


@dataclass(frozen=True)
class CrossingReport:
    """Outcome of :func:`lines_cross`.

    Crossing is strict: at a step where the largest easy difficulty *equals* the smallest hard one,
    the lines touch but no easy episode is above a hard one, so that step is in ``touching_steps``
    and not in ``crossing_steps``.

    Args:
        crossed: whether some easy episode is strictly harder than some hard episode at some step.
        crossing_steps: the steps where ``max(easy) > min(hard)``, in order.
        touching_steps: the steps where ``max(easy) == min(hard)``, in order.
        margin: ``min_t (min(hard_t) − max(easy_t))``: negative iff ``crossed``, 0 when they only touch.
        margins: ``min(hard_t) − max(easy_t)`` at each step, in step order.
        tightest_step: the (first) step where ``margin`` is attained.
        crossing_pairs: how many (easy, hard) pairs of episodes cross at one step or more.
        pairs: the number of (easy, hard) pairs, ``len(easy_idx) * len(hard_idx)``.
    """

    crossed: bool
    crossing_steps: tuple[float, ...]
    touching_steps: tuple[float, ...]
    margin: float
    margins: tuple[float, ...]
    tightest_step: float
    crossing_pairs: int
    pairs: int


def extreme_episodes(final_scores: ArrayLike, count: int = 50) -> ExtremeEpisodes:
    """The ``count`` easiest and ``count`` hardest episodes by the final model's difficulty (§4.2).

    Ties are broken by episode index (the lower index first), so the choice is deterministic.

    Args:
        final_scores: 1-d difficulty of each episode under the final model (higher is harder).
        count: episodes in each group (default 50 as in the paper); ``2 * count`` must not exceed
            the number of episodes so that the groups are disjoint.

    Returns:
        :class:`ExtremeEpisodes` of int64 index arrays.

    Raises:
        ValueError: if ``count`` < 1, ``2 * count`` exceeds the number of episodes, or the scores are
            not 1-d or hold NaN/inf.

    Example::

        >>> extreme_episodes([0.9, 0.1, 2.5, 0.4, 1.7, 3.0], count=2)
        ExtremeEpisodes(easiest=array([1, 3]), hardest=array([5, 2]))
    """
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 1:
        raise ValueError(f"`count` must be a positive integer, got {count!r}")
    scores = as_vector(final_scores, "final_scores")
    if 2 * count > scores.size:
        raise ValueError(
            f"`count`={count} needs 2 * count <= {scores.size} episodes in `final_scores` "
            f"so that the easiest and hardest groups do not overlap"
        )
    order = np.argsort(scores, kind="stable")
    hardest_first = np.argsort(-scores, kind="stable")
    return ExtremeEpisodes(order[:count].astype(np.int64), hardest_first[:count].astype(np.int64))


def lines_cross(
    scores: ArrayLike,
    easy_idx: ArrayLike,
    hard_idx: ArrayLike,
    steps: ArrayLike | None = None,
) -> CrossingReport:
    """Whether an easy episode's difficulty ever rises above a hard episode's (§4.2).

    At checkpoint ``t`` the two groups are separated when ``max(scores[t, easy_idx]) <
    min(scores[t, hard_idx])``; the lines *cross* at ``t`` when ``max(easy) > min(hard)`` (strictly;
    equality is reported as touching, see :class:`CrossingReport`). Comparing the extremes of the two
    groups at each step is the same as comparing every pair.

    Args:
        scores: ``[checkpoints, episodes]`` difficulties, all finite.
        easy_idx: 1-d indices (columns) of the easy episodes, e.g. from :func:`extreme_episodes`.
        hard_idx: 1-d indices of the hard episodes, disjoint from ``easy_idx``.
        steps: 1-d training step of each checkpoint (default ``0 .. checkpoints − 1``).

    Returns:
        A :class:`CrossingReport`.

    Raises:
        ValueError: if ``scores`` is not a finite 2-d array, an index set is empty, repeats an index,
            is out of range or overlaps the other, or ``steps`` has the wrong length.

    Example::

        >>> scores = np.array([[1.0, 3.0, 2.0, 4.0],
        ...                    [0.5, 2.0, 2.5, 3.5]])
        >>> report = lines_cross(scores, easy_idx=[0, 1], hard_idx=[2, 3], steps=[100, 200])
        >>> report.crossed, report.crossing_steps, report.margin, report.crossing_pairs
        (True, (100,), -1.0, 1)
    """
    matrix = as_matrix(scores, "scores")
    checkpoints, episodes = matrix.shape
    easy = as_indices(easy_idx, "easy_idx", episodes)
    hard = as_indices(hard_idx, "hard_idx", episodes)
    if np.intersect1d(easy, hard).size:
        raise ValueError("`easy_idx` and `hard_idx` must be disjoint")
    if steps is None:
        step_values = np.arange(checkpoints)
    else:
        step_values = raw_numpy(steps)
        if step_values.ndim != 1 or step_values.size != checkpoints:
            raise ValueError(
                f"`steps` must be 1-d with one step per checkpoint ({checkpoints}), "
                f"got shape {tuple(step_values.shape)}"
            )
        as_vector(step_values, "steps")

    easy_scores, hard_scores = matrix[:, easy], matrix[:, hard]
    margins = hard_scores.min(axis=1) - easy_scores.max(axis=1)
    step_list = step_values.tolist()
    crossing_pairs = np.zeros((easy.size, hard.size), dtype=bool)
    for t in range(checkpoints):  # one step at a time keeps memory at |easy| x |hard|
        crossing_pairs |= easy_scores[t][:, None] > hard_scores[t][None, :]
    tightest = int(np.argmin(margins))
    return CrossingReport(
        crossed=bool((margins < 0).any()),
        crossing_steps=tuple(step_list[t] for t in np.flatnonzero(margins < 0)),
        touching_steps=tuple(step_list[t] for t in np.flatnonzero(margins == 0)),
        margin=float(margins[tightest]),
        margins=tuple(float(m) for m in margins),
        tightest_step=step_list[tightest],
        crossing_pairs=int(crossing_pairs.sum()),
        pairs=int(easy.size * hard.size),
    )

"""Paired per-episode comparison of two sampling schemes on the shared fixed test episodes.

Every model of a scenario is tested on the same fixed test episodes (they depend only on the data seed), so two
sampling schemes compare episode by episode: ``d_i`` = the treatment's accuracy on episode ``i`` minus the
baseline's, each averaged over the arm's seeds. Pairing removes the spread of difficulty between episodes, which
dominates each arm's own interval, so a small difference can be resolved on 1,000 episodes (docs/method.md: "a paired
per-episode difference with its confidence interval on the shared fixed test episodes").

From the command line, on the folders of ``scripts/run_scenario.py``: ``lightning-episodes compare``
(:mod:`lightning_episodes.commands.compare`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from lightning_episodes.evaluation.tables import DifficultyTable, join_on_episode


@dataclass(frozen=True)
class PairedDifference:
    """Outcome of :func:`paired_difference`: treatment − baseline, accuracies as fractions.

    Args:
        mean: mean over the episodes of ``d_i``.
        ci95: half-width of the 95% Student-t interval of ``mean`` over the episodes (see
            :func:`paired_difference` for what it covers).
        std: standard deviation of ``d_i`` over the episodes (ddof = 1).
        episodes: number of shared episodes ``n``.
        seeds: ``(k_baseline, k_treatment)``, the seeds averaged in each arm.
        statistic: the paired t statistic ``mean / (std / √n)``, with ``n − 1`` degrees of freedom.
        pvalue: its two-sided p-value (the hypothesis: no mean difference over episodes).
        seed_differences: when both arms have as many seeds, the mean difference of each seed pair (treatment
            seed ``s`` − baseline seed ``s``, in the order given); their mean is ``mean``. ``None`` otherwise.
    """

    mean: float
    ci95: float
    std: float
    episodes: int
    seeds: tuple[int, int]
    statistic: float
    pvalue: float
    seed_differences: tuple[float, ...] | None = None

    @property
    def trainings(self) -> int:
        """``k``, the seed pairs of :attr:`seed_differences` (0 when the arms have different seed counts): the number
        of trainings per arm that the interval over trainings, :attr:`seed_ci95`, rests on."""
        return 0 if self.seed_differences is None else len(self.seed_differences)

    @property
    def seed_mean(self) -> float | None:
        """Mean of :attr:`seed_differences`, the difference paired by seed (``None`` when the arms have different
        seed counts). With as many seeds in both arms it is :attr:`mean`: averaging over seeds and over episodes
        commute."""
        return None if self.seed_differences is None else float(np.mean(self.seed_differences))

    @property
    def seed_sd(self) -> float | None:
        """Standard deviation (ddof = 1) of :attr:`seed_differences`: the spread between trainings that
        :attr:`ci95` leaves out (``None`` with fewer than two seed pairs)."""
        if self.seed_differences is None or len(self.seed_differences) < 2:
            return None
        return float(np.std(self.seed_differences, ddof=1))

    @property
    def seed_ci95(self) -> float | None:
        """Half-width of the 95% Student-t interval of :attr:`mean` over the ``k`` seed pairs,
        ``t_{0.975, k−1} · seed_sd / √k``: the interval that covers the variance between trainings, which
        :attr:`ci95` leaves out (``None`` with fewer than two seed pairs)."""
        if self.seed_sd is None or self.seed_differences is None:
            return None
        k = len(self.seed_differences)
        return float(stats.t.ppf(0.975, k - 1) * self.seed_sd / math.sqrt(k))

    @property
    def seed_pvalue(self) -> float | None:
        """Two-sided p-value of the one-sample t-test of :attr:`seed_differences` against 0 (``k − 1`` degrees of
        freedom): would other trainings differ too? ``nan`` when every seed pair differs by the same amount, ``None``
        with fewer than two seed pairs."""
        if self.seed_sd is None or self.seed_differences is None:
            return None
        if self.seed_sd == 0:
            return math.nan
        k = len(self.seed_differences)
        statistic = float(np.mean(self.seed_differences)) / (self.seed_sd / math.sqrt(k))
        return float(2 * stats.t.sf(abs(statistic), k - 1))


def paired_difference(
    baseline: Sequence[DifficultyTable] | DifficultyTable, treatment: Sequence[DifficultyTable] | DifficultyTable
) -> PairedDifference:
    """Paired per-episode accuracy difference, treatment − baseline, on the same fixed episodes.

    Each arm is one table per seed (e.g. :func:`~lightning_episodes.evaluation.score_episodes` of each
    run's best checkpoint on the test episodes). Tables are aligned by episode id, and per episode ``i``::

        d_i = mean over the treatment's seeds of accuracy_i − mean over the baseline's seeds of accuracy_i

    The interval is ``t_{0.975, n−1} · sd(d) / √n`` over the ``n`` episodes, and the p-value that of the paired
    t-test (:func:`scipy.stats.ttest_rel` for one seed per arm).

    What the interval covers: the sampling of test episodes, with the trained models held fixed — would these
    models still differ on new episodes? What it does not cover: the variance between trainings (seeds); another
    set of seeds gives other models, and the interval says nothing about how far their difference would move.
    :attr:`PairedDifference.seed_differences` shows that spread: each seed pair's own mean difference.

    Args:
        baseline: the baseline's table(s), one per seed.
        treatment: the treatment's table(s), one per seed.

    Returns:
        A :class:`PairedDifference`.

    Raises:
        ValueError: if an arm has no table, if two tables do not score the same episodes (other ids, or an id that
            is another episode: different data seeds, ways, shots or counts), if an accuracy is unknown, or if there
            are fewer than two episodes.

    Example::

        >>> from lightning_episodes.analysis import EpisodeRecord
        >>> def table(accuracies):
        ...     return DifficultyTable(tuple(EpisodeRecord(i, (0, 1), ((2,), (3,)), ((4,), (5,)), 1.0, a)
        ...                                  for i, a in enumerate(accuracies)))
        >>> result = paired_difference(table([0.5, 0.6, 0.7]), table([0.6, 0.8, 0.7]))  # d = 0.1, 0.2, 0.0
        >>> round(result.mean, 6), round(result.std, 6), round(result.statistic, 4), round(result.ci95, 4)
        (0.1, 0.1, 1.7321, 0.2484)
    """
    baselines, treatments = _tables(baseline, "baseline"), _tables(treatment, "treatment")
    reference = baselines[0]
    if len(reference) < 2:
        raise ValueError(f"a paired difference needs at least 2 episodes, got {len(reference)}")
    accuracy_b = _aligned(reference, baselines, "baseline")
    accuracy_t = _aligned(reference, treatments, "treatment")
    differences = accuracy_t.mean(axis=0) - accuracy_b.mean(axis=0)
    n = differences.size
    mean, sd = float(differences.mean()), float(differences.std(ddof=1))
    standard_error = sd / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):  # identical arms: t is nan (or ±inf), as in scipy
        statistic = float(np.float64(mean) / standard_error)
    seed_differences = None
    if len(baselines) == len(treatments):
        seed_differences = tuple(float(d) for d in (accuracy_t - accuracy_b).mean(axis=1))
    return PairedDifference(
        mean=mean,
        ci95=float(stats.t.ppf(0.975, n - 1) * standard_error),
        std=sd,
        episodes=n,
        seeds=(len(baselines), len(treatments)),
        statistic=statistic,
        pvalue=float(2 * stats.t.sf(abs(statistic), n - 1)),
        seed_differences=seed_differences,
    )


def _tables(tables: Sequence[DifficultyTable] | DifficultyTable, name: str) -> list[DifficultyTable]:
    tables = [tables] if isinstance(tables, DifficultyTable) else list(tables)
    if not tables:
        raise ValueError(f"`{name}` needs at least one table")
    return tables


def _aligned(reference: DifficultyTable, tables: Sequence[DifficultyTable], name: str) -> np.ndarray:
    """``[k, n]`` accuracies of ``tables`` in ``reference``'s episode order."""
    rows = []
    for index, table in enumerate(tables):
        try:
            accuracy = join_on_episode(reference, table).accuracy_b
        except ValueError as error:
            raise ValueError(
                f"{name}[{index}] and baseline[0] do not score the same episodes (scored with other data seeds, "
                f"ways, shots or episode counts?): {error}"
            ) from None
        unknown = int(np.count_nonzero(np.isnan(accuracy)))
        if unknown:
            raise ValueError(f"{name}[{index}] has {unknown} episode(s) without an accuracy")
        rows.append(accuracy)
    return np.stack(rows)

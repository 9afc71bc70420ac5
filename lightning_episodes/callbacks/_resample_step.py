"""The per-step work of :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback` in ``mode="resample"``.

Each training step draws ``k |B|`` candidate episodes of the step from the data module
(:meth:`~lightning_episodes.data.EpisodicDataModule.training_episodes`: the training stream's own pure function of
seed, step and index; candidates ``0..|B|-1`` are the plain stream's batch), scores this rank's
share in one forward pass without gradients (:func:`score_candidates`, which changes no state of the model),
gathers the scores in pool order (:meth:`Resampler.score`: a :class:`ScoredPool`), and, once the online proposal has
absorbed them, assembles this rank's share of the chosen episodes from their identities (:meth:`Resampler.choose`).
:class:`ResampleStep` records it; :class:`SelectionFit` keeps the goodness of fit of the chosen difficulties.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import pytorch_lightning as pl
import torch
from scipy import stats
from torch import Tensor, nn

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.data.episode import Episode
from lightning_episodes.models.batchnorm import EpisodicBatchNorm2d
from lightning_episodes.weighting import (
    Proposal,
    Target,
    effective_sample_size,
    select_candidates,
    target_quantiles,
)

__all__ = [
    "ResampleStep",
    "Resampler",
    "ScoredPool",
    "SelectionFit",
    "assemble_episodes",
    "candidate_positions",
    "check_datamodule",
    "pool_order",
    "resample_metrics",
    "score_candidates",
    "scoring_mode",
]


class ScoredPool(NamedTuple):
    """A step's pool of candidates, scored: what :meth:`Resampler.choose` draws from.

    Attributes:
        step: ``trainer.global_step``.
        batch: ``|B|``, the episodes of the global batch (the data module's ``episodes_per_batch``).
        difficulties: float64 ``[k |B|]`` on the CPU: the candidates' difficulties, in pool order.
        assemble_seconds: wall time of assembling this rank's candidates.
        score_seconds: wall time of this rank's scoring forward and of gathering the scores onto the CPU.
        scored_at: ``time.perf_counter()`` when the scores were gathered.
    """

    step: int
    batch: int
    difficulties: Tensor
    assemble_seconds: float
    score_seconds: float
    scored_at: float


class ResampleStep(NamedTuple):
    """What the resampling did at one step, over the whole pool (all ranks, in pool order), on the CPU.

    Attributes:
        step: ``trainer.global_step`` of the choice.
        difficulties: float64 ``[k |B|]``: the candidates' difficulties when they were scored.
        raw_weights: float64 ``[k |B|]``: their ``p / q`` (``None`` for plain choices: warm-up, ``baseline``).
        selected: int64 ``[|B|]``: the pool indices the step trained on (sorted; repeated with replacement).
        fallback: whether the weights summed to 0, so that the plain choice was taken.
        score_seconds: wall time of this rank's scoring forward and of gathering the scores onto the CPU.
        draw_seconds: wall time of drawing and assembling this rank's candidates and its share of the chosen.
    """

    step: int
    difficulties: Tensor
    raw_weights: Tensor | None
    selected: Tensor
    fallback: bool
    score_seconds: float
    draw_seconds: float


def check_datamodule(trainer: pl.Trainer) -> EpisodicDataModule:
    """The Trainer's :class:`~lightning_episodes.data.EpisodicDataModule` (resampling draws the candidates from it).

    Raises:
        ValueError: if the Trainer fits without one.
    """
    datamodule = getattr(trainer, "datamodule", None)
    if not isinstance(datamodule, EpisodicDataModule):
        raise ValueError(
            "DifficultyWeightingCallback(mode='resample') draws its candidate episodes from an EpisodicDataModule; "
            f"the Trainer fits with {type(datamodule).__name__}"
        )
    return datamodule


def candidate_positions(batch_size: int, pool: int, rank: int, world_size: int) -> list[int]:
    """This rank's candidates of a step: its slice ``j`` of every block ``m |B| + j`` of the pool (``m < k``).

    Block 0 is the plain stream's batch; rank ``r`` scores the same positions of every block.

    Example::

        >>> candidate_positions(4, 2, rank=1, world_size=2)
        [2, 3, 6, 7]
    """
    local = range(rank * batch_size // world_size, (rank + 1) * batch_size // world_size)
    return [block * batch_size + j for block in range(pool) for j in local]


def pool_order(gathered: Tensor, pool: int, world_size: int) -> Tensor:
    """The gathered scores ``[W, k |B| / W]`` (rank order, :func:`candidate_positions` within each) in pool order."""
    return gathered.reshape(world_size, pool, -1).transpose(0, 1).reshape(-1)


def assemble_episodes(
    datamodule: EpisodicDataModule, step: int, positions: Sequence[int], module: EpisodicModule
) -> Episode:
    """Training episodes ``positions`` of ``step`` from the data module, on the model's device and in its dtype."""
    dtype = module.dtype if isinstance(module.dtype, torch.dtype) else torch.float32
    return datamodule.training_episodes(step, positions, module.device, dtype)


@contextmanager
def scoring_mode(module: nn.Module) -> Iterator[None]:
    """The model in training mode, as the difficulty is measured in training, but changing no state.

    Episodic batch norms normalise each episode with its own statistics as in training but leave their running
    buffers alone (evaluation with ``"episode"`` statistics, the same numbers); every buffer is restored afterwards
    (other modules' running statistics, e.g. a user's ``nn.BatchNorm2d``).
    """
    norms = [m for m in module.modules() if isinstance(m, EpisodicBatchNorm2d) and m.training]
    saved = [(m, m.eval_batch_norm) for m in norms]
    buffers = [(b, b.clone()) for b in module.buffers()]
    for norm in norms:
        norm.training, norm.eval_batch_norm = False, "episode"
    try:
        yield
    finally:
        for norm, mode in saved:
            norm.training, norm.eval_batch_norm = True, mode
        with torch.no_grad():
            for buffer, value in buffers:
                buffer.copy_(value)


def score_candidates(scorer: EpisodicModule, candidates: Episode) -> Tensor:
    """The difficulties ``[N]`` of ``candidates`` in one batched forward without gradients (MAML-type models adapt
    with autograd, as in evaluation), in :func:`scoring_mode`."""
    adapts = type(scorer).requires_grad_in_evaluation
    with scoring_mode(scorer), torch.enable_grad() if adapts else torch.no_grad():
        return scorer._output(candidates).difficulty.detach()


class Resampler:
    """Chooses each step's episodes from ``pool`` candidates per trained episode (see the module's docstring).

    Args:
        pool: ``k``, candidates per episode of the global batch.
        replacement: systematic resampling with or without replacement.
        placebo: deal the pool's weights to its candidates at random before the draw (blind to difficulty).
        seed: seeds the choice (with the step).
        out_of_support: ``"zero"`` or ``"clamp"``, for the weights.
    """

    def __init__(self, pool: int, replacement: bool, placebo: bool, seed: int, out_of_support: str) -> None:
        self.pool, self.replacement, self.placebo = pool, replacement, placebo
        self.seed, self.out_of_support = seed, out_of_support

    def score(self, module: EpisodicModule, scorer: EpisodicModule) -> ScoredPool:
        """The step's ``k |B|`` candidates scored by ``scorer``, gathered from every rank in pool order.

        Args:
            module: the module being trained (its Trainer, device and dtype).
            scorer: the model whose difficulties the weights use (``module`` online, the reference offline).
        """
        trainer = module.trainer
        datamodule = check_datamodule(trainer)
        step, size = trainer.global_step, datamodule.episodes_per_batch
        world, rank = trainer.world_size, trainer.global_rank
        started = time.perf_counter()
        candidates = assemble_episodes(datamodule, step, candidate_positions(size, self.pool, rank, world), module)
        scoring = time.perf_counter()
        scores = score_candidates(scorer, candidates)
        pool = pool_order(trainer.strategy.all_gather(scores), self.pool, world).to("cpu", torch.float64)
        scored = time.perf_counter()
        return ScoredPool(step, size, pool, scoring - started, scored - scoring, scored)

    def choose(
        self,
        module: EpisodicModule,
        scored: ScoredPool,
        proposal: Proposal | None,
        target: Target,
        progress: float | None,
    ) -> tuple[Episode, ResampleStep]:
        """This rank's share of the step's chosen episodes, and the step's record (identical on every rank).

        Args:
            module: the module being trained (its Trainer, device and dtype).
            scored: the step's pool (:meth:`score`); online, ``proposal`` has absorbed its difficulties (they are
                plain samples) before this call.
            proposal: ``q``; ``None`` for the plain choice, the plain stream's batch (while ``q`` was not ready before
                the step, i.e. the warm-up, and for the ``baseline`` target).
            target: ``p``.
            progress: ``t / T`` for the target.
        """
        trainer = module.trainer
        step, size, pool = scored.step, scored.batch, scored.difficulties
        world, rank = trainer.world_size, trainer.global_rank
        weights = None if proposal is None else proposal.weights(pool, target, self.out_of_support, progress)
        selected, fallback = select_candidates(weights, size, self.seed, step, self.replacement, self.placebo)
        share = selected[rank * size // world : (rank + 1) * size // world].tolist()
        chosen = assemble_episodes(check_datamodule(trainer), step, share, module)
        drawn = time.perf_counter() - scored.scored_at + scored.assemble_seconds
        return chosen, ResampleStep(step, pool, weights, selected, fallback, scored.score_seconds, drawn)


class SelectionFit:
    """Goodness of fit of the chosen difficulties to the target, over the last ``window`` chosen episodes.

    Each chosen episode's difficulty becomes ``u = F_p(z)``, the target's distribution function at its standardised
    difficulty under that step's ``q`` and progress: uniform on ``[0, 1]`` if the choice follows the target,
    whatever ``q`` did between steps. The Kolmogorov-Smirnov distance of the window's ``u`` from the uniform
    distribution is logged (``weighting/ks``), beside the same distance for the pool's first ``|B|`` candidates,
    the plain batch (``weighting/ks_plain``): the contrast says how far the choice moved the batch.

    Args:
        window: chosen (and plain) episodes kept.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.chosen = torch.zeros(0, dtype=torch.float64)
        self.plain = torch.zeros(0, dtype=torch.float64)

    def observe(self, record: ResampleStep, proposal: Proposal, target: Target, progress: float | None) -> None:
        """Adds a weighted step's chosen and plain episodes (not the plain choices: warm-up, ``baseline``)."""
        if record.raw_weights is None or record.fallback:
            return
        plain = record.difficulties[: len(record.selected)]
        for name, values in (("chosen", record.difficulties[record.selected]), ("plain", plain)):
            u = target_quantiles(values[torch.isfinite(values)], proposal, target, progress)
            setattr(self, name, torch.cat([getattr(self, name), u])[-self.window :])

    def summary(self) -> dict[str, float]:
        """``ks``, ``ks_pvalue`` and ``ks_plain`` (nothing before the first weighted step)."""
        if not self.chosen.numel():
            return {}
        chosen = stats.kstest(self.chosen.numpy(), "uniform")
        plain = stats.kstest(self.plain.numpy(), "uniform") if self.plain.numel() else None
        values = {"ks": float(chosen.statistic), "ks_pvalue": float(chosen.pvalue)}
        values["ks_plain"] = float(plain.statistic) if plain is not None else math.nan
        return values

    def state_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen.clone(), "plain": self.plain.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.chosen = torch.as_tensor(state.get("chosen", self.chosen), dtype=torch.float64).clone()
        self.plain = torch.as_tensor(state.get("plain", self.plain), dtype=torch.float64).clone()


def resample_metrics(record: ResampleStep) -> dict[str, float]:
    """The step's pool values: ``pool_ess`` (``(sum w)^2 / sum w^2`` of the candidates' weights),
    ``pool_ess_share`` (it over ``k |B|``), ``unselected`` (share of candidates not chosen), ``score_ms`` (this
    rank's scoring forward and the gather) and ``draw_ms`` (drawing and assembling candidates and chosen)."""
    size = record.difficulties.numel()
    values = {
        "unselected": 1.0 - record.selected.unique().numel() / size,
        "score_ms": 1e3 * record.score_seconds,
        "draw_ms": 1e3 * record.draw_seconds,
    }
    if record.raw_weights is not None:
        ess = float(effective_sample_size(record.raw_weights))
        values.update(pool_ess=ess, pool_ess_share=ess / size)
    return values

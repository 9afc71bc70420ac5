"""What :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback` keeps: the step's record and its state.

:class:`WeightingStep` is the record of one training step over the global batch, with what reads it:
:func:`global_weights` computes the step's weights on the device, :func:`read_record` brings the record to the host
in one transfer and :func:`step_metrics` turns it into the logged ``weighting/*`` values. :class:`WeightingState`
is everything the callback checkpoints, one field per key of its ``state_dict``, and the updates that change it
after each step (:meth:`~WeightingState.count`, :meth:`~WeightingState.observe`, :meth:`~WeightingState.learn`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import torch
from pytorch_lightning.utilities import rank_zero_warn
from scipy import stats
from torch import Tensor

from lightning_episodes.callbacks._resample_step import SelectionFit
from lightning_episodes.callbacks.reference import restore_offline
from lightning_episodes.weighting import (
    EpisodeWeights,
    Normalizer,
    Proposal,
    Target,
    WeightingDiagnostics,
    better_proposal,
    placebo_permutation,
    selection_fidelity,
    skewness,
)
from lightning_episodes.weighting.loss import stat_dtype

__all__ = ["WeightingState", "WeightingStep", "global_weights", "read_record", "step_metrics"]

#: non-finite episodes are always counted (and logged); only the first few steps with some are warned about
MAX_WARNINGS: Final[int] = 10
#: a proposal that misfits is said so at the end of the warm-up; it is said again only if it fitted in between
MAX_FIT_WARNINGS: Final[int] = 3
#: resampling: the expected Kolmogorov-Smirnov distance of the chosen batches from the target above which the end of
#: the warm-up warns that the pool is too small (a fitting proposal reaches 0.04-0.06 at the default pool on normal
#: difficulties, 0.15-0.16 on log-normal ones of skewness 2: docs/method.md, "Resampling")
POOL_KS_WARNING: Final[float] = 0.1
#: resampling, online: the level of the Kolmogorov-Smirnov critical value below which a measured ``weighting/ks``
#: is not taken as off target (above :data:`POOL_KS_WARNING` only for a window of fewer than ~260 chosen episodes)
POOL_KS_LEVEL: Final[float] = 0.01


class WeightingStep(NamedTuple):
    """What the callback did at the last training step, over the global batch (all ranks, in order).

    Attributes:
        step: ``trainer.global_step`` when the step's weights were computed (0-based).
        progress: ``t / T`` with ``T = trainer.max_steps`` (``None`` without ``max_steps``).
        mu: the proposal's location the weights used (before the step's update; see ``Proposal.location``).
        sigma: the proposal's scale the weights used.
        difficulties: float64 ``[|B|]`` on the CPU: the difficulties the weights were computed from (the
            reference model's offline, the trained model's online).
        weights: float64 ``[|B|]`` on the CPU: the weights the loss used (after shuffling and normalising).
        warmup: ``True`` while the online warm-up gave every episode weight 1.
        raw_weights: float64 ``[|B|]``: ``p / q`` before shuffling and normalising.
        support: the support ``(low, high)`` the weights used.
    """

    step: int
    progress: float | None
    mu: float
    sigma: float
    difficulties: Tensor
    weights: Tensor
    warmup: bool
    raw_weights: Tensor | None = None
    support: tuple[float, float] = (math.nan, math.nan)


def global_weights(
    everything: Tensor,
    proposal: Proposal,
    target: Target,
    normalizer: Normalizer,
    out_of_support: str,
    progress: float | None,
    placebo_seed: int | None,
    step: int,
) -> tuple[Tensor, EpisodeWeights]:
    """The global batch's raw weights ``p / q`` and the normalised (for the placebo: shuffled) weights of the loss.

    Args:
        everything: the step's difficulties over the global batch, in rank order.
        proposal: ``q`` as it stands before the step (every weight 1 while not ready: the warm-up).
        target: ``p``.
        normalizer: turns the weights into the loss's normalisation.
        out_of_support: ``"zero"`` or ``"clamp"``.
        progress: ``t / T`` (``None`` without ``max_steps``).
        placebo_seed: the placebo's seed (``None``: no shuffling).
        step: the global step (seeds the placebo's permutation).

    Returns:
        ``(raw, normalised)``, on ``everything``'s device, computed without a host read.
    """
    warmup = not proposal.ready
    raw = torch.ones_like(everything) if warmup else proposal.weights(everything, target, out_of_support, progress)
    shuffled = raw
    if placebo_seed is not None and not warmup:
        # drawn on the CPU, the permutation reaches the device without a synchronisation
        shuffled = raw[placebo_permutation(placebo_seed, step, raw.numel()).to(raw.device, non_blocking=True)]
    return raw, normalizer.normalize(shuffled)


def read_record(pending: WeightingStep, weighted: Any) -> tuple[WeightingStep, int, int]:
    """The step's record on the host (float64 on the CPU) and the loss's ``skipped`` and ``nonfinite`` counters.

    The step's one read from the device: the difficulties, the weights, the raw weights and both counters are
    concatenated on the device (the counters in float64, or float32 on MPS, which has no float64: the concatenation
    promotes every part to it) and moved in a single transfer.
    """
    assert pending.raw_weights is not None
    device = pending.difficulties.device  # resampling's record is on the CPU already
    counters = torch.stack([weighted.skipped, weighted.nonfinite]).to(device, stat_dtype(device))
    parts = (pending.difficulties, pending.weights, pending.raw_weights, counters)
    host = torch.cat(parts).to("cpu", torch.float64)
    difficulties, weights, raw, counts = host.split([p.numel() for p in parts])
    skipped, nonfinite = (int(v) for v in counts.tolist())
    return pending._replace(difficulties=difficulties, weights=weights, raw_weights=raw), skipped, nonfinite


def step_metrics(step: WeightingStep, weighted: Any, with_progress: bool, estimated: bool = True) -> dict[str, float]:
    """The step's ``weighting/*`` values (without the prefix) from its record and the module's ``WeightedLoss``.

    Args:
        step: the step's record.
        weighted: the :class:`~lightning_episodes.weighting.WeightedLoss` of the step (global statistics).
        with_progress: add ``mu_t = low + (high - low) t / T``, the point of the support at the training progress
            (the curriculum's centre), for a target that needs the progress.
        estimated: whether the support was estimated from any difficulty yet (``outside_support`` is 0 before).

    Returns:
        ``mu``, ``sigma``, ``low``, ``high``, ``ess``, ``batch_over_ess``, ``ess_over_batch``, ``sum_w_over_ess``,
        ``loss_scale`` (the factor the normalisation in use applied:
        :attr:`~lightning_episodes.weighting.WeightedLoss.loss_scale`),
        ``weight_min``/``mean``/``max`` and ``outside_support`` (fraction of the finite difficulties outside S).
    """
    size, ess, (low, high) = len(step.weights), float(weighted.ess), step.support
    finite = step.difficulties[torch.isfinite(step.difficulties)]
    outside = float(((finite < low) | (finite > high)).double().mean()) if finite.numel() and estimated else 0.0
    values = {
        "mu": step.mu,
        "sigma": step.sigma,
        "low": low,
        "high": high,
        "ess": ess,
        "batch_over_ess": float(weighted.batch_over_ess),
        "ess_over_batch": ess / float(weighted.batch_size) if float(weighted.batch_size) else 0.0,
        "sum_w_over_ess": float(weighted.sum_weights) / ess if ess > 0 else 0.0,
        "loss_scale": float(weighted.loss_scale),
        "weight_min": float(step.weights.min()) if size else 0.0,
        "weight_mean": float(step.weights.mean()) if size else 0.0,
        "weight_max": float(step.weights.max()) if size else 0.0,
        "outside_support": outside,
    }
    if with_progress and step.progress is not None:
        values["mu_t"] = low + (high - low) * step.progress
    return values


@dataclass(eq=False)
class WeightingState:
    """Everything a weighting callback checkpoints: one field per key of its ``state_dict``.

    Attributes:
        proposal: ``q`` (saved as ``"estimator"``).
        normalizer: the loss's normaliser and its running state (``"normalizer"``).
        diagnostics: the windows of recent difficulties and weights (``"diagnostics"``).
        selection_fit: ``mode="resample"``: the goodness of fit of the chosen difficulties (``"selection_fit"``);
            ``None`` otherwise (not saved).
        skipped_steps: steps whose weights summed to 0 (a zero gradient).
        nonfinite_episodes: episodes whose loss was not finite (weight 0).
        weighted_steps: steps whose weights came from ``q`` (not the online warm-up's 1s); ``None``: restored from
            a checkpoint of a version that did not count them (not saved then).
        offline_scored: offline, how many episodes the reference scored to fix ``q`` (0: not yet); saved as
            ``"offline": {"episodes": ..., "reference": <its checkpoint>}`` once scored.
        verdict: ``"fit"``, ``"misfit"`` or ``""`` (no verdict yet) of the proposal's last fit check.
        fit_warnings: misfit warnings given so far (at most :data:`MAX_FIT_WARNINGS` a run).
        pool_verdict: resampling: ``"on"``, ``"off"`` (the chosen batches off target) or ``""`` (not checked yet),
            of the last pool check (:meth:`check_pool`, :meth:`recheck_pool`).
        pool_warnings: pool warnings given so far (at most :data:`MAX_FIT_WARNINGS` a run).
        nonfinite_warnings: steps warned about for non-finite losses in this process (at most :data:`MAX_WARNINGS`;
            a throttle of messages, not saved).
    """

    proposal: Proposal
    normalizer: Normalizer
    diagnostics: WeightingDiagnostics
    selection_fit: SelectionFit | None = None
    skipped_steps: int = 0
    nonfinite_episodes: int = 0
    weighted_steps: int | None = 0
    offline_scored: int = 0
    verdict: str = ""
    fit_warnings: int = 0
    pool_verdict: str = ""
    pool_warnings: int = 0
    nonfinite_warnings: int = 0

    def count(self, step: int, skipped: int, nonfinite: int, weighted: bool) -> None:
        """Adds a step's counters (``weighted``: its weights came from ``q``); warns (at most :data:`MAX_WARNINGS`
        times a run) about its non-finite losses."""
        if self.weighted_steps is not None:
            self.weighted_steps += int(weighted)
        self.skipped_steps += skipped
        self.nonfinite_episodes += nonfinite
        if nonfinite and self.nonfinite_warnings < MAX_WARNINGS:
            self.nonfinite_warnings += 1
            last = self.nonfinite_warnings == MAX_WARNINGS
            rank_zero_warn(
                f"step {step}: {nonfinite} episode(s) with a non-finite loss got weight 0"
                + ("; further ones are only counted in weighting/nonfinite_episodes" if last else "")
            )

    def observe(self, step: WeightingStep) -> None:
        """After a step: the normaliser's and the diagnostics' windows absorb its record (on the host)."""
        assert step.raw_weights is not None
        self.normalizer.update(step.raw_weights, warmup=step.warmup)
        self.diagnostics.observe(step.difficulties, None if step.warmup else step.raw_weights)

    def learn(self, difficulties: Tensor, every: int, proposal_name: str | None) -> None:
        """Online, after a step (and its logging; resampling: before choosing) ``q`` absorbs the step's difficulties
        (the global batch, or the pool); every ``every`` steps from the end of the warm-up the fit is checked
        (:meth:`check_fit`), unless ``proposal_name`` is ``None`` (plain sampling: weights 1 whatever ``q``)."""
        self.proposal.update(difficulties)
        after_warmup = self.proposal.steps - every
        if proposal_name is not None and self.proposal.ready and after_warmup >= 0 and after_warmup % every == 0:
            self.check_fit(proposal_name)

    def check_fit(self, proposal_name: str) -> None:
        """Warns when the proposal starts to misfit the recent difficulties (another fits better), naming the best;
        again only after it fitted in between, and at most :data:`MAX_FIT_WARNINGS` times a run."""
        better, scores = better_proposal(self.diagnostics.difficulties, proposal_name)
        verdict = "misfit" if better is not None else "fit"
        if verdict == self.verdict or better is None and not self.verdict:
            return
        self.verdict = verdict
        if better is not None and self.fit_warnings < MAX_FIT_WARNINGS:
            self.fit_warnings += 1
            listed = ", ".join(f"{name} {score:.3f}" for name, score in scores.items())
            rank_zero_warn(
                f"DifficultyWeightingCallback: proposal={proposal_name!r} misfits the difficulty distribution "
                f"(held-out log-likelihood per episode of the last {self.diagnostics.difficulties.numel()} "
                f"difficulties: {listed}); proposal={better!r} fits better (--trainer.callbacks.proposal={better})"
            )

    def check_pool(
        self, pool: int, batch: int, target: Target, progress: float | None, out_of_support: str, proposal_name: str
    ) -> None:
        """Resampling, at the end of the warm-up (offline: once the reference has scored): warns when ``pool``
        candidates per episode would leave the chosen batches visibly off ``target`` (:meth:`pool_fidelity` on the
        warm-up's difficulties above :data:`POOL_KS_WARNING`), with what a pool four times larger would reach, or
        that a larger pool would not help (the proposal cannot reach the target's mass)."""
        predicted = self.pool_fidelity(pool, batch, target, progress, out_of_support)
        if predicted is None:
            return
        self.pool_verdict = "off" if predicted > POOL_KS_WARNING else "on"
        if self.pool_verdict == "on" or self.pool_warnings >= MAX_FIT_WARNINGS:
            return
        self.pool_warnings += 1
        recent = self.diagnostics.difficulties
        rank_zero_warn(
            f"DifficultyWeightingCallback: pool={pool} would bring the chosen batches only to a Kolmogorov-Smirnov "
            f"distance of about {predicted:.2f} from the target on the warm-up's {recent.numel()} difficulties "
            f"(skewness {skewness(recent):.1f}; weighting/ks logs the distance reached)"
            + self._pool_advice(predicted, pool, batch, target, progress, out_of_support, proposal_name)
        )

    def recheck_pool(
        self, pool: int, batch: int, target: Target, progress: float | None, out_of_support: str, proposal_name: str
    ) -> None:
        """Resampling, online, after the warm-up (every ``warmup_steps`` steps): the difficulties drift as the model
        learns, so the end of the warm-up's prediction may stop holding (or never have held). Once the selection
        fit's window is full, warns when the *measured* distance (``weighting/ks`` of the last ``window`` chosen
        episodes) turns above :data:`POOL_KS_WARNING` (or the KS critical value at :data:`POOL_KS_LEVEL` for so
        many episodes, if larger), with :meth:`check_pool`'s advice from the recent difficulties (or, where the
        simulation of the pool on them reaches the target, that the pool is not the cause); again only after it came
        back below, and at most :data:`MAX_FIT_WARNINGS` pool warnings a run."""
        fit = self.selection_fit
        if fit is None or fit.chosen.numel() < fit.window:
            return
        summary, count = fit.summary(), fit.chosen.numel()
        limit = max(POOL_KS_WARNING, float(stats.kstwo.isf(POOL_KS_LEVEL, count)))
        verdict = "off" if summary["ks"] > limit else "on"
        if verdict == self.pool_verdict:
            return
        self.pool_verdict = verdict
        if verdict == "on" or self.pool_warnings >= MAX_FIT_WARNINGS:
            return
        predicted = self.pool_fidelity(pool, batch, target, progress, out_of_support)
        if predicted is None:
            return
        self.pool_warnings += 1
        recent = self.diagnostics.difficulties
        advice = (
            self._pool_advice(predicted, pool, batch, target, progress, out_of_support, proposal_name)
            if predicted > limit
            else f", within {limit:.2f}: the pool is not what keeps the batches off the target"
        )
        rank_zero_warn(
            f"DifficultyWeightingCallback: after {self.proposal.steps} steps the chosen batches are at a "
            f"Kolmogorov-Smirnov distance of {summary['ks']:.2f} from the target (weighting/ks over the last {count} "
            f"chosen episodes, above {limit:.2f}; plain batches {summary['ks_plain']:.2f}); on the last "
            f"{recent.numel()} difficulties (skewness {skewness(recent):.1f}) pool={pool} would reach about "
            f"{predicted:.2f}{advice}"
        )

    def pool_fidelity(
        self, pool: int, batch: int, target: Target, progress: float | None, out_of_support: str
    ) -> float | None:
        """:func:`selection_fidelity` of ``pool`` on the recent difficulties (the diagnostics' window), with a copy of
        the proposal fitted to them: ``q`` itself was fitted to other difficulties (online, the whole warm-up's, or
        the last few steps' once it moves), which on a drifting loss are not the ones drawn from, and the simulation
        needs ``q`` and the law it draws from to describe the same difficulties. ``None`` before ``q`` is ready or
        with fewer than 2 recent difficulties."""
        recent = self.diagnostics.difficulties
        finite = recent[torch.isfinite(recent)]
        if finite.numel() < 2 or not self.proposal.ready:
            return None
        fitted = copy.deepcopy(self.proposal)
        fitted.fit(finite)
        return selection_fidelity(finite, fitted, target, pool, batch, progress=progress, out_of_support=out_of_support)

    def _pool_advice(
        self,
        distance: float,
        pool: int,
        batch: int,
        target: Target,
        progress: float | None,
        out_of_support: str,
        proposal_name: str,
    ) -> str:
        """The pool warnings' advice: what a pool four times larger would reach, or that it would not help."""
        growth = 4  # the larger pool tried, and the factor on the scoring cost it would take
        larger = growth * pool
        reached = self.pool_fidelity(larger, batch, target, progress, out_of_support)
        assert reached is not None  # pool_fidelity(pool) was not None
        if reached < distance - 0.02:
            return (
                f"; pool={larger} would reach about {reached:.2f} at {growth}x the scoring cost "
                f"(--trainer.callbacks.pool={larger})"
            )
        said = f"; a larger pool would not help (pool={larger}: about {reached:.2f}): proposal={proposal_name!r}"
        if proposal_name == "empirical":  # the advice below would be this proposal itself
            return f"{said} follows their shape already: the target puts its mass where few difficulties lie"
        return (
            f"{said} puts the target's mass where the difficulties are not (a proposal that fits their skew, e.g. "
            "proposal=empirical, may)"
        )

    def state_dict(self, reference_checkpoint: str | None) -> dict[str, Any]:
        """Every saved field, as plain Python values and CPU tensors (``weights_only=True`` loads it)."""
        state: dict[str, Any] = {
            "estimator": self.proposal.state_dict(),
            "normalizer": self.normalizer.state_dict(),
            "diagnostics": self.diagnostics.state_dict(),
            "skipped_steps": int(self.skipped_steps),
            "nonfinite_episodes": int(self.nonfinite_episodes),
            "verdict": self.verdict,
            "fit_warnings": int(self.fit_warnings),
        }
        if self.weighted_steps is not None:
            state["weighted_steps"] = int(self.weighted_steps)
        if self.pool_verdict:
            state["pool_check"] = {"verdict": self.pool_verdict, "warnings": int(self.pool_warnings)}
        if self.offline_scored:
            state["offline"] = {"episodes": int(self.offline_scored), "reference": str(reference_checkpoint)}
        if self.selection_fit is not None:
            state["selection_fit"] = self.selection_fit.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any], online: bool, reference_checkpoint: str | None) -> None:
        """Restores :meth:`state_dict`'s output (missing keys: initial values); offline, ``q`` only if it was
        scored by the same ``reference_checkpoint`` (else it is scored again)."""
        self.normalizer.load_state_dict(state.get("normalizer", {}))
        self.diagnostics.load_state_dict(state.get("diagnostics", {}))
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.nonfinite_episodes = int(state.get("nonfinite_episodes", 0))
        self.verdict = str(state.get("verdict", ""))
        self.fit_warnings = int(state.get("fit_warnings", 0))
        pool_check = state.get("pool_check", {})
        self.pool_verdict = str(pool_check.get("verdict", ""))
        self.pool_warnings = int(pool_check.get("warnings", 0))
        counted = state.get("weighted_steps")
        self.weighted_steps = None if counted is None and state else int(counted or 0)
        if self.selection_fit is not None:
            self.selection_fit.load_state_dict(state.get("selection_fit", {}))
        if online:
            self.proposal.load_state_dict(state.get("estimator", {}))
        elif (restored := restore_offline(self.proposal, state, reference_checkpoint)) is not None:
            self.offline_scored = restored

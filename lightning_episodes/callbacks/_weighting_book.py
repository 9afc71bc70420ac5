"""The checkpointed state of :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback` and what updates it.

:class:`WeightingBook` holds the proposal ``q``, the normaliser, the diagnostics' windows and the counters; after
each step it absorbs the step's record (:meth:`~WeightingBook.observe`, then :meth:`~WeightingBook.learn`), counts
the skipped steps and the episodes with a non-finite loss (warning about the first few), warns when the proposal
starts to misfit the recent difficulties, and saves and restores all of it as plain values and CPU tensors.
"""

from __future__ import annotations

from typing import Any, Final

from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor

from lightning_episodes.callbacks._weighting_logs import WeightingStep
from lightning_episodes.callbacks.reference import restore_offline
from lightning_episodes.weighting import Normalizer, Proposal, WeightingDiagnostics, better_proposal

__all__ = ["MAX_FIT_WARNINGS", "MAX_WARNINGS", "BookCounter", "WeightingBook"]

#: non-finite episodes are always counted (and logged); only the first few steps with some are warned about
MAX_WARNINGS: Final[int] = 10
#: a proposal that misfits is said so at the end of the warm-up; it is said again only if it fitted in between
MAX_FIT_WARNINGS: Final[int] = 3


class BookCounter:
    """A counter of the owner's ``book`` (a :class:`WeightingBook`) read and set as the owner's own attribute."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, owner: Any, kind: type | None = None) -> int:
        if owner is None:  # on the class (e.g. documentation tools): the descriptor itself
            return self  # type: ignore[return-value]
        return int(getattr(owner.book, self.name))

    def __set__(self, owner: Any, value: int) -> None:
        setattr(owner.book, self.name, value)


class WeightingBook:
    """The proposal, normaliser, diagnostics, counters and fit verdict of one weighting callback.

    Args:
        proposal: ``q``.
        normalizer: the loss's normaliser (its running state, if any).
        diagnostics: the windows of recent difficulties and weights.
        proposal_name: ``q``'s name (in the misfit warning).
        warmup_steps: online, the fit is checked every ``warmup_steps`` steps from the end of the warm-up.
        check_fit: whether to check it (not for plain sampling, whose weights are 1 whatever ``q`` is).
    """

    def __init__(
        self,
        proposal: Proposal,
        normalizer: Normalizer,
        diagnostics: WeightingDiagnostics,
        proposal_name: str,
        warmup_steps: int,
        check_fit: bool = True,
    ) -> None:
        self.proposal, self.normalizer, self.diagnostics = proposal, normalizer, diagnostics
        self.proposal_name, self.warmup_steps, self.checks_fit = proposal_name, warmup_steps, check_fit
        #: offline: how many episodes the reference scored to fix ``q`` (0: not yet)
        self.offline_scored = 0
        #: steps whose weights summed to 0 (a zero gradient), and episodes whose loss was not finite (weight 0)
        self.skipped_steps = self.nonfinite_episodes = 0
        #: steps whose weights came from ``q`` (not the online warm-up's 1s); ``None``: restored from a checkpoint of
        #: a version that did not count them
        self.weighted_steps: int | None = 0
        self.warnings = self.fit_warnings = 0
        #: ``"fit"``, ``"misfit"`` or ``""`` (no verdict yet)
        self.verdict = ""

    def count(self, step: int, skipped: int, nonfinite: int, weighted: bool) -> None:
        """Adds a step's counters (``weighted``: its weights came from ``q``); warns (at most :data:`MAX_WARNINGS`
        times a run) about its non-finite losses."""
        if self.weighted_steps is not None:
            self.weighted_steps += int(weighted)
        self.skipped_steps += skipped
        self.nonfinite_episodes += nonfinite
        if nonfinite and self.warnings < MAX_WARNINGS:
            self.warnings += 1
            last = self.warnings == MAX_WARNINGS
            rank_zero_warn(
                f"step {step}: {nonfinite} episode(s) with a non-finite loss got weight 0"
                + ("; further ones are only counted in weighting/nonfinite_episodes" if last else "")
            )

    def observe(self, step: WeightingStep) -> None:
        """After a step: the normaliser's and the diagnostics' windows absorb its record (on the host)."""
        assert step.raw_weights is not None
        self.normalizer.update(step.raw_weights, warmup=step.warmup)
        self.diagnostics.observe(step.difficulties, None if step.warmup else step.raw_weights)

    def learn(self, difficulties: Tensor) -> None:
        """Online, after a step (and its logging; resampling: before choosing) ``q`` absorbs the step's difficulties
        (the global batch, or the pool); every ``warmup_steps`` steps from the end of the warm-up the fit is checked."""
        self.proposal.update(difficulties)
        after_warmup = self.proposal.steps - self.warmup_steps
        if self.checks_fit and self.proposal.ready and after_warmup >= 0 and after_warmup % self.warmup_steps == 0:
            self.check_fit()

    def check_fit(self) -> None:
        """Warns when the proposal starts to misfit the recent difficulties (another fits better), naming the best;
        again only after it fitted in between, and at most :data:`MAX_FIT_WARNINGS` times a run."""
        diagnostics, proposal = self.diagnostics, self.proposal_name
        better, scores = better_proposal(diagnostics.difficulties, proposal)
        verdict = "misfit" if better is not None else "fit"
        if verdict == self.verdict or better is None and not self.verdict:
            return
        self.verdict = verdict
        if better is not None and self.fit_warnings < MAX_FIT_WARNINGS:
            self.fit_warnings += 1
            listed = ", ".join(f"{name} {score:.3f}" for name, score in scores.items())
            rank_zero_warn(
                f"DifficultyWeightingCallback: proposal={proposal!r} misfits the difficulty distribution "
                f"(held-out log-likelihood per episode of the last {diagnostics.difficulties.numel()} "
                f"difficulties: {listed}); proposal={better!r} fits better (--trainer.callbacks.proposal={better})"
            )

    def state_dict(self, reference_checkpoint: str | None) -> dict[str, Any]:
        """Everything, as plain Python values and CPU tensors (``weights_only=True`` loads it)."""
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
        if self.offline_scored:
            state["offline"] = {"episodes": int(self.offline_scored), "reference": str(reference_checkpoint)}
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
        counted = state.get("weighted_steps")
        self.weighted_steps = None if counted is None and state else int(counted or 0)
        if online:
            self.proposal.load_state_dict(state.get("estimator", {}))
        elif (restored := restore_offline(self.proposal, state, reference_checkpoint)) is not None:
            self.offline_scored = restored

r"""
Difficulty weighting
^^^^^^^^^^^^^^^^^^^^

Importance weighting over episode difficulty ("Uniform Sampling over Episode Difficulty", Arnold et al.,
NeurIPS 2021) as a Lightning callback that plugs into :class:`~lightning_episodes.EpisodicModule`. It composes
a proposal model, a target, a normaliser and diagnostics from :mod:`lightning_episodes.weighting`; the method
and every option are described in ``docs/method.md``. Four files: the hooks here; the options and the Trainer's
checks in ``_weighting_options``; the step's record, its weights, host read and logged values, and the checkpointed
:class:`WeightingState` in ``_weighting_state``; ``mode="resample"``'s choice of episodes in ``_resample_step``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import TensorBoardLogger
from torch import Tensor
from typing_extensions import override

from lightning_episodes._lightning import logger_writes
from lightning_episodes.algorithms.base import EpisodicModule, WeightingStrategy
from lightning_episodes.callbacks import reference as ref
from lightning_episodes.callbacks._resample_step import (
    Resampler,
    ResampleStep,
    SelectionFit,
    check_datamodule,
    resample_metrics,
)
from lightning_episodes.callbacks._weighting_options import ESTIMATES, WeightingOptions, check_trainer
from lightning_episodes.callbacks._weighting_state import (
    WeightingState,
    WeightingStep,
    global_weights,
    read_record,
    step_metrics,
)
from lightning_episodes.data.episode import Episode
from lightning_episodes.weighting import (
    EpisodeWeights,
    Normalizer,
    Proposal,
    Target,
    WeightingDiagnostics,
    curriculum_progress,
)

__all__ = ["ESTIMATES", "DifficultyWeightingCallback", "WeightingOptions", "WeightingState", "WeightingStep"]


class DifficultyWeightingCallback(Callback):
    r"""Re-weights each training episode by ``w = p(difficulty) / q(difficulty)`` (Arnold et al., 2021).

    The callback installs itself as the :class:`~lightning_episodes.EpisodicModule`'s weighting strategy. A
    ``proposal`` models the difficulty ``Omega`` (query loss) of plainly sampled episodes (``normal``: the paper's
    ``N(mu, sigma^2)``; ``lognormal``: normal on ``log Omega``; ``empirical``: a kernel density estimate over the
    last ``window`` difficulties), truncated to its central interval ``S`` of mass ``Phi(c) - Phi(-c)`` (for the
    normal ``[mu - c sigma, mu + c sigma]``); each episode gets the weight ``p(Omega) / q(Omega)`` of a ``target``
    ``p`` on ``S``; a ``normalization`` turns the weights into the loss (``ess``: ``sum w L / ESS``, the paper's).

    - ``estimate="online"`` (default): ``warmup_steps`` steps of plain sampling (every weight 1) fit ``q``; then
      each step is weighted with ``q`` as it stands, which then absorbs the step's ordered global batch
      (``update``/``decay``: the moving averages of normal and log-normal; ``window``: the empirical's window).
    - ``estimate="offline"``: a frozen ``reference_checkpoint`` (trained with plain sampling on the same ways)
      scores ``offline_episodes`` training episodes before training to fix ``q``; each training episode is weighted
      by the reference's difficulty of it.

    ``mode="resample"`` trains on episodes *chosen* by their weights instead (sampling-importance-resampling): each
    step scores ``pool * |B|`` candidate episodes of the step in one forward pass without gradients, ``q`` absorbs
    their difficulties (online), and systematic resampling picks ``|B|`` of them in proportion to ``p / q`` (with or
    without ``replacement``); they are trained with weight 1, so the loss has the scale of plain sampling. The
    warm-up and the ``baseline`` target train on the pool's first ``|B|`` candidates, the plain stream's batch.

    Every rank gathers the step's difficulties once (rank order = global batch order) and computes the global
    weights identically, so the gradient equals one process's on the same batch. Where the loggers write it logs
    ``weighting/*`` (the proposal's ``mu``/``sigma``, ``S``, the ESS and its ratios, the weights' range, the
    counters, ``pareto_k``, the difficulties' skewness and normality, ``mu_t``, ``grad_norm``: see
    :func:`~lightning_episodes.callbacks._weighting_state.step_metrics` and ``docs/method.md``). At the end of the
    warm-up (then every ``warmup_steps`` steps, when the verdict changes) it warns if another proposal fits the
    recent difficulties better (held-out log-likelihood), unless the target is plain sampling (weights 1 whatever
    ``q``); resampling also warns if its chosen batches would be (at the end of the warm-up) or are (measured, every
    ``warmup_steps`` steps after it, online) visibly off the target, with the pool or proposal that would help.
    :attr:`last_step` holds every step's weights; :attr:`state` (a :class:`WeightingState`) everything that is
    checkpointed.

    Args:
        target: the target ``p``: a :class:`~lightning_episodes.weighting.Target` (in YAML ``class_path`` +
            ``init_args``), or a name of :func:`~lightning_episodes.weighting.available_targets` (built in:
            ``"baseline"``, ``"easy"``, ``"hard"``, ``"curriculum"``, ``"uniform"``; or registered with
            :func:`~lightning_episodes.weighting.register_target`) or a class path, built with its defaults.
        decay: ``lambda`` in ``[0, 1)``, the weight of the old value in the online moving average.
        warmup_steps: optimizer steps of plain sampling before online weighting starts (>= 2; ``setup`` warns when
            it is not below ``trainer.max_steps``, a run that would never weight).
        support_sigmas: ``c``: ``S`` holds the central mass ``Phi(c) - Phi(-c)`` of ``q`` (2.58: about 99%).
        out_of_support: ``"zero"``: weight 0 outside ``S``; ``"clamp"``: evaluate at the nearest end of ``S``.
        normalization: ``"ess"`` (``sum w L / ESS``, the paper's), ``"self"`` (``sum w L / sum w``),
            ``"truncated"`` (weights capped at ``mean(w) sqrt(|B|)``, then self), ``"psis"`` (Pareto-smoothed
            tail, then self), ``"running"`` (``sum w L / D``, ``D`` a moving average of ``sum w``), ``"scale"``
            (``(sum w / ESS) mean(L)``: the paper's step scale alone, every episode weighted 1), a name registered
            with :func:`~lightning_episodes.weighting.register_normalizer` or a class path, each built with
            ``window`` and ``running_decay``; or a :class:`~lightning_episodes.weighting.Normalizer` (in YAML
            ``class_path`` + ``init_args``), which keeps its own arguments.
        update: ``"episode"`` or ``"batch"``: how the normal/log-normal online estimate absorbs a step.
        estimate: ``"online"`` or ``"offline"``.
        proposal: the model ``q`` of the difficulties: ``"normal"``, ``"lognormal"``, ``"empirical"``, a name
            registered with :func:`~lightning_episodes.weighting.register_proposal` or a class path, each built with
            the options here that its constructor takes (``support_sigmas``, ``decay``, ``warmup_steps``, ``update``,
            ``window``); or a :class:`~lightning_episodes.weighting.Proposal` (in YAML ``class_path`` +
            ``init_args``, e.g. ``NormalProposal`` with ``decay: 0.8``), which keeps its own arguments: one of these
            options that it takes must then be left at its default or agree with it, and ``warmup_steps`` is its.
        window: recent difficulties of the empirical proposal, recent weights of ``psis`` and of the diagnostics.
        running_decay: weight of the old value in ``running``'s average of ``sum w``, in ``[0, 1)``.
        shuffle_weights: placebo control: permute each step's weights among its episodes (same permutation on
            every rank, from ``seed`` and the step): the same weight variance, no targeting. With
            ``mode="resample"``: permute the pool's weights among its candidates before the same draw (the same
            cost and repeats, no targeting).
        seed: seeds the placebo's permutations and the resampling's choice (a ``torch.Generator`` seeded from
            ``numpy.random.SeedSequence([seed, step])``).
        log_grad_norm: log ``weighting/grad_norm``, the total gradient norm before the optimizer step.
        reference_checkpoint: the offline reference model's checkpoint (required for ``"offline"``).
        offline_episodes: training episodes the reference scores to fix ``q`` offline.
        histogram_every_n_steps: every N steps, the global batch's difficulties and weights go to
            TensorBoard as histograms (``weighting/difficulties``, ``weighting/weights``); 0 turns it off.
        name: distinguishes the checkpointed state of several instances: the checkpoint key is
            ``"DifficultyWeightingCallback[<name>]"``, for subclasses too.
        mode: ``"reweight"`` (the paper's weighted loss) or ``"resample"`` (train on episodes chosen by weight).
        pool: ``k`` >= 2, candidate episodes per trained episode in ``"resample"`` (its scoring costs about ``k``
            forward passes without gradients per step).
        replacement: ``"resample"`` chooses with replacement (default: the chosen follow ``p`` as ``k`` grows, an
            episode may be trained twice in a step) or without (distinct episodes; where ``p / q`` exceeds ``k``
            times its mean, e.g. the far tails of ``uniform`` at ``k = 4``, they are chosen less than ``p`` says).

    Every option is kept once, in :attr:`options` (a frozen :class:`WeightingOptions`, validated at construction),
    and everything is built from it.

    Raises:
        ValueError: at construction, for an argument out of range or unknown (``proposal="online"/"offline"`` of
            older versions: use ``estimate``), or one given both here and, differently, to the component object
            that takes it; at ``setup``, for a curriculum without ``trainer.max_steps``,
            ``accumulate_grad_batches > 1``, or a reference trained on other ways.
        FileNotFoundError: at ``setup``, if ``reference_checkpoint`` does not exist.

    .. tip:: The checkpoint key is ``"DifficultyWeightingCallback[<name>]"`` for this class *and its subclasses*,
        so a subclass resumes from a checkpoint written with the base class; hyperparameters are left out of the
        key so that a resumed run may change them.

    Example::

        >>> callback = DifficultyWeightingCallback(target="uniform", proposal="lognormal", normalization="running")
        >>> callback.state_key, callback.options.proposal
        ('DifficultyWeightingCallback[]', 'lognormal')
        >>> from lightning_episodes.weighting import NormalProposal
        >>> callback = DifficultyWeightingCallback(proposal=NormalProposal(decay=0.8, warmup_steps=50))
        >>> callback.options["proposal"]["init_args"]["decay"], callback.options.warmup_steps
        (0.8, 50)
        >>> # trainer = pl.Trainer(max_steps=10_000, callbacks=[callback]); trainer.fit(ProtoNet(), datamodule)
    """

    def __init__(
        self,
        target: str | Target = "uniform",
        decay: float = 0.9,
        warmup_steps: int = 100,
        support_sigmas: float = 2.58,
        out_of_support: Literal["zero", "clamp"] = "zero",
        normalization: str | Normalizer = "ess",
        update: Literal["episode", "batch"] = "episode",
        estimate: Literal["online", "offline"] = "online",
        proposal: str | Proposal = "normal",
        window: int = 1000,
        running_decay: float = 0.99,
        shuffle_weights: bool = False,
        seed: int = 0,
        log_grad_norm: bool = False,
        reference_checkpoint: str | Path | None = None,
        offline_episodes: int = 1000,
        histogram_every_n_steps: int = 0,
        name: str = "",
        mode: Literal["reweight", "resample"] = "reweight",
        pool: int = 4,
        replacement: bool = True,
    ) -> None:
        arguments = {key: value for key, value in locals().items() if key in WeightingOptions.__dataclass_fields__}
        #: every option, validated and frozen (also a mapping of them as plain values, for the results record)
        self.options = options = WeightingOptions(**arguments)
        self.target, proposal, normalizer = options.components
        #: the checkpointed state: ``q``, the normaliser, the diagnostics, the counters (see :class:`WeightingState`)
        self.state = WeightingState(
            proposal=proposal,
            normalizer=normalizer,
            diagnostics=WeightingDiagnostics(options.window),
            selection_fit=SelectionFit(options.window) if options.mode == "resample" else None,
        )
        self.resampler = Resampler(
            options.pool, options.replacement, options.shuffle_weights, options.seed, options.out_of_support
        )
        self.reference: EpisodicModule | None = None
        #: the record of the step in progress, from its weights (on the device) to ``on_train_batch_end``
        self.current_step: WeightingStep | None = None
        #: what the last training step did, read to the host (see :class:`WeightingStep`)
        self.last_step: WeightingStep | None = None
        self._previous: WeightingStrategy | None = None
        #: ``mode="resample"``: what the last step chose (see :class:`ResampleStep`)
        self.last_selection: ResampleStep | None = None

    @property
    @override
    def state_key(self) -> str:
        # fixed prefix, not type(self).__qualname__: subclasses restore checkpoints of the base class
        return f"DifficultyWeightingCallback[{self.options.name}]"

    @property
    def ready(self) -> bool:
        """Whether weights come from ``q`` (offline: once scored; online: after the warm-up)."""
        return self.state.proposal.ready

    @property
    def mu(self) -> float:
        """The proposal's current location (normal: the mean difficulty)."""
        return self.state.proposal.location

    @property
    def sigma(self) -> float:
        """The proposal's current scale (normal: the standard deviation of difficulty, floored)."""
        return self.state.proposal.scale

    # -- set-up -------------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, EpisodicModule):
            raise TypeError(f"DifficultyWeightingCallback needs an EpisodicModule, got {type(pl_module).__name__}")
        if isinstance(pl_module.weighting, DifficultyWeightingCallback) and pl_module.weighting is not self:
            raise ValueError("only one DifficultyWeightingCallback can weight a module at a time")
        if stage == "fit":
            check_trainer(trainer, self.options, self.target)
        if pl_module.weighting is not self:
            self._previous = pl_module.weighting
        pl_module.weighting = self

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if isinstance(pl_module, EpisodicModule) and pl_module.weighting is self:
            pl_module.weighting = self._previous
        self._previous = self.reference = self.current_step = None  # frees the reference; on_fit_start loads it again

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.options.estimate != "offline":
            return
        assert self.options.reference_checkpoint is not None
        self.reference = ref.load_reference(
            self.options.reference_checkpoint, pl_module.device, ref.module_dtype(pl_module)
        )
        state = self.state
        if state.offline_scored == 0:  # else restored from the checkpoint: the same estimates, without scoring again
            values = ref.fit_offline(trainer, pl_module, self.reference, state.proposal, self.options.offline_episodes)
            state.offline_scored = values.numel()
            state.diagnostics.observe(values, None)
            if not self.target.plain_sampling:
                state.check_fit(self.options.proposal_name)
                self._check_pool(check_datamodule(trainer).episodes_per_batch, self._progress(trainer))

    # -- the weighting strategy (called from EpisodicModule.training_step) ---------------------------------------
    def episode_weights(self, module: EpisodicModule, batch: Episode, difficulties: Tensor) -> EpisodeWeights:
        """This rank's weights and their normalisation, from ``q`` as it stands before the step.

        Gathers the global batch's difficulties (the step's one collective of this callback), computes the global
        weights identically on every rank (shuffled for the placebo, then normalised) and returns this rank's slice.

        Args:
            module: the module being trained.
            batch: this rank's episodes of the step (the offline reference scores them).
            difficulties: the trained model's detached difficulties of ``batch``.

        Returns:
            Detached, finite, non-negative weights (all 1 during the online warm-up) and their normalisation.
        """
        if self.options.mode == "resample":  # the episodes were chosen by weight: each is trained with weight 1
            return EpisodeWeights(torch.ones_like(difficulties))
        trainer = module.trainer
        global_step, progress = trainer.global_step, self._progress(trainer)
        if self.options.estimate == "offline":
            difficulties = ref.reference_difficulties(self._reference(), batch).to(difficulties.device)
        local = difficulties.detach()
        # (W, B_local) under DDP, unchanged in one process; rank order is global batch order
        everything = trainer.strategy.all_gather(local).reshape(-1)
        q, seed = self.state.proposal, self.options.seed if self.options.shuffle_weights else None
        raw, result = global_weights(
            everything, q, self.target, self.state.normalizer, self.options.out_of_support, progress, seed, global_step
        )
        self.current_step = WeightingStep(
            global_step, progress, q.location, q.scale, everything, result.weights, not q.ready, raw, q.support()
        )
        start = trainer.global_rank * local.numel()
        return result._replace(weights=result.weights[start : start + local.numel()].detach())

    def select_episodes(self, module: EpisodicModule, batch: Episode) -> Episode:
        """The episodes the step trains on: ``batch`` itself, or with ``mode="resample"`` this rank's share of the
        ``|B|`` candidates chosen by weight from the step's pool (called by ``EpisodicModule.training_step``)."""
        if self.options.mode != "resample":
            return batch
        online = self.options.estimate == "online"
        q, progress = self.state.proposal, self._progress(module.trainer)
        plain = not q.ready or self.target.plain_sampling  # q before the step: the warm-up's last step is plain too
        scored = self.resampler.score(module, module if online else self._reference())
        if online:  # q absorbs the pool (plain samples) before the weights; the pool's fit is checked for |B|
            self._learn(scored.difficulties, progress, batch=scored.batch)
        chosen, record = self.resampler.choose(module, scored, None if plain else q, self.target, progress)
        self.last_selection = record
        assert self.state.selection_fit is not None  # mode="resample" keeps one
        self.state.selection_fit.observe(record, q, self.target, progress)
        weights = torch.ones(len(record.selected), dtype=torch.float64)
        raw = weights if record.raw_weights is None else record.raw_weights[record.selected]
        difficulties = record.difficulties[record.selected]
        warmup = record.raw_weights is None
        self.current_step = WeightingStep(
            record.step, progress, q.location, q.scale, difficulties, weights, warmup, raw, q.support()
        )
        return chosen

    def _learn(self, difficulties: Tensor, progress: float | None = None, batch: int | None = None) -> None:
        # online: q absorbs the step's difficulties; the fit is checked every warmup_steps (not for plain sampling),
        # and resampling's pool (given the global batch's size, |B|) at the end of the warm-up by prediction, then
        # every warmup_steps by the distance its chosen batches reached (the difficulties drift as the model learns)
        checked = None if self.target.plain_sampling else self.options.proposal_name
        self.state.learn(difficulties, self.options.warmup_steps, checked)
        steps, every = self.state.proposal.steps, self.options.warmup_steps
        if checked is not None and batch is not None and steps >= every and steps % every == 0:
            self._check_pool(batch, progress, measured=steps > every)

    def _check_pool(self, batch: int, progress: float | None, measured: bool = False) -> None:
        # the pool is the resampler's, which draws k |B| candidates a step; the placebo's choice is blind to
        # difficulty by design (its batches stay at plain batches' distance from the target): nothing to warn of
        if (options := self.options).mode == "resample" and not options.shuffle_weights:
            name, pool, state = options.proposal_name, self.resampler.pool, self.state
            check = state.recheck_pool if measured else state.check_pool
            check(pool, batch, self.target, progress, options.out_of_support, name)

    def _progress(self, trainer: pl.Trainer) -> float | None:
        # every target may use the progress t / T (setup checked max_steps for a target that needs it)
        max_steps = trainer.max_steps  # a property that walks Lightning's loops
        return curriculum_progress(trainer.global_step, max_steps) if max_steps > 0 else None

    def _reference(self) -> EpisodicModule:
        if self.reference is None or not self.ready:
            raise RuntimeError("the offline reference is not loaded: on_fit_start has not run")
        return self.reference

    # -- after each step ------------------------------------------------------------------------------------------
    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        current, self.current_step = self.current_step, None
        if current is None or not isinstance(outputs, dict) or "weighted" not in outputs:
            return  # the module did not ask for weights at this step
        weighted, selection = outputs["weighted"], self.last_selection
        step, skipped, nonfinite = read_record(current, weighted)  # the step's one read from the device
        self.last_step, state = step, self.state
        skipped += int(selection is not None and selection.fallback)
        state.count(step.step, skipped, nonfinite, weighted=not step.warmup)
        if selection is None:
            state.observe(step)
        else:  # the pool is the plain sample: the diagnostics see its difficulties and weights
            state.diagnostics.observe(selection.difficulties, selection.raw_weights)
        if logger_writes(trainer):  # self.log costs ~1-3 ms a value: only where a logger will write it
            estimated = not (step.warmup and state.proposal.steps < 1)
            values = step_metrics(step, weighted, self.target.needs_progress, estimated)
            values.update(skipped_steps=float(state.skipped_steps), nonfinite_episodes=float(state.nonfinite_episodes))
            values.update(state.diagnostics.summary(log_difficulty=state.proposal.log_difficulty))
            if selection is not None and state.selection_fit is not None:
                values.update(resample_metrics(selection), **state.selection_fit.summary())
            for key, value in values.items():  # identical on every rank already: no sync
                pl_module.log(f"weighting/{key}", value, on_step=True, on_epoch=False, sync_dist=False,
                              batch_size=len(step.weights))  # fmt: skip
        if self.options.histogram_every_n_steps and step.step % self.options.histogram_every_n_steps == 0:
            _log_histograms(trainer, step)
        if self.options.estimate == "online" and selection is None:  # resampling: q learnt the pool before choosing
            self._learn(step.difficulties)

    @override
    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        if self.options.log_grad_norm and logger_writes(trainer):
            # the total 2-norm of the gradients (in float64), before the optimizer step
            norms = [p.grad.detach().double().norm() for p in pl_module.parameters() if p.grad is not None]
            total = torch.stack(norms).norm() if norms else torch.zeros((), dtype=torch.float64)
            pl_module.log("weighting/grad_norm", total.float(), on_step=True, on_epoch=False, sync_dist=False)

    # -- checkpointed state: the fields of self.state ---------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return self.state.state_dict(self.options.reference_checkpoint)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.state.load_state_dict(state_dict, self.options.estimate == "online", self.options.reference_checkpoint)


def _log_histograms(trainer: pl.Trainer, step: WeightingStep) -> None:
    """The global batch's difficulties and weights as TensorBoard histograms (other loggers have none)."""
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_histogram("weighting/difficulties", step.difficulties, step.step)
            logger.experiment.add_histogram("weighting/weights", step.weights, step.step)

r"""
Difficulty weighting
^^^^^^^^^^^^^^^^^^^^

Importance weighting over episode difficulty ("Uniform Sampling over Episode Difficulty", Arnold et al.,
NeurIPS 2021) as a Lightning callback that plugs into :class:`~lightning_episodes.EpisodicModule`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final, NamedTuple

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodicModule, WeightingStrategy
from lightning_episodes.callbacks.reference import (
    check_reference,
    load_reference,
    module_dtype,
    reference_difficulties,
    score_offline,
)
from lightning_episodes.data.episode import Episode
from lightning_episodes.weighting import (
    NORMALIZATIONS,
    OUT_OF_SUPPORT,
    SIGMA_FLOOR,
    UPDATES,
    CurriculumTarget,
    DifficultyEstimator,
    Target,
    curriculum_progress,
    fraction_outside_support,
    get_target,
    importance_weights,
)

__all__ = ["PROPOSALS", "DifficultyWeightingCallback", "WeightingStep"]

#: Accepted values of ``proposal``.
PROPOSALS: Final[tuple[str, ...]] = ("online", "offline")

# non-finite episodes are always counted (and logged); only the first few steps with some are warned about
_MAX_WARNINGS = 10


class WeightingStep(NamedTuple):
    """What the callback did at the last training step, over the global batch (all ranks, in order).

    Attributes:
        step: ``trainer.global_step`` when the step's weights were computed (0-based).
        progress: ``t / T`` with ``T = trainer.max_steps`` (``None`` without ``max_steps``).
        mu: mean difficulty the weights used (before the step's update).
        sigma: standard deviation the weights used (floored).
        difficulties: float64 ``[|B|]`` on the CPU: the difficulties the weights were computed from (the
            reference model's offline, the trained model's online).
        weights: float64 ``[|B|]`` on the CPU: the weights the loss used.
        warmup: ``True`` while the online warm-up gave every episode weight 1.
    """

    step: int
    progress: float | None
    mu: float
    sigma: float
    difficulties: Tensor
    weights: Tensor
    warmup: bool


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(name: str, value: object, requirement: str) -> ValueError:
    return ValueError(f"DifficultyWeightingCallback: {name} must be {requirement}, got {value!r}")


def _logger_writes(trainer: pl.Trainer) -> bool:
    """Whether the loggers write this training step's metrics: Lightning's own condition (``log_every_n_steps``,
    every step under ``fast_dev_run``), which its ``LearningRateMonitor`` also reads; it is the same on every rank."""
    connector = getattr(trainer, "_logger_connector", None)
    return connector is None or bool(connector.should_update_logs or getattr(trainer, "fast_dev_run", False))


class DifficultyWeightingCallback(Callback):
    r"""Re-weights each training episode by ``w = p(difficulty) / q(difficulty)`` (Arnold et al., 2021).

    The callback installs itself as the :class:`~lightning_episodes.EpisodicModule`'s weighting strategy.
    It models the difficulty ``Omega`` (query loss) of plainly sampled episodes as ``q = N(mu, sigma^2)``
    truncated to ``S = [mu - c sigma, mu + c sigma]`` and gives each episode the weight ``p(Omega) / q(Omega)``
    of a ``target`` distribution ``p`` on ``S``; the module then trains on ``sum w L / ESS``
    (``ESS = (sum w)^2 / sum w^2``), which is ``|B| / ESS`` times the plain importance-sampling estimate.

    - ``proposal="online"`` (default): for ``warmup_steps`` steps every weight is 1 and ``mu, sigma^2`` are the
      plain mean and variance of those steps' difficulties; afterwards each step is weighted with the estimates
      as they stand, which then absorb the step's ordered global batch (``update="episode"``: one exponential
      moving average update per episode; ``"batch"``: one per step; ``decay`` is the weight of the old value).
    - ``proposal="offline"``: a frozen ``reference_checkpoint`` (any algorithm of this library trained with plain
      sampling on the same ways) scores ``offline_episodes`` training episodes before training to fix
      ``mu, sigma^2``; each training episode is weighted by the reference's difficulty of that episode.

    Under DDP every rank gathers the difficulties of the global batch, so all ranks hold identical estimates
    and the gradient equals that of one process on the same batch. It logs ``weighting/mu``, ``sigma``, ``ess``,
    ``batch_over_ess`` (``|B| / ESS``), ``ess_over_batch``, ``weight_min``/``mean``/``max``, ``outside_support``
    (fraction of the batch outside ``S``), ``skipped_steps`` (cumulative steps with ``sum w = 0``, which get zero
    gradient), ``nonfinite_episodes`` (cumulative episodes with a non-finite loss, masked out) and, for the
    curriculum, ``mu_t``, on the steps where the loggers write (every ``trainer.log_every_n_steps``, as Lightning
    logs ``train/loss``): logging is most of the callback's own cost. Its estimates absorb every step, and
    :attr:`last_step` holds every step's weights and difficulties.

    Args:
        target: ``"baseline"``, ``"uniform"``, ``"easy"``, ``"hard"``, ``"curriculum"``, a name registered with
            :func:`~lightning_episodes.weighting.register_target`, or a :class:`~lightning_episodes.weighting.Target`.
        decay: ``lambda`` in ``[0, 1)``, the weight of the old value in the online moving average.
        warmup_steps: optimizer steps of plain sampling before online weighting starts (>= 2).
        support_sigmas: ``c``, half-width of the support ``S`` in standard deviations (2.58: about 99%).
        out_of_support: ``"zero"``: weight 0 outside ``S``; ``"clamp"``: evaluate at the nearest end of ``S``.
        normalization: ``"ess"`` (``sum w L / ESS``, the paper's) or ``"self"`` (``sum w L / sum w``).
        update: ``"episode"`` or ``"batch"``: how the online estimate absorbs a step.
        proposal: ``"online"`` or ``"offline"``.
        reference_checkpoint: the offline reference model's checkpoint (required for ``"offline"``).
        offline_episodes: training episodes the reference scores to fix ``mu, sigma^2`` offline.
        histogram_every_n_steps: every N steps, the global batch's difficulties and weights go to
            TensorBoard as histograms (``weighting/difficulties``, ``weighting/weights``); 0 turns it off.
        name: distinguishes the checkpointed state of several instances (see the tip).

    Raises:
        ValueError: at construction, for an argument out of range or unknown; at ``setup``, for a curriculum
            without ``trainer.max_steps``, ``accumulate_grad_batches > 1``, or a reference trained on other ways.
        FileNotFoundError: at ``setup``, if ``reference_checkpoint`` does not exist.

    .. tip:: The checkpoint key is ``"DifficultyWeightingCallback[<name>]"`` for this class *and its subclasses*,
        so a subclass resumes from a checkpoint written with the base class; hyperparameters are left out of the
        key so that a resumed run may change them.

    Example::

        >>> callback = DifficultyWeightingCallback(target="uniform", warmup_steps=100)
        >>> callback.state_key
        'DifficultyWeightingCallback[]'
        >>> # trainer = pl.Trainer(max_steps=10_000, callbacks=[callback]); trainer.fit(ProtoNet(), datamodule)
    """

    def __init__(
        self,
        target: str | Target = "uniform",
        decay: float = 0.9,
        warmup_steps: int = 100,
        support_sigmas: float = 2.58,
        out_of_support: str = "zero",
        normalization: str = "ess",
        update: str = "episode",
        proposal: str = "online",
        reference_checkpoint: str | Path | None = None,
        offline_episodes: int = 1000,
        histogram_every_n_steps: int = 0,
        name: str = "",
    ) -> None:
        try:
            self.target = get_target(target)
        except ValueError as error:
            raise ValueError(f"DifficultyWeightingCallback: {error}") from None
        if not (_is_number(decay) and 0.0 <= decay < 1.0):
            raise _invalid("decay", decay, "a number in [0, 1)")
        if not (_is_int(warmup_steps) and warmup_steps >= 2):
            raise _invalid("warmup_steps", warmup_steps, "an integer >= 2")
        if not (_is_number(support_sigmas) and support_sigmas > 0):
            raise _invalid("support_sigmas", support_sigmas, "a finite number > 0")
        for key, value, allowed in (
            ("out_of_support", out_of_support, OUT_OF_SUPPORT),
            ("normalization", normalization, NORMALIZATIONS),
            ("update", update, UPDATES),
            ("proposal", proposal, PROPOSALS),
        ):
            if value not in allowed:
                raise _invalid(key, value, f"one of {list(allowed)}")
        if proposal == "offline" and not reference_checkpoint:
            raise ValueError(
                "DifficultyWeightingCallback: proposal='offline' needs reference_checkpoint, the checkpoint of a "
                "model trained with plain sampling on the same ways (on the command line: "
                "--trainer.callbacks.reference_checkpoint=PATH after the sampling config)"
            )
        if not (_is_int(offline_episodes) and offline_episodes >= 2):
            raise _invalid("offline_episodes", offline_episodes, "an integer >= 2")
        if not (_is_int(histogram_every_n_steps) and histogram_every_n_steps >= 0):
            raise _invalid("histogram_every_n_steps", histogram_every_n_steps, "an integer >= 0")
        self.histogram_every_n_steps = histogram_every_n_steps
        self.target_name = target if isinstance(target, str) else type(target).__name__
        self.support_sigmas, self.out_of_support = float(support_sigmas), out_of_support
        self.normalization, self.proposal = normalization, proposal
        self.reference_checkpoint = None if reference_checkpoint is None else str(reference_checkpoint)
        self.offline_episodes, self.name = offline_episodes, name
        self.estimator = DifficultyEstimator(float(decay), warmup_steps, update)
        self.skipped_steps = 0
        self.nonfinite_episodes = 0
        #: offline ``(mu, variance, n)``, fixed before training (restored on resume instead of re-scored)
        self.offline: tuple[float, float, int] | None = None
        self.reference: EpisodicModule | None = None
        #: what the last training step did (see :class:`WeightingStep`)
        self.last_step: WeightingStep | None = None
        self._previous: WeightingStrategy | None = None
        self._pending: dict[str, Any] = {}
        self._warnings = 0

    @property
    def options(self) -> dict[str, str | int | float | bool | None]:
        """Every option of this callback as plain values (what a results record stores to tell runs apart)."""
        return {
            "target": self.target_name,
            "proposal": self.proposal,
            "decay": self.estimator.decay,
            "warmup_steps": self.estimator.warmup_steps,
            "update": self.estimator.update_mode,
            "support_sigmas": self.support_sigmas,
            "out_of_support": self.out_of_support,
            "normalization": self.normalization,
            "reference_checkpoint": self.reference_checkpoint,
            "offline_episodes": self.offline_episodes,
        }

    @property
    @override
    def state_key(self) -> str:
        # fixed prefix, not type(self).__qualname__: subclasses restore checkpoints of the base class
        return f"DifficultyWeightingCallback[{self.name}]"

    # -- estimates ----------------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Whether weights come from the estimates (offline: once scored; online: after the warm-up)."""
        return self.offline is not None if self.proposal == "offline" else self.estimator.ready

    @property
    def mu(self) -> float:
        """The current mean difficulty (offline: the reference's, fixed)."""
        return self.offline[0] if self.offline is not None else self.estimator.mu

    @property
    def sigma(self) -> float:
        """The current standard deviation of difficulty, floored (offline: the reference's, fixed)."""
        return self.estimator.sigma if self.offline is None else max(math.sqrt(self.offline[1]), SIGMA_FLOOR)

    # -- set-up -------------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, EpisodicModule):
            raise TypeError(f"DifficultyWeightingCallback needs an EpisodicModule, got {type(pl_module).__name__}")
        if isinstance(pl_module.weighting, DifficultyWeightingCallback) and pl_module.weighting is not self:
            raise ValueError("only one DifficultyWeightingCallback can weight a module at a time")
        if stage == "fit":
            if isinstance(self.target, CurriculumTarget) and not trainer.max_steps > 0:
                raise ValueError(
                    "DifficultyWeightingCallback(target='curriculum') needs trainer.max_steps > 0 (its progress "
                    f"is t / max_steps), got trainer.max_steps={trainer.max_steps}"
                )
            if trainer.accumulate_grad_batches > 1:
                raise ValueError(
                    "DifficultyWeightingCallback does not support trainer.accumulate_grad_batches="
                    f"{trainer.accumulate_grad_batches}: the ESS must be computed over the whole effective batch; "
                    "raise data.episodes_per_batch instead"
                )
            if self.proposal == "offline":
                assert self.reference_checkpoint is not None  # checked in __init__
                check_reference(self.reference_checkpoint, getattr(getattr(trainer, "datamodule", None), "ways", None))
        if pl_module.weighting is not self:
            self._previous = pl_module.weighting
        pl_module.weighting = self

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if isinstance(pl_module, EpisodicModule) and pl_module.weighting is self:
            pl_module.weighting = self._previous
        self._previous = None
        self.reference = None  # frees its memory; on_fit_start loads it again
        self._pending = {}

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.proposal != "offline":
            return
        assert self.reference_checkpoint is not None
        self.reference = load_reference(self.reference_checkpoint, pl_module.device, module_dtype(pl_module))
        if self.offline is not None and self.offline[2] > 0:
            return  # restored from the checkpoint: the same estimates, without scoring again
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, "samplers"):
            raise ValueError("DifficultyWeightingCallback(proposal='offline') needs an EpisodicDataModule")
        # the precision context of a training step (e.g. autocast): the reference scores as it will during training
        with trainer.precision_plugin.train_step_context():
            self.offline = score_offline(
                self.reference,
                datamodule,
                self.offline_episodes,
                pl_module.device,
                trainer.global_rank,
                trainer.world_size,
                lambda t: trainer.strategy.reduce(t, reduce_op="sum"),  # every rank calls it
            )

    # -- the weighting strategy (called from EpisodicModule.training_step) ---------------------------------------
    def episode_weights(self, module: EpisodicModule, batch: Episode, difficulties: Tensor) -> Tensor:
        """Weights ``[B_local]`` of this rank's episodes, from the estimates as they stand before the step.

        Args:
            module: the module being trained.
            batch: this rank's episodes of the step (the offline reference scores them).
            difficulties: the trained model's detached difficulties of ``batch``.

        Returns:
            Detached, finite, non-negative weights (all 1 during the online warm-up).
        """
        trainer = module.trainer
        # every target may use the progress t / T (the curriculum needs it; setup checked max_steps for it)
        progress = curriculum_progress(trainer.global_step, trainer.max_steps) if trainer.max_steps > 0 else None
        if self.proposal == "offline":
            if self.reference is None or self.offline is None:
                raise RuntimeError("the offline reference is not loaded: on_fit_start has not run")
            difficulties = reference_difficulties(self.reference, batch).to(difficulties.device)
        mu, sigma, warmup = self.mu, self.sigma, not self.ready
        if warmup:
            weights = torch.ones_like(difficulties)
        else:
            weights = importance_weights(
                difficulties, mu, sigma, self.target, self.support_sigmas, self.out_of_support, progress
            )
        self._pending = {"step": trainer.global_step, "progress": progress, "mu": mu, "sigma": sigma}
        self._pending.update(local=difficulties.detach(), warmup=warmup)
        return weights.detach()

    # -- after each step ------------------------------------------------------------------------------------------
    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        pending, self._pending = self._pending, {}
        if not pending or not isinstance(outputs, dict) or "weights" not in outputs:
            return  # the module did not ask for weights at this step
        weighted = outputs["weighted"]
        local = pending.pop("local")
        dtype = torch.float32 if local.device.type == "mps" else torch.float64
        both = torch.stack([local.to(dtype), outputs["weights"].to(local.device, dtype)], 1)
        # one collective on every rank: (W, B_local, 2) under DDP, unchanged in one process; rank order is
        # global batch order, so every rank sees the ordered global batch
        gathered = trainer.strategy.all_gather(both).reshape(-1, 2).to("cpu", torch.float64)
        difficulties, weights = gathered[:, 0], gathered[:, 1]
        step = WeightingStep(weights=weights, difficulties=difficulties, **pending)
        self.last_step = step

        self.skipped_steps += int(weighted.skipped)
        self.nonfinite_episodes += int(weighted.nonfinite)
        if weighted.nonfinite and self._warnings < _MAX_WARNINGS:
            self._warnings += 1
            last = self._warnings == _MAX_WARNINGS
            rank_zero_warn(
                f"step {step.step}: {weighted.nonfinite} episode(s) with a non-finite loss got weight 0"
                + ("; further ones are only counted in weighting/nonfinite_episodes" if last else "")
            )
        if _logger_writes(trainer):  # self.log costs ~1-3 ms a value: only where a logger will write it
            self._log(pl_module, step, weighted)
        self._log_histograms(trainer, step)
        if self.proposal == "online":
            self.estimator.update(difficulties)

    def _log(self, pl_module: pl.LightningModule, step: WeightingStep, weighted: Any) -> None:
        size = len(step.weights)
        ess = float(weighted.ess)
        values = {
            "mu": step.mu,
            "sigma": step.sigma,
            "ess": ess,
            "batch_over_ess": float(weighted.batch_over_ess),
            "ess_over_batch": ess / float(weighted.batch_size) if float(weighted.batch_size) else 0.0,
            "weight_min": float(step.weights.min()) if size else 0.0,
            "weight_mean": float(step.weights.mean()) if size else 0.0,
            "weight_max": float(step.weights.max()) if size else 0.0,
            "outside_support": 0.0
            if step.warmup and self.estimator.episodes < 2
            else float(fraction_outside_support(step.difficulties, step.mu, step.sigma, self.support_sigmas)),
            "skipped_steps": float(self.skipped_steps),
            "nonfinite_episodes": float(self.nonfinite_episodes),
        }
        if isinstance(self.target, CurriculumTarget) and step.progress is not None:
            c = self.support_sigmas
            values["mu_t"] = step.mu - c * step.sigma + 2.0 * c * step.sigma * step.progress
        for key, value in values.items():
            # identical on every rank already (computed from gathered or all-reduced values): no sync
            pl_module.log(f"weighting/{key}", value, on_step=True, on_epoch=False, sync_dist=False, batch_size=size)

    def _log_histograms(self, trainer: pl.Trainer, step: WeightingStep) -> None:
        """The global batch's difficulties and weights as TensorBoard histograms, every N steps."""
        every = self.histogram_every_n_steps
        if not every or step.step % every or not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):  # other loggers have no histograms
                logger.experiment.add_histogram("weighting/difficulties", step.difficulties, step.step)
                logger.experiment.add_histogram("weighting/weights", step.weights, step.step)

    # -- checkpointed state ---------------------------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "estimator": self.estimator.state_dict(),
            "skipped_steps": int(self.skipped_steps),
            "nonfinite_episodes": int(self.nonfinite_episodes),
        }
        if self.offline is not None:
            mu, variance, count = self.offline
            state["offline"] = {"mu": float(mu), "variance": float(variance), "episodes": int(count)}
            state["offline"]["reference"] = str(self.reference_checkpoint)
        return state

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.estimator.load_state_dict(state_dict.get("estimator", {}))
        self.skipped_steps = int(state_dict.get("skipped_steps", 0))
        self.nonfinite_episodes = int(state_dict.get("nonfinite_episodes", 0))
        offline = state_dict.get("offline")
        if self.proposal != "offline" or not isinstance(offline, dict) or offline.get("episodes", 0) <= 0:
            return
        if offline.get("reference", self.reference_checkpoint) != self.reference_checkpoint:
            rank_zero_warn("reference_checkpoint differs from the checkpointed run's: its estimates are scored again")
            return
        self.offline = (float(offline["mu"]), float(offline["variance"]), int(offline["episodes"]))

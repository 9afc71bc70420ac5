"""The options of :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback`, and the Trainer's checks.

:class:`WeightingOptions` holds every option, frozen and validated once at construction; :func:`check_trainer`
runs at ``setup("fit")``. Every error names the option and its allowed range, so a bad YAML value fails before any
training.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_warn

from lightning_episodes.callbacks._resample_step import check_datamodule
from lightning_episodes.callbacks.reference import check_reference
from lightning_episodes.weighting import (
    NORMALIZER_OPTIONS,
    OUT_OF_SUPPORT,
    PROPOSAL_OPTIONS,
    UPDATES,
    Target,
    available_normalizers,
    available_proposals,
    get_target,
)

__all__ = ["ESTIMATES", "MODES", "WeightingOptions", "check_trainer"]

#: Accepted values of ``estimate``.
ESTIMATES: Final[tuple[str, ...]] = ("online", "offline")
#: Accepted values of ``mode``.
MODES: Final[tuple[str, ...]] = ("reweight", "resample")
#: Integer options and their minimum.
_MINIMUMS: Final[dict[str, int]] = {
    "warmup_steps": 2, "window": 10, "offline_episodes": 2, "histogram_every_n_steps": 0, "pool": 2, "seed": 0,
}  # fmt: skip
#: Options passed on as floats (a YAML ``3`` is an int).
_FLOATS: Final[tuple[str, ...]] = ("support_sigmas", "decay", "running_decay")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _invalid(name: str, value: object, requirement: str) -> ValueError:
    return ValueError(f"DifficultyWeightingCallback: {name} must be {requirement}, got {value!r}")


@dataclass(frozen=True)
class WeightingOptions(Mapping[str, Any]):
    """Every option of :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback` (documented there),
    validated once here and frozen.

    It is also a read-only mapping of the options as plain values (``target``: its name, or its class's name for
    a :class:`~lightning_episodes.weighting.Target` instance), which is what a results record stores to tell runs
    apart.

    Raises:
        ValueError: for an option out of its range or unknown, naming the option and the allowed values
            (``proposal="online"/"offline"`` of older versions is told to use ``estimate``).
    """

    target: str | Target = "uniform"
    decay: float = 0.9
    warmup_steps: int = 100
    support_sigmas: float = 2.58
    out_of_support: str = "zero"
    normalization: str = "ess"
    update: str = "episode"
    estimate: str = "online"
    proposal: str = "normal"
    window: int = 1000
    running_decay: float = 0.99
    shuffle_weights: bool = False
    seed: int = 0
    log_grad_norm: bool = False
    reference_checkpoint: str | None = None
    offline_episodes: int = 1000
    histogram_every_n_steps: int = 0
    name: str = ""
    mode: str = "reweight"
    pool: int = 4
    replacement: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.reference_checkpoint, Path):
            object.__setattr__(self, "reference_checkpoint", str(self.reference_checkpoint))
        try:
            get_target(self.target)
        except ValueError as error:
            raise ValueError(f"DifficultyWeightingCallback: {error}") from None
        if self.proposal in ESTIMATES:
            raise ValueError(
                f"DifficultyWeightingCallback: proposal={self.proposal!r} is now estimate={self.proposal!r}: "
                f"`proposal` names the model of the difficulty distribution, one of {list(available_proposals())}, "
                "and `estimate` chooses between the online estimate and the offline reference (in YAML: replace "
                f"`proposal: {self.proposal}` by `estimate: {self.proposal}`)"
            )
        for key in ("decay", "running_decay"):
            if not (_is_number(self[key]) and 0.0 <= self[key] < 1.0):
                raise _invalid(key, self[key], "a number in [0, 1)")
        for key, minimum in _MINIMUMS.items():
            if not (isinstance(self[key], int) and not isinstance(self[key], bool) and self[key] >= minimum):
                raise _invalid(key, self[key], f"an integer >= {minimum}")
        if not (_is_number(self.support_sigmas) and self.support_sigmas > 0):
            raise _invalid("support_sigmas", self.support_sigmas, "a finite number > 0")
        for key, allowed in (
            ("out_of_support", OUT_OF_SUPPORT),
            ("normalization", available_normalizers()),
            ("update", UPDATES),
            ("estimate", ESTIMATES),
            ("proposal", available_proposals()),
            ("mode", MODES),
        ):
            if self[key] not in allowed:
                raise _invalid(key, self[key], f"one of {list(allowed)}")
        for key in ("shuffle_weights", "log_grad_norm", "replacement"):
            if not isinstance(self[key], bool):
                raise _invalid(key, self[key], "true or false")
        if self.mode == "resample" and self.normalization != "ess":
            raise ValueError(
                f"DifficultyWeightingCallback: normalization={self.normalization!r} applies to mode='reweight' "
                "only: resampled episodes are trained with weight 1 (leave normalization at 'ess')"
            )
        if self.estimate == "offline" and not self.reference_checkpoint:
            raise ValueError(
                "DifficultyWeightingCallback: estimate='offline' needs reference_checkpoint, the checkpoint of a "
                "model trained with plain sampling on the same ways (on the command line: "
                "--trainer.callbacks.reference_checkpoint=PATH after the sampling config)"
            )

    @property
    def target_name(self) -> str:
        """The target's name (a :class:`~lightning_episodes.weighting.Target` instance: its class's name)."""
        return self.target if isinstance(self.target, str) else type(self.target).__name__

    def proposal_options(self) -> dict[str, Any]:
        """The options a proposal is built with (:data:`~lightning_episodes.weighting.PROPOSAL_OPTIONS`)."""
        return {key: float(self[key]) if key in _FLOATS else self[key] for key in PROPOSAL_OPTIONS}

    def normalizer_options(self) -> dict[str, Any]:
        """The options a normaliser is built with (:data:`~lightning_episodes.weighting.NORMALIZER_OPTIONS`)."""
        return {key: float(self[key]) if key in _FLOATS else self[key] for key in NORMALIZER_OPTIONS}

    # -- the read-only mapping of plain values ----------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key == "target":
            return self.target_name
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return (field.name for field in fields(self))

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)


def check_trainer(trainer: pl.Trainer, options: WeightingOptions, target: Target) -> None:
    """Raises, before training, where the Trainer cannot run the callback; warns where it would never weight.

    Args:
        trainer: the Trainer about to fit.
        options: the callback's options (the offline reference is checked against the data's ways; resampling
            draws its candidates from an ``EpisodicDataModule``).
        target: the callback's target (one that needs the progress gets ``t / max_steps``).

    Raises:
        ValueError: for a target that needs the progress (the curriculum) without ``trainer.max_steps``,
            ``accumulate_grad_batches > 1``, a reference trained on other ways, or resampling without an
            ``EpisodicDataModule`` or with a task sampler.
        FileNotFoundError: if ``reference_checkpoint`` does not exist.
    """
    if target.needs_progress and not trainer.max_steps > 0:
        raise ValueError(
            f"DifficultyWeightingCallback(target={options.target_name!r}) needs trainer.max_steps > 0 (the target "
            f"needs the training progress t / max_steps), got trainer.max_steps={trainer.max_steps}"
        )
    weighted = options.estimate == "online" and not target.plain_sampling
    if weighted and 0 < trainer.max_steps <= options.warmup_steps:  # plain sampling under the weighted arm's name
        rank_zero_warn(
            f"DifficultyWeightingCallback: warmup_steps={options.warmup_steps} covers all of "
            f"trainer.max_steps={trainer.max_steps}, so this run never weights by difficulty and trains with "
            "plain sampling; set warmup_steps below max_steps"
        )
    if trainer.accumulate_grad_batches > 1:
        raise ValueError(
            "DifficultyWeightingCallback does not support trainer.accumulate_grad_batches="
            f"{trainer.accumulate_grad_batches}: the ESS must be computed over the whole effective batch; "
            "raise data.episodes_per_batch instead"
        )
    if options.mode == "resample" and (sampler := check_datamodule(trainer).task_sampler) is not None:
        raise ValueError(
            f"DifficultyWeightingCallback(mode='resample') chooses among the plain stream's episodes and cannot be "
            f"combined with data.task_sampler={sampler!r}, which chooses the classes itself: use one of them"
        )
    if options.estimate == "offline":
        assert options.reference_checkpoint is not None  # WeightingOptions requires it offline
        check_reference(options.reference_checkpoint, getattr(getattr(trainer, "datamodule", None), "ways", None))

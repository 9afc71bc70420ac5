"""Validation of :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback`'s options and of the Trainer.

:func:`check_options` runs at construction, :func:`check_trainer` at ``setup("fit")``; every error names the
option and its allowed range, so a bad YAML value fails before any training.
"""

from __future__ import annotations

import math
from typing import Any, Final

import pytorch_lightning as pl

from lightning_episodes.callbacks._resample_step import check_datamodule
from lightning_episodes.callbacks.reference import check_reference
from lightning_episodes.weighting import NORMALIZATIONS, OUT_OF_SUPPORT, PROPOSALS, UPDATES

__all__ = ["ESTIMATES", "MODES", "check_options", "check_trainer"]

#: Accepted values of ``estimate``.
ESTIMATES: Final[tuple[str, ...]] = ("online", "offline")
#: Accepted values of ``mode``.
MODES: Final[tuple[str, ...]] = ("reweight", "resample")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(name: str, value: object, requirement: str) -> ValueError:
    return ValueError(f"DifficultyWeightingCallback: {name} must be {requirement}, got {value!r}")


def check_options(options: dict[str, Any]) -> None:
    """Raises a ``ValueError`` naming the first option out of its range.

    Args:
        options: the callback's options by name (see its ``options`` property).

    Raises:
        ValueError: for an option out of range or unknown; ``proposal="online"``/``"offline"`` (the option's
            meaning in earlier versions) is told to use ``estimate``.
    """
    proposal = options["proposal"]
    if proposal in ESTIMATES:
        raise ValueError(
            f"DifficultyWeightingCallback: proposal={proposal!r} is now estimate={proposal!r}: `proposal` names the "
            f"model of the difficulty distribution, one of {list(PROPOSALS)}, and `estimate` chooses between the "
            "online estimate and the offline reference (in YAML: replace `proposal: "
            f"{proposal}` by `estimate: {proposal}`)"
        )
    decay, running_decay = options["decay"], options["running_decay"]
    if not (_is_number(decay) and 0.0 <= decay < 1.0):
        raise _invalid("decay", decay, "a number in [0, 1)")
    if not (_is_number(running_decay) and 0.0 <= running_decay < 1.0):
        raise _invalid("running_decay", running_decay, "a number in [0, 1)")
    minimums = {"warmup_steps": 2, "window": 10, "offline_episodes": 2, "histogram_every_n_steps": 0, "pool": 2}
    for key, minimum in minimums.items():
        if not (_is_int(options[key]) and options[key] >= minimum):
            raise _invalid(key, options[key], f"an integer >= {minimum}")
    if not (_is_int(options["seed"]) and options["seed"] >= 0):
        raise _invalid("seed", options["seed"], "an integer >= 0")
    if not (_is_number(options["support_sigmas"]) and options["support_sigmas"] > 0):
        raise _invalid("support_sigmas", options["support_sigmas"], "a finite number > 0")
    for key, allowed in (
        ("out_of_support", OUT_OF_SUPPORT),
        ("normalization", NORMALIZATIONS),
        ("update", UPDATES),
        ("estimate", ESTIMATES),
        ("proposal", PROPOSALS),
        ("mode", MODES),
    ):
        if options[key] not in allowed:
            raise _invalid(key, options[key], f"one of {list(allowed)}")
    for key in ("shuffle_weights", "log_grad_norm", "replacement"):
        if not isinstance(options[key], bool):
            raise _invalid(key, options[key], "true or false")
    if options["mode"] == "resample" and options["normalization"] != "ess":
        raise ValueError(
            f"DifficultyWeightingCallback: normalization={options['normalization']!r} applies to mode='reweight' "
            "only: resampled episodes are trained with weight 1 (leave normalization at 'ess')"
        )
    if options["estimate"] == "offline" and not options["reference_checkpoint"]:
        raise ValueError(
            "DifficultyWeightingCallback: estimate='offline' needs reference_checkpoint, the checkpoint of a "
            "model trained with plain sampling on the same ways (on the command line: "
            "--trainer.callbacks.reference_checkpoint=PATH after the sampling config)"
        )


def check_trainer(
    trainer: pl.Trainer, curriculum: bool, reference_checkpoint: str | None, resample: bool = False
) -> None:
    """Raises, before training, where the Trainer cannot run the callback.

    Args:
        trainer: the Trainer about to fit.
        curriculum: whether the target is a curriculum (its progress is ``t / max_steps``).
        reference_checkpoint: the offline reference (``None`` online), checked against the data's ways.
        resample: ``mode="resample"``, which draws its candidates from an ``EpisodicDataModule``.

    Raises:
        ValueError: for a curriculum without ``trainer.max_steps``, ``accumulate_grad_batches > 1``, a reference
            trained on other ways, or resampling without an ``EpisodicDataModule``.
        FileNotFoundError: if ``reference_checkpoint`` does not exist.
    """
    if curriculum and not trainer.max_steps > 0:
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
    if resample:
        check_datamodule(trainer)
    if reference_checkpoint is not None:
        check_reference(reference_checkpoint, getattr(getattr(trainer, "datamodule", None), "ways", None))

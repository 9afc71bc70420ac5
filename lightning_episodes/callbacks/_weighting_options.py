"""The options of :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback`, and the Trainer's checks.

:class:`WeightingOptions` holds every option, frozen and validated once at construction; :func:`check_trainer`
runs at ``setup("fit")``. Every error names the option and its allowed range, so a bad YAML value fails before any
training.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, fields
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
    Component,
    ESSNormalizer,
    Normalizer,
    Proposal,
    Target,
    available_proposals,
    get_target,
    make_normalizer,
    make_proposal,
)
from lightning_episodes.weighting.proposals import PROPOSAL_REGISTRY

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
#: The options the callback reads about its proposal itself (the warm-up's length: when the fit is checked, whether
#: a run ever weights): a proposal given as an object sets them with its own constructor's arguments.
_FROM_PROPOSAL: Final[tuple[str, ...]] = ("warmup_steps",)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _invalid(name: str, value: object, requirement: str) -> ValueError:
    return ValueError(f"DifficultyWeightingCallback: {name} must be {requirement}, got {value!r}")


@dataclass(frozen=True)
class WeightingOptions(Mapping[str, Any]):
    """Every option of :class:`~lightning_episodes.callbacks.DifficultyWeightingCallback` (documented there),
    validated once here and frozen, and the target, proposal and normaliser built from them (:attr:`components`).

    A component named (``proposal: normal``, or a class path string) is built with the callback's options its
    constructor takes (``decay``, ``window``...); one given as an object (an instance, or ``class_path`` +
    ``init_args`` in YAML) keeps its own arguments, and a callback option it also takes must then be left at its
    default or agree with it (else a ``ValueError``): each value is set once. ``warmup_steps`` is then the
    proposal's.

    It is also a read-only mapping of the options as plain values, which is what a results record stores to tell
    runs apart: a component given by name is its name, one given as an object its ``{"class_path", "init_args"}``.

    Its fields are the callback's arguments, in their order and with their defaults: the callback's signature declares
    the options (jsonargparse reads it for the YAML keys and ``--help``, and the docs' table of options is generated
    from it and its docstring), and a test fails where the two disagree.

    Raises:
        ValueError: for an option out of its range or unknown, naming the option and the allowed values
            (``proposal="online"/"offline"`` of older versions is told to use ``estimate``), or an option given both
            to the callback and to the component object that takes it, with different values.
    """

    target: str | Target = "uniform"
    decay: float = 0.9
    warmup_steps: int = 100
    support_sigmas: float = 2.58
    out_of_support: str = "zero"
    normalization: str | Normalizer = "ess"
    update: str = "episode"
    estimate: str = "online"
    proposal: str | Proposal = "normal"
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
        if isinstance(self.proposal, str) and self.proposal in ESTIMATES:
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
        for key, allowed in (("out_of_support", OUT_OF_SUPPORT), ("update", UPDATES), ("estimate", ESTIMATES),
                             ("mode", MODES)):  # fmt: skip
            if self[key] not in allowed:
                raise _invalid(key, self[key], f"one of {list(allowed)}")
        for key in ("shuffle_weights", "log_grad_norm", "replacement"):
            if not isinstance(self[key], bool):
                raise _invalid(key, self[key], "true or false")
        if not isinstance(self.name, str):
            raise _invalid("name", self.name, "a string")
        self._build_components()
        if self.mode == "resample" and type(self.components[2]) is not ESSNormalizer:
            raise ValueError(
                f"DifficultyWeightingCallback: normalization={self['normalization']!r} applies to mode='reweight' "
                "only: resampled episodes are trained with weight 1 (leave normalization at 'ess')"
            )
        if self.estimate == "offline" and not self.reference_checkpoint:
            raise ValueError(
                "DifficultyWeightingCallback: estimate='offline' needs reference_checkpoint, the checkpoint of a "
                "model trained with plain sampling on the same ways (on the command line: "
                "--trainer.callbacks.reference_checkpoint=PATH after the sampling config)"
            )

    def _build_components(self) -> None:
        """Builds :attr:`components`, checks the options given twice, and takes ``warmup_steps`` from a proposal
        object."""
        try:
            target = get_target(self.target)
            proposal = make_proposal(self.proposal, **self.proposal_options())
            normalizer = make_normalizer(self.normalization, **self.normalizer_options())
        except (ValueError, TypeError) as error:
            raise ValueError(f"DifficultyWeightingCallback: {error}") from None
        for key, component, options in (("proposal", proposal, PROPOSAL_OPTIONS),
                                        ("normalization", normalizer, NORMALIZER_OPTIONS)):  # fmt: skip
            if not isinstance(getattr(self, key), Component):
                continue
            for argument, value in component.init_args.items():
                option = component.callback_options.get(argument, argument)  # the callback's option of that role
                if option not in options:
                    continue
                if self[option] != _default(option) and self[option] != value:
                    raise ValueError(
                        f"DifficultyWeightingCallback: {option}={self[option]!r} disagrees with the {key}'s own "
                        f"{argument}={value!r} ({type(component).__name__}): give it once, in the {key}'s init_args "
                        f"(the callback's {option} sets only a {key} given by name)"
                    )
                if option in _FROM_PROPOSAL and key == "proposal":
                    object.__setattr__(self, option, value)
        object.__setattr__(self, "_components", (target, proposal, normalizer))

    @property
    def components(self) -> tuple[Target, Proposal, Normalizer]:
        """The target, the proposal and the normaliser the options give (built once, at construction)."""
        return self._components  # type: ignore[attr-defined]

    @property
    def target_name(self) -> str:
        """The target's name (a :class:`~lightning_episodes.weighting.Target` instance: its class's name)."""
        return self.target if isinstance(self.target, str) else type(self.target).__name__

    @property
    def proposal_name(self) -> str:
        """The proposal's registered name (that of its class, for an object), else its class path: what the misfit
        warning compares with the registered proposals."""
        proposal = self.components[1]
        return PROPOSAL_REGISTRY.name_of(proposal) or type(proposal).class_path()

    def proposal_options(self) -> dict[str, Any]:
        """The options a proposal is built with (:data:`~lightning_episodes.weighting.PROPOSAL_OPTIONS`)."""
        return {key: float(self[key]) if key in _FLOATS else self[key] for key in PROPOSAL_OPTIONS}

    def normalizer_options(self) -> dict[str, Any]:
        """The options a normaliser is built with (:data:`~lightning_episodes.weighting.NORMALIZER_OPTIONS`)."""
        return {key: float(self[key]) if key in _FLOATS else self[key] for key in NORMALIZER_OPTIONS}

    # -- the read-only mapping of plain values ----------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        value = getattr(self, key)
        if isinstance(value, type) and issubclass(value, Component):
            return value.class_path()
        return value.config() if isinstance(value, Component) else value

    def __iter__(self) -> Iterator[str]:
        return (field.name for field in fields(self))

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)


def _default(option: str) -> Any:
    default = WeightingOptions.__dataclass_fields__[option].default
    return None if default is MISSING else default


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

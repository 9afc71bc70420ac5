"""The contract every normaliser keeps, checked for one of them by :func:`check_normalizer` against the loss written
out by hand.

A :class:`NormalizerSpec` names a normaliser (registered, or its class) and writes out the loss it must give at each
step of a fixed run (:data:`WARMUP` steps of weights 1, then heavy-tailed weights) from that run's weights so far.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from lightning_episodes.testing._checks import Check, assert_approx, roundtrip, run_checks, same_state
from lightning_episodes.weighting import Normalizer, make_normalizer, weighted_loss

#: the run of the checks: warm-up steps (weights 1), steps in all, episodes a step
WARMUP, STEPS, BATCH = 3, 12, 8

#: ``expected(after, every, weights, losses)``: the step's loss from the raw weights of the earlier steps after the
#: warm-up (``after``, oldest first), of every earlier step (``every``, the warm-up's included), the step's raw
#: weights and its episodes' losses (float64 tensors)
Expected = Callable[[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor], float]


@dataclass(frozen=True)
class NormalizerSpec:
    """One normaliser and the loss it must give, written out.

    Args:
        normalizer: a registered normaliser's name, or a :class:`~lightning_episodes.weighting.Normalizer` subclass.
        expected: the loss it must give at each step of the run (:data:`Expected`).
        options: the weighting options it is built with (``window``, ``running_decay``).
        name: its name in messages and test ids (default: the registered name, or the class's).
    """

    normalizer: str | type[Normalizer]
    expected: Expected
    options: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def build(self) -> Normalizer:
        """A fresh normaliser with the spec's options."""
        if isinstance(self.normalizer, str):
            return make_normalizer(self.normalizer, **self.options)
        return self.normalizer.from_options(**self.options)

    def __str__(self) -> str:
        return self.name or (self.normalizer if isinstance(self.normalizer, str) else self.normalizer.__name__)


def normalizer_run() -> list[tuple[torch.Tensor, torch.Tensor, bool]]:
    """``(raw weights, losses, warm-up)`` of each step of the checks' run: weights 1 for :data:`WARMUP` steps, then
    log-normal weights with an occasional outlier; losses in [0.5, 1.5)."""
    generator = torch.Generator().manual_seed(0)
    steps = []
    for step in range(STEPS):
        losses = torch.rand(BATCH, generator=generator, dtype=torch.float64) + 0.5
        if step < WARMUP:
            steps.append((torch.ones(BATCH, dtype=torch.float64), losses, True))
            continue
        w = torch.exp(1.5 * torch.randn(BATCH, generator=generator, dtype=torch.float64))
        steps.append((w, losses, False))
    return steps


def _loss(normalizer: Normalizer, w: torch.Tensor, losses: torch.Tensor) -> float:
    step = normalizer.normalize(w)
    return float(weighted_loss(losses, step.weights, step.divisor, denominator=step.denominator).loss)


def _each_steps_loss_is_the_written_out_formula(spec: NormalizerSpec) -> None:
    normalizer = spec.build()
    after: list[torch.Tensor] = []
    every: list[torch.Tensor] = []
    for step, (w, losses, warmup) in enumerate(normalizer_run()):
        expected = spec.expected(after, every, w, losses)
        assert_approx(_loss(normalizer, w, losses), expected, rel=1e-12, what=f"the loss of step {step}")
        normalizer.update(w, warmup=warmup)
        every.append(w)
        if not warmup:
            after.append(w)


def _a_resumed_normalizer_continues_exactly(spec: NormalizerSpec) -> None:
    steps = normalizer_run()
    uninterrupted, first = spec.build(), spec.build()
    losses = []
    for step, (w, loss, warmup) in enumerate(steps):
        losses.append(_loss(uninterrupted, w, loss))
        uninterrupted.update(w, warmup=warmup)
        if step < STEPS // 2:
            first.update(w, warmup=warmup)
    resumed = spec.build()
    resumed.load_state_dict(roundtrip(first.state_dict()))
    assert same_state(resumed.state_dict(), first.state_dict()), "the state after loading it"
    for step, (w, loss, warmup) in enumerate(steps[STEPS // 2 :], start=STEPS // 2):
        assert _loss(resumed, w, loss) == losses[step], f"the loss of step {step}"
        resumed.update(w, warmup=warmup)
    assert same_state(resumed.state_dict(), uninterrupted.state_dict()), "the state at the end"


#: the properties of the normaliser contract, by name, in the order :func:`check_normalizer` checks them
NORMALIZER_CHECKS: dict[str, Check[NormalizerSpec]] = {
    "each_steps_loss_is_the_written_out_formula": Check(_each_steps_loss_is_the_written_out_formula),
    "a_resumed_normalizer_continues_exactly": Check(_a_resumed_normalizer_continues_exactly),
}


def check_normalizer(spec: NormalizerSpec, checks: Iterable[str] | None = None) -> None:
    """Check that a normaliser keeps the contract of every normaliser (milliseconds):

    - ``each_steps_loss_is_the_written_out_formula``: at each step of :func:`normalizer_run`, the loss
      ``weighted_loss(losses, ...)`` of what it normalises is ``spec.expected`` (to 1e-12), the normaliser updated
      after each step with its raw weights (``warmup=True`` for the first :data:`WARMUP`);
    - ``a_resumed_normalizer_continues_exactly``: one restored from a checkpoint of its state halfway gives the losses
      and ends in the state of the one never stopped.

    Args:
        spec: the normaliser and its loss written out.
        checks: names of :data:`NORMALIZER_CHECKS` to run (default: all).

    Raises:
        AssertionError: naming the normaliser and the first property it breaks.

    Example:
        >>> def self_normalised(after, every, w, losses):  # sum w L / sum w
        ...     return float((w * losses).sum() / w.sum())
        >>> check_normalizer(NormalizerSpec("self", self_normalised))
    """
    run_checks(NORMALIZER_CHECKS, spec, checks)

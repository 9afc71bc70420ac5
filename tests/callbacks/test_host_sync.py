"""The training step reads nothing from the device on the steps where the loggers do not write (issue 15).

A host read of a device tensor (``.item()``, ``.tolist()``, ``bool(t)``, a boolean-mask index, ...) stalls a GPU's
pipeline: the host waits for every queued kernel instead of running ahead. On the CPU such a read costs nothing, so
the CPU test is structural: it patches the reading methods of ``torch.Tensor`` and counts the calls made inside
``EpisodicModule.training_step`` (the module's loss, the weighting callback's ``episode_weights``,
``weighted_loss`` and the logging) during a real ``Trainer`` fit. On CUDA, ``torch.cuda.set_sync_debug_mode("error")``
around the same steps raises at any synchronisation. What remains per step, by design and outside the training
step: ``NonFiniteGuard``'s one read of its check (a skip is decided before the optimiser step) and, with the
weighting callback, its one transfer of the step's record in ``on_train_batch_end`` (what the moving estimate of
the proposal absorbs on the host).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import Logger

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.base import logger_writes
from lightning_episodes.callbacks import DifficultyWeightingCallback
from tests.helpers import tiny_datamodule, tiny_trainer

#: the methods through which Python code reads a tensor's values on the host
READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")


class Reads:
    """Counts host reads of tensors while :attr:`active`."""

    def __init__(self) -> None:
        self.active = False
        self.calls: list[str] = []

    def wrap(self, name: str, method: Any) -> Any:
        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if self.active and (name != "__getitem__" or _has_mask(args[0])):
                self.calls.append(name)
            return method(tensor, *args, **kwargs)

        return counted


def _has_mask(index: Any) -> bool:
    """A boolean-mask index, whose result's size the host must read."""
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


@contextlib.contextmanager
def counting(reads: Reads) -> Iterator[None]:
    names = (*READS, "__getitem__")
    saved = {name: getattr(torch.Tensor, name) for name in names}
    for name in names:
        setattr(torch.Tensor, name, reads.wrap(name, saved[name]))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


class Watched(ProtoNet):
    """ProtoNet whose training steps count host reads (and, on CUDA, raise at any synchronisation) where the
    loggers do not write."""

    def __init__(self, reads: Reads, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reads = reads
        self.quiet_steps: list[int] = []
        self.reads_by_step: dict[int, int] = {}

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        quiet = not logger_writes(self.trainer)
        before = len(self.reads.calls)
        self.reads.active = True
        strict = quiet and self.device.type == "cuda"
        if strict:
            torch.cuda.set_sync_debug_mode("error")
        try:
            return super().training_step(batch, batch_idx)
        finally:
            if strict:
                torch.cuda.set_sync_debug_mode(0)
            self.reads.active = False
            self.reads_by_step[self.trainer.global_step] = len(self.reads.calls) - before
            if quiet:
                self.quiet_steps.append(self.trainer.global_step)


class MemoryLogger(Logger):
    """Keeps what the Trainer writes: ``{step: metrics}``."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[int, dict[str, float]] = {}

    name = "memory"
    version = 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        assert step is not None
        self.writes.setdefault(step, {}).update(metrics)


def _fit(
    callbacks: Sequence[pl.Callback], accelerator: str = "cpu", log_every_n_steps: int = 4, steps: int = 8
) -> tuple[Watched, Reads, MemoryLogger]:
    pl.seed_everything(0)
    reads, logger = Reads(), MemoryLogger()
    model = Watched(reads, image_size=16)
    trainer = tiny_trainer(
        accelerator=accelerator, max_steps=steps, limit_val_batches=0, logger=logger,
        log_every_n_steps=log_every_n_steps, callbacks=list(callbacks),
    )  # fmt: skip
    with counting(reads):
        trainer.fit(model, tiny_datamodule())
    return model, reads, logger


CALLBACKS = {
    "no callback": lambda: [],
    "uniform/normal/ess": lambda: [DifficultyWeightingCallback(warmup_steps=2)],
    "uniform/lognormal/running": lambda: [
        DifficultyWeightingCallback(warmup_steps=2, proposal="lognormal", normalization="running")
    ],
    "uniform/empirical/truncated": lambda: [
        DifficultyWeightingCallback(warmup_steps=2, proposal="empirical", normalization="truncated", window=20)
    ],
    "hard/normal/self, placebo": lambda: [
        DifficultyWeightingCallback("hard", warmup_steps=2, normalization="self", shuffle_weights=True)
    ],
}


@pytest.mark.parametrize("arm", list(CALLBACKS))
def test_no_host_read_in_the_training_step_where_the_loggers_do_not_write(arm: str) -> None:
    model, reads, logger = _fit(CALLBACKS[arm]())
    assert model.quiet_steps == [0, 1, 2, 4, 5, 6]  # steps 3 and 7 write (log_every_n_steps=4)
    assert {step: model.reads_by_step[step] for step in model.quiet_steps} == dict.fromkeys(model.quiet_steps, 0)
    # the counter sees the reads of a logging step (the mean of the finite losses masks them on the host)
    assert model.reads_by_step[3] > 0
    assert model.reads_by_step[7] > 0
    assert sorted(logger.writes) == [3, 7]
    assert {"train/loss", "train/acc"} <= logger.writes[3].keys()


def test_the_loggers_receive_the_mean_loss_and_accuracy_of_their_step() -> None:
    """train/loss and train/acc, logged on the logging steps only, are what the loggers wrote before: the mean of the
    step's finite episode losses and its mean accuracy, at each step where they write."""
    outputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    class Recording(Watched):
        def _output(self, batch: Any) -> Any:
            out = super()._output(batch)
            if self.training:
                outputs[self.trainer.global_step] = (out.losses.detach().clone(), out.accuracies.clone())
            return out

    pl.seed_everything(0)
    logger = MemoryLogger()
    trainer = tiny_trainer(max_steps=6, limit_val_batches=0, logger=logger, log_every_n_steps=2)
    trainer.fit(Recording(Reads(), image_size=16), tiny_datamodule())
    assert sorted(logger.writes) == [1, 3, 5]
    for step, metrics in logger.writes.items():
        losses, accuracies = outputs[step]
        assert metrics["train/loss"] == pytest.approx(float(losses.mean()), rel=1e-6)
        assert metrics["train/acc"] == pytest.approx(float(accuracies.float().mean()), rel=1e-6)
        assert metrics["train/loss"] == float(losses.mean())  # the same float32 mean, exactly


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("arm", list(CALLBACKS))
def test_cuda_training_step_does_not_synchronise_where_the_loggers_do_not_write(arm: str) -> None:
    model, _, _ = _fit(CALLBACKS[arm](), accelerator="cuda")  # set_sync_debug_mode("error") raises otherwise
    assert model.quiet_steps == [0, 1, 2, 4, 5, 6]

"""The training step reads nothing from the device on the steps where the loggers do not write (issue 15).

A host read of a device tensor (``.item()``, ``.tolist()``, ``bool(t)``, a boolean-mask index, ...) stalls a GPU's
pipeline: the host waits for every queued kernel instead of running ahead. On the CPU such a read costs nothing, so
the CPU test is structural: it patches the reading methods of ``torch.Tensor`` and counts the calls made inside
``EpisodicModule.training_step`` (the module's loss, the weighting callback's ``episode_weights``,
``weighted_loss`` and the logging) during a real ``Trainer`` fit. On CUDA, ``torch.cuda.set_sync_debug_mode("error")``
around the same steps raises at any synchronisation. What remains per step, by design and outside the training
step: ``NonFiniteGuard``'s one read of its check on its host path (a CPU, a non-fused optimiser; its device path,
the default on CUDA with a fused optimiser, reads only on logging steps and every ``max_consecutive``-th step) and,
with the weighting callback, its one transfer of the step's record in ``on_train_batch_end`` (what the moving
estimate of the proposal absorbs on the host).
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
from lightning_episodes.callbacks import DifficultyWeightingCallback, NonFiniteGuard
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


def _fused_protonet(**kwargs: Any) -> ProtoNet:
    pl.seed_everything(0)
    return ProtoNet(image_size=16, optimizer=lambda p: torch.optim.Adam(p, lr=1e-3, fused=True), **kwargs)


def test_the_device_path_reads_only_at_its_cadence() -> None:
    """Host reads inside the guard's hook: none on the steps that are neither logging steps (every 4th) nor every
    ``max_consecutive``-th (3rd) step nor the last, one transfer on those (and none on the host path's first step
    beyond its own read)."""
    reads = Reads()
    by_step: dict[int, int] = {}

    class Counted(NonFiniteGuard):
        def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
            before, reads.active = len(reads.calls), True
            try:
                super().on_before_optimizer_step(trainer, pl_module, optimizer)
            finally:
                reads.active = False
                by_step[trainer.global_step] = len(reads.calls) - before

    trainer = tiny_trainer(max_steps=10, limit_val_batches=0, log_every_n_steps=4, callbacks=[Counted(3, True)])
    with counting(reads):
        trainer.fit(_fused_protonet(), tiny_datamodule())
    # step 0: the host path (Adam has no state yet); reads at 2, 5, 8 (every 3rd), 3 and 7 (logging), 9 (the last)
    assert {step for step, count in by_step.items() if count} == {0, 2, 3, 5, 7, 8, 9}
    assert all(by_step[step] == 1 for step in (2, 3, 5, 7, 8, 9))


class SyncFreeSteps(pl.Callback):
    """``set_sync_debug_mode("error")`` from a step's start to its end (forward, backward, the guard, the optimiser
    step) on the steps where neither the loggers write nor the guard reads."""

    def __init__(self, every: int) -> None:
        self.every, self.strict_steps = every, []

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        step = trainer.global_step
        if step > 0 and (step + 1) % 4 and (step + 1) % self.every and step + 1 < trainer.max_steps:
            torch.cuda.set_sync_debug_mode("error")
            self.strict_steps.append(step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        torch.cuda.set_sync_debug_mode(0)


class DeviceSteps(NonFiniteGuard):
    """The guard, recording the steps its device path judged (its tally itself is dropped at teardown)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.device_steps: list[int] = []

    def _judge_on_device(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.device_steps.append(trainer.global_step)
        super()._judge_on_device(trainer, pl_module, *args)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_cuda_whole_step_with_the_guard_does_not_synchronise_between_reads(cuda_graphs: bool) -> None:
    strict, guard = SyncFreeSteps(every=5), DeviceSteps()
    trainer = tiny_trainer(
        accelerator="cuda", max_steps=12, limit_val_batches=0, log_every_n_steps=4, callbacks=[strict, guard]
    )
    try:
        trainer.fit(_fused_protonet(cuda_graphs=cuda_graphs), tiny_datamodule())
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert guard.device_steps == list(range(1, 12))  # every step but the first (Adam has no state yet) on the device
    # step 0: Adam has no state yet (the host path); 3, 7, 11 log; 4, 9 read (every 5th); 11 is the last
    assert strict.strict_steps == [1, 2, 5, 6, 8, 10]

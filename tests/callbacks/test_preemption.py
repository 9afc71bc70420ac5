"""PreemptionHandler takes SIGTERM, SIGINT and SIGUSR1 during a fit and gives them back after; a handler someone else
installed (Lightning's SLURM auto-requeue, a shell's ignored SIGINT) stays in charge; Ctrl-C twice stops at once.
The fits it stops through the command line are in tests/cli/test_preemption.py."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
import pytorch_lightning as pl
from lightning_fabric.plugins.environments import SLURMEnvironment
from pytorch_lightning.callbacks import Callback

from lightning_episodes import ProtoNet
from lightning_episodes.callbacks import PreemptionHandler
from lightning_episodes.callbacks.preemption import PREEMPTION_SIGNALS
from tests.helpers import tiny_datamodule, tiny_trainer


class Handlers(Callback):
    """Records the handler of each preemption signal at the first training batch."""

    def __init__(self) -> None:
        self.seen: dict[signal.Signals, Any] = {}

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.seen = self.seen or {signum: signal.getsignal(signum) for signum in PREEMPTION_SIGNALS}


@pytest.fixture
def handlers() -> Iterator[dict[signal.Signals, Any]]:
    """The handlers before the test, put back after it."""
    before = {signum: signal.getsignal(signum) for signum in PREEMPTION_SIGNALS}
    yield before
    for signum, handler in before.items():
        signal.signal(signum, handler)


def _fit(*callbacks: Callback, **trainer: Any) -> None:
    tiny_trainer(callbacks=list(callbacks), max_steps=2, limit_val_batches=0, **trainer).fit(
        ProtoNet(image_size=16), tiny_datamodule()
    )


def test_it_takes_the_three_signals_during_fit_and_gives_them_back(handlers: dict[signal.Signals, Any]) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    handler, probe = PreemptionHandler(), Handlers()
    _fit(handler, probe)
    assert probe.seen == dict.fromkeys(PREEMPTION_SIGNALS, handler._note)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) == handlers[signal.SIGTERM]
    assert handler.stopped_by is None


def test_a_handler_someone_else_installed_stays_in_charge(handlers: dict[signal.Signals, Any]) -> None:
    """An ignored SIGINT (a shell's background job) stays ignored; a SIGUSR1 handler of the user's stays."""

    def users(signum: int, frame: Any) -> None:
        raise AssertionError("not called")

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, users)
    handler, probe = PreemptionHandler(), Handlers()
    _fit(handler, probe)
    assert probe.seen[signal.SIGINT] == signal.SIG_IGN
    assert probe.seen[signal.SIGUSR1] is users
    assert probe.seen[signal.SIGTERM] == handler._note


def test_lightnings_slurm_auto_requeue_keeps_its_sigusr1_handler(
    handlers: dict[signal.Signals, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a SLURM batch job Lightning's SIGUSR1 handler saves hpc_ckpt_*.ckpt and requeues the job: left in charge
    (SLURM's SIGTERM at the end of the job then stops the fit here)."""
    for name, value in {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "7"}.items():
        monkeypatch.setenv(name, value)
    for name in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"):
        monkeypatch.setenv(name, "0")
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even in a background job
    handler, probe = PreemptionHandler(), Handlers()
    _fit(handler, probe, plugins=[SLURMEnvironment(auto_requeue=True)])
    lightnings = probe.seen[signal.SIGUSR1]
    assert [fn.__name__ for fn in lightnings.signal_handlers] == ["_slurm_sigusr_handler_fn"]
    assert probe.seen[signal.SIGTERM] == handler._note
    assert probe.seen[signal.SIGINT] == handler._note


def test_ctrl_c_twice_raises_keyboard_interrupt_at_once(handlers: dict[signal.Signals, Any]) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    handler = PreemptionHandler()
    handler.on_train_start(None, None)  # type: ignore[arg-type]  # it uses neither
    try:
        signal.raise_signal(signal.SIGINT)  # noted, for the end of the batch
        assert handler._requested == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # a third one is Python's again
    finally:
        handler._restore()

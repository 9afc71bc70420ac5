"""``NonFiniteGuard(on_device=True)``: the skip decided on the device (the fused optimiser's ``found_inf``), the
counts read on logging steps, every ``max_consecutive``-th step and at the end — the same skips as the host path,
the stop at the first read after the limit. On CPU tensors (fused Adam runs on the CPU too); the CUDA default is
the same code."""

from __future__ import annotations

import re
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from lightning_episodes import ProtoNet
from lightning_episodes.callbacks import NonFiniteError, NonFiniteGuard
from tests.callbacks.test_nonfinite import AfterStep, NaNGradientAt
from tests.helpers import tiny_datamodule, tiny_trainer


def fused_adam(params: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3, fused=True)


def _model() -> ProtoNet:
    pl.seed_everything(0)
    return ProtoNet(image_size=16, optimizer=fused_adam)


def _state(model: pl.LightningModule) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("on_device", [True, False])
def test_a_nonfinite_step_is_skipped_on_the_device_changing_no_parameter_and_no_adam_state(on_device: bool) -> None:
    spy = NaNGradientAt({2})
    after = AfterStep(spy)
    guard = NonFiniteGuard(max_consecutive=2, on_device=on_device)
    # the device path reads at steps 1, 3, 5 (every 2nd) and warns about step 2 at step 3
    match = r"step 2: non-finite gradients; 1 step\(s\) skipped" if on_device else r"step 2: non-finite gradients \("
    with pytest.warns(UserWarning, match=match):
        tiny_trainer(callbacks=[spy, after, guard], limit_val_batches=0).fit(_model(), tiny_datamodule())
    assert after.changed == {0: True, 1: True, 2: False, 3: True, 4: True, 5: True}  # Adam's moments and step too
    assert (guard.skipped_steps, guard.consecutive) == (1, 0)


def test_without_nonfinite_steps_both_paths_end_with_the_same_parameters_bit_for_bit() -> None:
    ends = []
    for on_device in (True, False):
        model = _model()
        tiny_trainer(callbacks=[NonFiniteGuard(on_device=on_device)], limit_val_batches=0).fit(model, tiny_datamodule())
        ends.append(_state(model))
    assert ends[0].keys() == ends[1].keys()
    assert all(torch.equal(ends[0][k], ends[1][k]) for k in ends[0])


@pytest.mark.parametrize(
    ("on_device", "stop"), [(False, "step 3: 3 steps"), (True, "step 5 (the limit was reached at step 3): 3 steps")]
)
def test_a_diverged_run_stops_at_the_first_read_after_the_limit(on_device: bool, stop: str) -> None:
    """NaN gradients from step 1 on, max_consecutive=3: the host path stops at step 3 (the third in a row); the
    device path reads at steps 2, 5, 8 (every 3rd) and stops at step 5, naming step 3; no skipped step moved the
    parameters on either path."""
    spy = NaNGradientAt(set(range(1, 20)))
    after = AfterStep(spy)
    guard = NonFiniteGuard(max_consecutive=3, on_device=on_device)
    trainer = tiny_trainer(max_steps=20, limit_val_batches=0, callbacks=[spy, after, guard])
    with (
        pytest.warns(UserWarning, match="skipped"),
        pytest.raises(NonFiniteError, match="^" + re.escape(f"training stopped at {stop}")),
    ):
        trainer.fit(_model(), tiny_datamodule())
    assert after.changed[0]
    assert not any(after.changed[step] for step in after.changed if step >= 1)
    assert guard.skipped_steps == (5 if on_device else 3)


def test_a_run_that_ends_between_reads_is_counted_at_its_end() -> None:
    """A NaN at the last step of an epoch-bounded run (no read due then): counted when training ends."""
    spy = NaNGradientAt({4})
    guard = NonFiniteGuard(max_consecutive=4, on_device=True)
    trainer = tiny_trainer(
        max_steps=-1, max_epochs=1, limit_train_batches=5, limit_val_batches=0, callbacks=[spy, guard]
    )
    with pytest.warns(UserWarning, match=r"step 4: non-finite gradients; 1 step\(s\) skipped"):
        trainer.fit(_model(), tiny_datamodule())
    assert guard.skipped_steps == 1


def test_a_checkpoint_between_reads_holds_the_pending_counts() -> None:
    seen: dict[int, dict[str, int]] = {}

    class Snapshot(Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
            seen[trainer.global_step - 1] = guard.state_dict()

    spy = NaNGradientAt({1, 2})
    guard = NonFiniteGuard(max_consecutive=4, on_device=True)  # reads at steps 3 and 5
    with pytest.warns(UserWarning, match="steps 1-2"):
        tiny_trainer(callbacks=[spy, guard, Snapshot()], limit_val_batches=0).fit(_model(), tiny_datamodule())
    assert seen[1] == {"skipped_steps": 1, "consecutive": 1}
    assert seen[2] == {"skipped_steps": 2, "consecutive": 2}
    assert seen[3] == seen[5] == {"skipped_steps": 2, "consecutive": 0}


def test_a_non_fused_optimiser_keeps_the_host_path() -> None:
    guard = NonFiniteGuard(on_device=True)
    model = ProtoNet(image_size=16)  # the default Adam: fused only on CUDA
    tiny_trainer(max_steps=2, callbacks=[guard], limit_val_batches=0).fit(model, tiny_datamodule())
    assert guard._tally is None


@pytest.mark.parametrize("rank", [0, 1])
def test_under_ddp_every_rank_skips_on_the_device_the_step_one_rank_finds_nonfinite(rank: int) -> None:
    class Check(Callback):
        def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            flat = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
            gathered = trainer.strategy.all_gather(flat)
            assert torch.equal(gathered[0], gathered[1]), "the ranks' parameters differ"
            counted = next(cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard))
            assert counted._tally is not None  # the device path ran
            assert counted.skipped_steps == 1, counted.skipped_steps  # on each rank (a forked process)

    guard = NonFiniteGuard(max_consecutive=2, on_device=True)
    callbacks = [NaNGradientAt({2}, rank=rank), guard, Check()]
    trainer = tiny_trainer(devices=2, callbacks=callbacks, limit_val_batches=0)
    trainer.fit(_model(), tiny_datamodule())

"""Non-finite training steps are skipped and counted, a diverged run stops with a message naming the option, on
every rank together; evaluating a non-finite model is an error, never a number."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import CSVLogger
from torch import Tensor

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.base import EpisodeOutput
from lightning_episodes.algorithms.nonfinite import any_nonfinite, nonfinite_flags, nonfinite_suspicion
from lightning_episodes.callbacks import (
    DifficultyWeightingCallback,
    NonFiniteError,
    NonFiniteGuard,
    PreemptionHandler,
    ResumableCheckpoint,
    TaskSamplerFeedback,
    TestResultsWriter,
    default_callbacks,
)
from lightning_episodes.cli import main
from lightning_episodes.data.episode import Episode
from tests.helpers import tiny_datamodule, tiny_trainer


def sgd(lr: float) -> Any:
    return lambda params: torch.optim.SGD(params, lr=lr)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([torch.full((3,), 1e3), torch.ones(2, dtype=torch.bfloat16)], 0.0),
        ([torch.ones(3), torch.tensor([1.0, float("inf")])], 1.0),
        ([torch.tensor([float("nan")], dtype=torch.float64), torch.ones(1)], 1.0),
        ([torch.tensor([float("-inf")], dtype=torch.bfloat16)], 1.0),
        ([torch.tensor([-1e30, 0.0, float("inf")]), torch.tensor([float("nan")])], 1.0),
        ([], 0.0),
    ],
)
def test_any_nonfinite_and_the_fast_suspicion(values: list[Tensor], expected: float) -> None:
    cpu = torch.device("cpu")
    assert float(any_nonfinite(values, cpu)) == expected
    assert (not math.isfinite(float(nonfinite_suspicion(values, cpu)))) == bool(expected)


def test_a_large_finite_value_is_only_a_suspicion_of_the_fast_check() -> None:
    large = [torch.full((3,), 3e38)]  # finite, but its squares overflow the fast 2-norm
    assert not math.isfinite(float(nonfinite_suspicion(large, torch.device("cpu"))))
    assert float(any_nonfinite(large, torch.device("cpu"))) == 0.0


def test_a_large_finite_buffer_does_not_skip_the_step() -> None:
    """The fast check flags the 1e30 running variance (its square overflows); the exact one clears it."""
    spy = NaNGradientAt(set())
    after = AfterStep(spy)
    guard = NonFiniteGuard()
    model = ProtoNet(image_size=16)
    with torch.no_grad():
        model.backbone.blocks[3].norm.running_var[0] = 1e30  # not used in training mode
    tiny_trainer(max_steps=2, callbacks=[spy, after, guard], limit_val_batches=0).fit(model, tiny_datamodule())
    assert after.changed == {0: True, 1: True}
    assert guard.skipped_steps == 0


def test_max_consecutive_is_validated() -> None:
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match=f"max_consecutive must be an integer >= 1, got {bad!r}"):
            NonFiniteGuard(max_consecutive=bad)  # type: ignore[arg-type]


class NaNGradientAt(Callback):
    """Puts a NaN into one gradient at the given global steps (on ``rank`` only, under DDP), after DDP's averaging
    and before the guard (the module's guard runs after the Trainer's own callbacks)."""

    def __init__(self, steps: set[int], rank: int | None = None) -> None:
        self.steps, self.rank = steps, rank
        self.before: dict[str, Tensor] = {}

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        if trainer.global_step in self.steps and self.rank in (None, trainer.global_rank):
            next(p for p in pl_module.parameters() if p.grad is not None).grad[0] = float("nan")  # type: ignore[index]
        self.before = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        self.state_before = {k: v.clone() for k, v in optimizer.state_dict()["state"].get(0, {}).items()}


class AfterStep(Callback):
    """Whether each step changed the parameters and the optimiser state."""

    def __init__(self, spy: NaNGradientAt) -> None:
        self.spy, self.changed = spy, {}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        params = {k: v for k, v in pl_module.state_dict().items() if "running" not in k and "num_batches" not in k}
        moved = any(not torch.equal(v, self.spy.before[k]) for k, v in params.items())
        state = trainer.optimizers[0].state_dict()["state"].get(0, {})
        moved_state = any(not torch.equal(v, self.spy.state_before.get(k, v)) for k, v in state.items())
        self.changed[trainer.global_step - 1] = moved or moved_state


def test_a_nonfinite_step_is_skipped_counted_and_training_goes_on() -> None:
    spy = NaNGradientAt({2})
    after = AfterStep(spy)
    guard = NonFiniteGuard(max_consecutive=2)
    model = ProtoNet(image_size=16)
    with pytest.warns(
        UserWarning, match=r"step 2: non-finite gradients \(backbone.blocks.0.conv.weight\); the step is"
    ):
        tiny_trainer(callbacks=[spy, after, guard], limit_val_batches=0).fit(model, tiny_datamodule())
    assert after.changed == {0: True, 1: True, 2: False, 3: True, 4: True, 5: True}  # Adam: no moment moved either
    assert (guard.skipped_steps, guard.consecutive) == (1, 0)
    assert guard.state_dict() == {"skipped_steps": 1, "consecutive": 0}


def test_a_buffer_replaced_during_training_is_checked() -> None:
    """The guard finds the submodules once an epoch but reads their tensors every step: a batch-norm buffer
    re-assigned (not updated in place) in the middle of an epoch is checked from that step on."""

    class ReplaceAt(Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
            if trainer.global_step == 2:
                norm = pl_module.backbone.blocks[2].norm  # type: ignore[union-attr, index]
                norm.running_var = torch.full_like(norm.running_var, float("inf"))

    trainer = tiny_trainer(max_steps=10, limit_val_batches=0, callbacks=[ReplaceAt(), NonFiniteGuard(2)])
    with (
        pytest.warns(UserWarning, match=r"step 2: non-finite buffers \(backbone.blocks.2.norm.running_var\)"),
        pytest.raises(NonFiniteError, match=r"training stopped at step 3: 2 steps in a row with non-finite buffers"),
    ):
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule())


def test_the_module_adds_no_callback_and_default_callbacks_adds_those_missing() -> None:
    trainer = tiny_trainer(max_steps=1, limit_val_batches=0)
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule())
    assert not [cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard | TestResultsWriter)]
    defaults = [NonFiniteGuard, TestResultsWriter, PreemptionHandler, TaskSamplerFeedback]
    assert [type(cb) for cb in default_callbacks()] == defaults
    mine = NonFiniteGuard(max_consecutive=7)
    assert [type(cb) for cb in default_callbacks([mine])] == defaults[1:]

    class Writer(TestResultsWriter):  # a subclass counts as one
        pass

    assert default_callbacks([Writer(), mine, PreemptionHandler(), TaskSamplerFeedback()]) == []


def test_the_command_line_adds_the_missing_default_callbacks_before_the_checkpoint() -> None:
    data = ["--config=configs/quickstart.yaml", "--data.dataset=tiny", "--data.image_size=16", "--trainer.logger=false"]
    cli = main(data, run=False)
    kinds = [type(cb) for cb in cli.trainer.callbacks]
    ours = (NonFiniteGuard, TestResultsWriter, PreemptionHandler, ResumableCheckpoint)
    assert [kind for kind in kinds if kind in ours] == list(ours)
    # a listed guard is kept with its options, and not doubled; the weighting callback runs before both defaults
    listed = [
        "--config=configs/sampling/uniform_online.yaml",
        "--trainer.callbacks+=lightning_episodes.callbacks.NonFiniteGuard",
    ]
    cli = main([*data, *listed, "--trainer.callbacks.max_consecutive=2"], run=False)
    ours = [cb for cb in cli.trainer.callbacks if isinstance(cb, NonFiniteGuard | TestResultsWriter)]
    assert [(type(cb), getattr(cb, "max_consecutive", None)) for cb in ours] == [
        (NonFiniteGuard, 2), (TestResultsWriter, None),
    ]  # fmt: skip
    kinds = [type(cb) for cb in cli.trainer.callbacks]
    assert kinds.index(DifficultyWeightingCallback) < kinds.index(TestResultsWriter) < kinds.index(ResumableCheckpoint)


def _cli_fit(tmp_path: Path, lr: float, sampling: str | None) -> list[str]:
    if sampling is None:
        configs = ["--config=configs/quickstart.yaml", f"--trainer.callbacks.dirpath={tmp_path / 'checkpoints'}"]
    else:  # as in the issue: the weighting callback gives non-finite episodes weight 0
        configs = ["--config=configs/quickstart.yaml", f"--config=configs/sampling/{sampling}.yaml"]
        configs += ["--trainer.callbacks.warmup_steps=5"]
    return [
        "fit",
        *configs,
        f"--trainer.default_root_dir={tmp_path}",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--data.dataset=tiny",
        "--data.image_size=16",
        "--data.shots=2",
        "--data.queries=3",
        "--data.episodes_per_batch=4",
        "--data.val_episodes=8",
        "--data.test_episodes=8",
        "--trainer.max_steps=12",
        "--trainer.val_check_interval=12",
        "--trainer.enable_progress_bar=false",
        "--model.optimizer.class_path=torch.optim.SGD",
        f"--model.optimizer.init_args.lr={lr}",
        "--test_after_fit=true",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lr", "sampling", "what"),
    [
        # the cases: non-finite after one step (the weighting callback gives the NaN episodes weight 0,
        # and their gradients are NaN all the same); inf batch-norm statistics only, with finite gradients
        (1e30, "uniform_online", r"step 5: .* non-finite gradients \(backbone\..*\) and buffers \(backbone\."),
        (1e30, None, r"step 5: .* non-finite gradients \(backbone\..*\) and buffers \(backbone\..*running_var"),
        (1e6, None, r"step 6: .* non-finite buffers \(backbone\.blocks\.\d\.norm\.running_var"),
    ],
)
def test_a_diverging_run_stops_with_a_message_naming_the_option(
    tmp_path: Path, lr: float, sampling: str | None, what: str
) -> None:
    with pytest.warns(UserWarning, match="the step is skipped"), pytest.raises(NonFiniteError) as error:
        main(_cli_fit(tmp_path, lr, sampling))
    message = str(error.value)
    assert __import__("re").match(r"training stopped at step \d+: 5 steps in a row with ", message), message
    assert "NonFiniteGuard(max_consecutive)" in message
    assert __import__("re").search(what, message), message
    assert not list(tmp_path.rglob("test_results.json"))  # no number reported


class NaNOutputs(ProtoNet):
    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        out = super().episode_losses(batch)
        if not self.training:
            out.losses = out.losses.clone()
            out.losses[-1] = float("nan")
        return out


@pytest.mark.parametrize("stage", ["validate", "test"])
@pytest.mark.parametrize("broken", ["parameter", "buffer", "outputs"])
def test_evaluating_a_nonfinite_model_is_an_error(tmp_path: Path, stage: str, broken: str) -> None:
    model = NaNOutputs(image_size=16) if broken == "outputs" else ProtoNet(image_size=16)
    with torch.no_grad():
        if broken == "parameter":
            model.backbone.blocks[2].conv.weight[0, 0, 0, 0] = float("nan")
        elif broken == "buffer":
            model.backbone.blocks[1].norm.running_var[3] = float("inf")
    trainer = tiny_trainer(logger=CSVLogger(tmp_path), callbacks=default_callbacks())
    expected = {
        "parameter": r"non-finite parameters \(backbone.blocks.2.conv.weight\)",
        "buffer": r"non-finite buffers \(backbone.blocks.1.norm.running_var\)",
        "outputs": "non-finite losses or accuracies",
    }[broken]
    name = "validation" if stage == "validate" else "test"
    with pytest.raises(NonFiniteError, match=rf"^{name}: refusing to evaluate a model with {expected}"):
        getattr(trainer, stage)(model, tiny_datamodule())
    assert not list(tmp_path.rglob("test_results.json"))
    assert not any(key.startswith(("val/", "test/")) for key in trainer.callback_metrics)


def _ddp_skip(rank_with_nan: int) -> None:
    class Check(Callback):
        def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            flat = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
            gathered = trainer.strategy.all_gather(flat)
            assert torch.equal(gathered[0], gathered[1]), "the ranks' parameters differ"
            guard = next(cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard))
            assert guard.skipped_steps == 1, guard.skipped_steps

    callbacks = [NaNGradientAt({2}, rank=rank_with_nan), Check(), NonFiniteGuard()]
    trainer = tiny_trainer(devices=2, callbacks=callbacks, limit_val_batches=0)
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule())


@pytest.mark.parametrize("rank", [0, 1])
def test_under_ddp_every_rank_skips_the_step_that_one_rank_finds_nonfinite(rank: int) -> None:
    _ddp_skip(rank)


@pytest.mark.slow
def test_the_console_reports_a_diverged_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_episodes.cli import TOOLS
    from lightning_episodes.console import DEBUG_ENV, run

    monkeypatch.delenv(DEBUG_ENV, raising=False)
    with pytest.warns(UserWarning, match="the step is skipped"):
        status = run(_cli_fit(tmp_path, 1e30, None), main, TOOLS)
    err = capsys.readouterr().err
    assert status == 1
    assert "Traceback" not in err
    line = next(line for line in err.splitlines() if "error:" in line)
    assert line.startswith("lightning-episodes fit: error: training stopped at step 5: 5 steps in a row"), line
    assert not list(tmp_path.rglob("test_results.json"))


@pytest.mark.parametrize("where", ["none", "gradients", "parameters", "buffers", "all"])
def test_the_flags_name_each_kind_and_the_suspicion_sees_any(where: str) -> None:
    """The flags of gradients, parameters and buffers are each kind's own ``isfinite`` check (an empty gradient
    list included); the guard's one-number suspicion is non-finite exactly when one of them is."""
    model = ProtoNet(image_size=16)
    grads = [torch.ones_like(p) for p in model.parameters()]
    with torch.no_grad():
        if where in ("gradients", "all"):
            grads[3][0] = float("nan")
        if where in ("parameters", "all"):
            next(model.parameters()).view(-1)[0] = float("inf")
        if where in ("buffers", "all"):
            model.backbone.blocks[1].norm.running_mean[0] = float("nan")
    for given in (grads, []):
        buffers = [b for b in model.buffers() if b.is_floating_point()]
        groups = (given, list(model.parameters()), buffers)
        expected = [float(any(not bool(torch.isfinite(t).all()) for t in group)) for group in groups]
        assert nonfinite_flags(model, given).tolist() == expected
        with torch.no_grad():
            suspicion = nonfinite_suspicion([t for group in groups for t in group], torch.device("cpu"))
        assert (not math.isfinite(float(suspicion))) == any(expected)

"""EpisodicModule through the real Trainer: training, evaluation, DDP equality, checkpoints."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from lightning_episodes import EpisodeOutput, EpisodicModule, ProtoNet
from tests.algorithms.builders import random_episodes
from tests.helpers import tiny_datamodule, tiny_trainer


def _sgd(params: object) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05)  # type: ignore[arg-type]


def _fit(devices: int, **trainer_overrides: object) -> tuple[pl.Trainer, ProtoNet]:
    pl.seed_everything(0)
    # SGD, not Adam: the conv biases before batch norm have a true gradient of 0, and Adam would turn
    # their rounding noise (which differs between 1 and 2 processes) into full-size steps
    model = ProtoNet(image_size=16, optimizer=_sgd)
    # float64: in float32 the different summation order of 1 and 2 processes moves activations across
    # ReLU/max-pool kinks after a few steps, so exact comparisons need double precision
    trainer = tiny_trainer(devices=devices, precision="64-true", **trainer_overrides)
    trainer.fit(model, tiny_datamodule())
    return trainer, model


def test_training_reduces_the_loss_and_evaluates_every_episode_once() -> None:
    pl.seed_everything(0)
    model = ProtoNet(image_size=16)
    dm = tiny_datamodule(val_episodes=30)
    trainer = tiny_trainer(max_steps=1)
    before = trainer.validate(model, dm, verbose=False)[0]
    trainer = tiny_trainer(max_steps=40, val_check_interval=40)
    trainer.fit(model, dm)
    after = trainer.callback_metrics
    assert before["val/episodes"] == 30
    assert after["val/episodes"] == 30
    # the tiny training set (12 classes x 10 images) is soon memorised, so accuracy on the new
    # validation classes is the signal, not the (over-confident) validation loss
    assert after["train/loss"] < 0.1
    assert after["val/acc"] > before["val/acc"] + 0.05


def test_eval_batch_norm_modes_differ_and_episode_mode_needs_no_running_stats() -> None:
    model = ProtoNet(image_size=16)
    dm = tiny_datamodule()
    running = tiny_trainer().validate(model, dm, verbose=False)[0]
    model.eval_batch_norm = "episode"
    episode = tiny_trainer().validate(model, dm, verbose=False)[0]
    # an untrained model's running statistics are the initial ones (mean 0, var 1), unlike the episode's
    assert running["val/loss"] != pytest.approx(episode["val/loss"])


class _GradientRecorder(Callback):
    """Records the (all-reduced) gradient of the first optimiser step inside the process that ran it."""

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: object) -> None:
        if trainer.global_step == 0:
            grads = torch.cat([p.grad.flatten() for p in pl_module.parameters() if p.grad is not None])
            pl_module.log("grad_norm", grads.norm(), sync_dist=False, rank_zero_only=True)
            pl_module.log("grad_sum", grads.sum(), sync_dist=False, rank_zero_only=True)


@pytest.mark.slow
def test_two_process_ddp_matches_one_process() -> None:
    """The same global batch, gradient and validation accuracy on 1 and 2 CPU processes (gloo, fork)."""
    single, single_model = _fit(1, callbacks=[_GradientRecorder()])
    double, _ = _fit(2, callbacks=[_GradientRecorder()])
    for key in ("grad_norm", "grad_sum", "val/loss", "val/acc", "val/acc_ci95", "val/episodes"):
        assert float(double.callback_metrics[key]) == pytest.approx(
            float(single.callback_metrics[key]), rel=1e-4, abs=1e-6
        ), key


def test_an_episode_losses_that_returns_no_episode_output_fails_clearly() -> None:
    class TupleProtoNet(ProtoNet):
        def episode_losses(self, batch):  # type: ignore[no-untyped-def]
            out = super().episode_losses(batch)
            return out.losses, out.accuracies

    with pytest.raises(TypeError, match=r"TupleProtoNet.episode_losses must return an EpisodeOutput, got tuple"):
        tiny_trainer(max_steps=2).fit(TupleProtoNet(image_size=16), tiny_datamodule())


def test_the_weighting_strategy_must_have_episode_weights() -> None:
    model = ProtoNet(image_size=16)
    with pytest.raises(TypeError, match=r"ProtoNet.weighting must be a WeightingStrategy .* got str"):
        model.weighting = "uniform"  # type: ignore[assignment]
    assert model.weighting is None


def test_an_algorithm_must_implement_its_logits_or_losses() -> None:
    with pytest.raises(NotImplementedError, match=r"EpisodicModule implements neither query_logits"):
        EpisodicModule(image_size=16).episode_losses(random_episodes(dtype=torch.float32))


def test_an_episode_outputs_difficulty_is_its_loss_unless_given() -> None:
    losses = torch.tensor([1.0, 2.0], requires_grad=True)
    out = EpisodeOutput(losses, torch.ones(2))
    assert torch.equal(out.difficulty, losses.detach())
    assert not out.difficulty.requires_grad
    out.losses = out.losses + 1.0  # e.g. a test that rigs the losses: the difficulty follows
    assert out.difficulty.tolist() == [2.0, 3.0]
    given = EpisodeOutput(losses, torch.ones(2), difficulty=torch.tensor([5.0, 6.0], requires_grad=True))
    assert given.difficulty.tolist() == [5.0, 6.0]
    assert not given.difficulty.requires_grad

"""MAML against learn2learn's MAML (the paper's implementation), through the Trainer and the CLI."""

from __future__ import annotations

import re

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_episodes.algorithms import ANIL, MAML
from lightning_episodes.data.episode import Episode
from lightning_episodes.testing.algorithms import build_cli
from tests.algorithms.builders import HIDDEN, our_gradients, random_episodes
from tests.helpers import tiny_datamodule, tiny_trainer

l2l = pytest.importorskip("learn2learn")


RENAMES = [
    (r"^backbone\.blocks\.(\d+)\.norm\.", r"features.\1.normalize."),
    (r"^backbone\.blocks\.(\d+)\.conv\.", r"features.\1.conv."),
    (r"^head\.", "classifier."),
]


def reference_name(name: str) -> str:
    """The name of our conv4 + head parameter ``name`` in learn2learn's ``CNN4``."""
    for pattern, replacement in RENAMES:
        name = re.sub(pattern, replacement, name)
    return name


def learn2learn_cnn4(model: MAML) -> torch.nn.Module:
    """learn2learn's CNN4 with ``model``'s parameters (the reference keeps running buffers, which MAML does not)."""
    reference = l2l.vision.models.CNN4(
        output_size=model.ways, hidden_size=HIDDEN, channels=1, embedding_size=model.head.in_features
    ).to(torch.float64)
    state = {reference_name(key): value for key, value in model.state_dict().items()}
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert not unexpected
    assert all(key.endswith(("running_mean", "running_var", "num_batches_tracked")) for key in missing)
    return reference


def learn2learn_gradients(reference: torch.nn.Module, batch: Episode, lr: float, steps: int, first_order: bool) -> dict:
    """learn2learn's meta-gradient of the mean query loss, by parameter name (its example's training loop)."""
    maml = l2l.algorithms.MAML(reference, lr=lr, first_order=first_order)
    total = torch.zeros((), dtype=torch.float64)
    for i in range(len(batch)):
        learner = maml.clone()
        for _ in range(steps):
            learner.adapt(F.cross_entropy(learner(batch.support[i]), batch.support_labels[i]))
        total = total + F.cross_entropy(learner(batch.query[i]), batch.query_labels[i])
    (total / len(batch)).backward()
    return {name: p.grad for name, p in reference.named_parameters()}


@pytest.mark.parametrize("first_order", [False, True])
def test_meta_gradient_matches_learn2learn_in_float64(first_order: bool) -> None:
    torch.manual_seed(0)
    model = MAML(image_size=16, backbone_options={"hidden": HIDDEN}, first_order=first_order).double().train()
    reference = learn2learn_cnn4(model).train()
    batch = random_episodes()
    ours = our_gradients(model, batch)
    theirs = learn2learn_gradients(reference, batch, model.adaptation_lr, model.adaptation_steps, first_order)
    assert {reference_name(name) for name in ours} == set(theirs)
    worst = max((grad - theirs[reference_name(name)]).abs().max().item() for name, grad in ours.items())
    assert worst <= 1e-5
    assert all(g.abs().sum() > 0 for g in ours.values())  # every parameter learns (DDP needs it)


@pytest.mark.parametrize(("algorithm", "difference"), [(MAML, 1e-4), (ANIL, 1e-6)])
def test_first_and_second_order_gradients_differ(algorithm: type[MAML], difference: float) -> None:
    torch.manual_seed(0)
    second = algorithm(image_size=16, backbone_options={"hidden": HIDDEN}).double().train()
    first = algorithm(image_size=16, backbone_options={"hidden": HIDDEN}, first_order=True).double().train()
    first.load_state_dict(second.state_dict())
    batch = random_episodes()
    a, b = our_gradients(second, batch), our_gradients(first, batch)
    # the backbone's gradient reaches it through the adapted parameters (ANIL: the adapted head)
    assert max((a[k] - b[k]).abs().max().item() for k in a if k.startswith("backbone.")) > difference


@pytest.mark.parametrize("algorithm", [MAML, ANIL])
def test_scoring_without_gradients_still_adapts(algorithm: type[MAML]) -> None:
    """An offline difficulty scorer calls episode_losses under no_grad: adaptation still needs autograd."""
    torch.manual_seed(0)
    model = algorithm(image_size=16, backbone_options={"hidden": HIDDEN}).train()
    batch = random_episodes(dtype=torch.float32)
    with torch.no_grad():
        scored = model.episode_losses(batch).losses
    assert not scored.requires_grad
    torch.testing.assert_close(scored, model.episode_losses(batch).losses.detach())
    model.eval()
    assert not model.episode_losses(batch).losses.requires_grad  # evaluation keeps no outer graph


def test_evaluation_uses_eval_adaptation_steps() -> None:
    torch.manual_seed(0)
    model = MAML(image_size=16, backbone_options={"hidden": HIDDEN}, adaptation_steps=5, eval_adaptation_steps=1)
    one_step = MAML(image_size=16, backbone_options={"hidden": HIDDEN}, adaptation_steps=1)
    one_step.load_state_dict(model.state_dict())
    batch = random_episodes(dtype=torch.float32)
    model.eval(), one_step.eval()
    torch.testing.assert_close(model.episode_losses(batch).losses, one_step.episode_losses(batch).losses)
    model.train(), one_step.train()
    assert not torch.allclose(model.episode_losses(batch).losses, one_step.episode_losses(batch).losses)


def test_keeps_no_running_statistics_and_evaluates_under_a_default_trainer() -> None:
    """Adaptation needs autograd although Lightning evaluates in inference mode by default."""
    model = MAML(image_size=16, backbone_options={"hidden": HIDDEN}, adaptation_steps=2)
    assert not any(name.endswith("running_mean") for name in model.state_dict())
    trainer = tiny_trainer()
    assert trainer.validate_loop.inference_mode  # Lightning's default: the module switches it off itself
    assert trainer.validate(model, tiny_datamodule(val_episodes=8), verbose=False)[0]["val/episodes"] == 8
    assert not trainer.validate_loop.inference_mode


def test_unequal_training_and_evaluation_ways_fail_clearly() -> None:
    with pytest.raises(ValueError, match=r"model.ways=5 outputs but data.eval_ways=3"):
        tiny_trainer().validate(MAML(image_size=16), tiny_datamodule(eval_ways=3), verbose=False)
    with pytest.raises(ValueError, match=r"model.ways=4 outputs but the episode has 5 ways"):
        MAML(image_size=16, ways=4).episode_losses(random_episodes(dtype=torch.float32))


@pytest.mark.parametrize(("config", "backbone"), [("maml_conv4", "Conv4"), ("maml_resnet12", "ResNet12")])
def test_yaml_config_builds_the_model(config: str, backbone: str) -> None:
    cli = build_cli("--config", f"configs/models/{config}.yaml", "--model.adaptation_steps", "3")
    assert isinstance(cli.model, MAML)
    assert type(cli.model.backbone).__name__ == backbone
    assert cli.model.adaptation_steps == 3
    assert cli.model.adaptation_lr == 0.01
    assert isinstance(cli.model.configure_optimizers(), torch.optim.Adam)


class _FirstGradient(pl.Callback):
    """Logs the all-reduced gradient of the first optimiser step from inside the process that ran it."""

    def on_before_optimizer_step(self, trainer: pl.Trainer, module: pl.LightningModule, optimizer: object) -> None:
        if trainer.global_step == 0:
            grads = torch.cat([p.grad.flatten() for p in module.parameters()])
            module.log_dict({"grad_norm": grads.norm(), "grad_sum": grads.sum()}, rank_zero_only=True)


@pytest.mark.slow
def test_two_process_ddp_gives_the_single_process_gradient() -> None:
    """Second-order MAML under DDP (gloo, fork): every parameter has a gradient and the step is the same."""
    metrics = []
    for devices in (1, 2):
        pl.seed_everything(0)
        trainer = tiny_trainer(devices=devices, max_steps=1, limit_val_batches=0, callbacks=[_FirstGradient()])
        trainer.fit(MAML(image_size=16, backbone_options={"hidden": HIDDEN}, adaptation_steps=2), tiny_datamodule())
        metrics.append({key: float(value) for key, value in trainer.callback_metrics.items()})
    for key in ("grad_norm", "grad_sum"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-4, abs=1e-6), key

"""ANIL: only the head adapts, on backbone features computed once; against learn2learn's MAML on the head."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import lightning_episodes.algorithms.maml as maml_module
from lightning_episodes.algorithms import ANIL
from lightning_episodes.data.episode import Episode
from lightning_episodes.testing.algorithms import build_cli
from tests.algorithms.builders import HIDDEN, our_gradients, random_episodes
from tests.helpers import tiny_datamodule, tiny_trainer

l2l = pytest.importorskip("learn2learn")


def learn2learn_anil_gradients(model: ANIL, batch: Episode, first_order: bool) -> dict[str, torch.Tensor]:
    """The ANIL recipe of learn2learn's examples: a shared feature extractor, ``MAML`` around the head only."""
    features, head = copy.deepcopy(model.backbone), copy.deepcopy(model.head)
    maml_head = l2l.algorithms.MAML(head, lr=model.adaptation_lr, first_order=first_order)
    total = torch.zeros((), dtype=torch.float64)
    for i in range(len(batch)):
        learner = maml_head.clone()
        support, query = features(batch.support[i]), features(batch.query[i])
        for _ in range(model.adaptation_steps):
            learner.adapt(F.cross_entropy(learner(support), batch.support_labels[i]))
        total = total + F.cross_entropy(learner(query), batch.query_labels[i])
    (total / len(batch)).backward()
    grads = {f"backbone.{name}": p.grad for name, p in features.named_parameters()}
    return grads | {f"head.{name}": p.grad for name, p in head.named_parameters()}


@pytest.mark.parametrize("first_order", [False, True])
def test_meta_gradient_matches_learn2learn_in_float64(first_order: bool) -> None:
    torch.manual_seed(0)
    model = ANIL(image_size=16, backbone_options={"hidden": HIDDEN}, first_order=first_order).double().train()
    batch = random_episodes()
    ours = our_gradients(model, batch)
    theirs = learn2learn_anil_gradients(model, batch, first_order)
    assert set(ours) == set(theirs)
    assert max((ours[name] - theirs[name]).abs().max().item() for name in ours) <= 1e-5


def test_backbone_runs_once_per_set_is_not_adapted_but_learns(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = ANIL(image_size=16, backbone_options={"hidden": HIDDEN}, adaptation_steps=4).train()
    before = copy.deepcopy(model.backbone.state_dict())
    forwards: list[tuple[int, ...]] = []
    model.backbone.register_forward_hook(lambda module, args, out: forwards.append(tuple(args[0].shape)))
    adapted: list[set[str]] = []
    real_adapt = maml_module.adapt

    def spy(module: torch.nn.Module, params: dict, *args: object) -> dict:
        assert module is model.head  # the inner loop only ever calls the head
        fast = real_adapt(module, params, *args)  # type: ignore[arg-type]
        adapted.append(set(fast))
        return fast

    monkeypatch.setattr(maml_module, "adapt", spy)
    batch = random_episodes(episodes=3, dtype=torch.float32)
    our_gradients(model, batch)
    # support and query of all episodes in one pass each, whatever the number of inner steps
    assert forwards == [tuple(batch.support.shape), tuple(batch.query.shape)]
    assert adapted == [{"weight", "bias"}] * 3
    for name, value in model.backbone.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.backbone.parameters())


def test_unequal_training_and_evaluation_ways_fail_clearly() -> None:
    with pytest.raises(ValueError, match=r"ANIL's head has model.ways=5 outputs but data.eval_ways=2"):
        tiny_trainer().test(ANIL(image_size=16), tiny_datamodule(eval_ways=2), verbose=False)


@pytest.mark.parametrize(("config", "backbone"), [("anil_conv4", "Conv4"), ("anil_resnet12", "ResNet12")])
def test_yaml_config_builds_the_model(config: str, backbone: str) -> None:
    cli = build_cli("--config", f"configs/models/{config}.yaml")
    assert isinstance(cli.model, ANIL)
    assert type(cli.model.backbone).__name__ == backbone
    assert (cli.model.adaptation_steps, cli.model.adaptation_lr) == (5, 0.1)

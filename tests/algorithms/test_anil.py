"""ANIL: only the head adapts, on backbone features computed once; against learn2learn's MAML on the head."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

import lightning_episodes.algorithms.anil as anil_module
from lightning_episodes.algorithms import ANIL
from lightning_episodes.data.episode import Episode
from tests.algorithms.test_maml import HIDDEN, build_cli, our_gradients, random_episodes
from tests.helpers import tiny_datamodule, tiny_trainer

l2l = pytest.importorskip("learn2learn")


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


def test_first_and_second_order_gradients_differ() -> None:
    torch.manual_seed(0)
    second = ANIL(image_size=16, backbone_options={"hidden": HIDDEN}).double().train()
    first = ANIL(image_size=16, backbone_options={"hidden": HIDDEN}, first_order=True).double().train()
    first.load_state_dict(second.state_dict())
    batch = random_episodes()
    a, b = our_gradients(second, batch), our_gradients(first, batch)
    assert max((a[k] - b[k]).abs().max().item() for k in a if k.startswith("backbone.")) > 1e-6


def test_backbone_runs_once_per_set_is_not_adapted_but_learns(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = ANIL(image_size=16, backbone_options={"hidden": HIDDEN}, adaptation_steps=4).train()
    before = copy.deepcopy(model.backbone.state_dict())
    forwards: list[tuple[int, ...]] = []
    model.backbone.register_forward_hook(lambda module, args, out: forwards.append(tuple(args[0].shape)))
    adapted: list[set[str]] = []
    real_adapt = anil_module.adapt

    def spy(module: torch.nn.Module, params: dict, *args: object) -> dict:
        assert module is model.head  # the inner loop only ever calls the head
        fast = real_adapt(module, params, *args)  # type: ignore[arg-type]
        adapted.append(set(fast))
        return fast

    monkeypatch.setattr(anil_module, "adapt", spy)
    batch = random_episodes(episodes=3, dtype=torch.float32)
    our_gradients(model, batch)
    # support and query of all episodes in one pass each, whatever the number of inner steps
    assert forwards == [tuple(batch.support.shape), tuple(batch.query.shape)]
    assert adapted == [{"weight", "bias"}] * 3
    for name, value in model.backbone.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.backbone.parameters())


def test_validate_and_test_work_under_a_default_trainer_and_change_nothing() -> None:
    model = ANIL(image_size=16, backbone_options={"hidden": HIDDEN})
    state = copy.deepcopy(model.state_dict())
    pl.seed_everything(0)
    dm = tiny_datamodule(val_episodes=8, test_episodes=8)
    val = tiny_trainer().validate(model, dm, verbose=False)[0]
    test = tiny_trainer().test(model, dm, verbose=False)[0]
    assert val["val/episodes"] == test["test/episodes"] == 8
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert all(p.grad is None for p in model.parameters())


def test_fit_test_and_reload_through_the_concrete_class(tmp_path: Path) -> None:
    pl.seed_everything(0)
    model = ANIL(image_size=16, backbone_options={"hidden": HIDDEN}, adaptation_steps=2, eval_adaptation_steps=3)
    dm = tiny_datamodule(val_episodes=8, test_episodes=8)
    trainer = tiny_trainer(max_steps=2, val_check_interval=2)
    trainer.fit(model, dm)
    result = trainer.test(model, dm, verbose=False)[0]
    trainer.save_checkpoint(tmp_path / "anil.ckpt")
    reloaded = ANIL.load_from_checkpoint(tmp_path / "anil.ckpt")
    assert (reloaded.adaptation_steps, reloaded.eval_adaptation_steps, reloaded.adaptation_lr) == (2, 3, 0.1)
    assert tiny_trainer().test(reloaded, dm, verbose=False)[0]["test/acc"] == pytest.approx(result["test/acc"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"adaptation_steps": 0}, r"model.adaptation_steps must be >= 1, got 0"),
        ({"adaptation_lr": -1.0}, r"model.adaptation_lr must be > 0, got -1.0"),
        ({"backbone": "vgg"}, r"model.backbone: unknown backbone 'vgg'"),
        ({"backbone": "resnet12", "image_size": 12}, r"image_size=12 is too small for backbone 'resnet12'"),
    ],
)
def test_bad_configuration_fails_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ANIL(**({"image_size": 16} | kwargs))


def test_unequal_training_and_evaluation_ways_fail_clearly() -> None:
    with pytest.raises(ValueError, match=r"ANIL's head has model.ways=5 outputs but data.eval_ways=2"):
        tiny_trainer().test(ANIL(image_size=16), tiny_datamodule(eval_ways=2), verbose=False)


@pytest.mark.parametrize(("config", "backbone"), [("anil_conv4", "Conv4"), ("anil_resnet12", "ResNet12")])
def test_yaml_config_builds_the_model(config: str, backbone: str) -> None:
    cli = build_cli("--config", f"configs/models/{config}.yaml")
    assert isinstance(cli.model, ANIL)
    assert type(cli.model.backbone).__name__ == backbone
    assert (cli.model.adaptation_steps, cli.model.adaptation_lr) == (5, 0.1)


def test_short_name_selects_anil_with_its_own_defaults() -> None:
    cli = build_cli("--model", "ANIL", "--model.adaptation_steps", "2")
    assert isinstance(cli.model, ANIL)
    assert cli.model.adaptation_steps == 2
    assert cli.model.eval_batch_norm == "episode"

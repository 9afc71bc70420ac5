"""Conv4 and ResNet-12: per-episode batch norm, evaluation modes, functional and second-order use."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.func import functional_call

from lightning_episodes.models import Conv4, ResNet12, resnet12_wide, set_eval_batch_norm

EPISODES, IMAGES, SIZE = 3, 4, 16


BACKBONES: dict[str, Callable[[], nn.Module]] = {
    "conv4": lambda: Conv4(in_channels=3, hidden=8),
    "resnet12": lambda: ResNet12(in_channels=3, widths=(4, 8, 8, 16)),
    "resnet12-flat": lambda: ResNet12(in_channels=3, widths=(4, 8, 8, 16), avg_pool=False),
    # DropBlock and dropout off: the comparison needs a deterministic forward.
    "resnet12-wide": lambda: resnet12_wide(in_channels=3, widths=(4, 8, 8, 16), drop_rate=0.0),
}


def _images(seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    shift = torch.arange(EPISODES, dtype=torch.float32).view(-1, 1, 1, 1, 1)
    return torch.randn(EPISODES, IMAGES, 3, SIZE, SIZE, generator=generator) * (1 + shift) + shift


def _assert_same_state(ours: nn.Module, reference: nn.Module) -> None:
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[key], value, rtol=0, atol=1e-6, msg=key)


@pytest.mark.parametrize("name", BACKBONES)
def test_training_equals_episodes_one_by_one(name: str) -> None:
    torch.manual_seed(0)
    batched = BACKBONES[name]().train()
    one_by_one = copy.deepcopy(batched)
    x = _images()
    features = batched(x)
    assert features.shape[:2] == (EPISODES, IMAGES)
    assert features.dim() == 3
    expected = torch.stack([one_by_one(episode) for episode in x])
    torch.testing.assert_close(features, expected, rtol=0, atol=1e-5)
    _assert_same_state(batched, one_by_one)


@pytest.mark.parametrize("name", BACKBONES)
def test_evaluation_changes_no_state(name: str) -> None:
    torch.manual_seed(0)
    model = BACKBONES[name]()
    model.train()(_images(1))  # move the running statistics away from their initial values
    model.eval()
    before = copy.deepcopy(model.state_dict())
    running = model(_images())
    set_eval_batch_norm(model, "episode")
    episode = model(_images())
    for key, value in before.items():
        assert torch.equal(model.state_dict()[key], value), key
    # "episode" statistics are the training-mode ones; "running" ones differ.
    expected = copy.deepcopy(model).train()(_images())
    torch.testing.assert_close(episode, expected, rtol=0, atol=1e-5)
    assert not torch.allclose(running, episode, atol=1e-3)


def test_without_running_stats_eval_equals_training() -> None:
    model = Conv4(hidden=8, track_running_stats=False)
    assert not any(name.startswith("running") for name, _ in model.named_buffers())
    x = _images()
    torch.testing.assert_close(model.eval()(x), model.train()(x), rtol=0, atol=0)


def test_single_episode_input() -> None:
    model = BACKBONES["resnet12"]()
    x = _images()
    torch.testing.assert_close(model(x[1]), model(x[1:2])[0], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"\[B, N, C, H, W\]"):
        model(x[0, 0, 0])


def test_channels_last_and_bfloat16_autocast() -> None:
    torch.manual_seed(0)
    model = BACKBONES["resnet12"]()
    x = _images()
    expected = copy.deepcopy(model)(x)
    last = x.flatten(0, 1).contiguous(memory_format=torch.channels_last).unflatten(0, (EPISODES, IMAGES))
    out = copy.deepcopy(model).to(memory_format=torch.channels_last)(last)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(x)
    assert low.dtype == torch.bfloat16
    assert torch.isfinite(low).all()
    assert (low.float() - expected).abs().mean() < 0.1 * expected.abs().mean()


def _maml_loss(model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """One inner SGD step on the support images, then the query loss (second order, as in MAML)."""
    support, query = x[:, :2], x[:, 2:]

    def loss(weights: dict[str, torch.Tensor], images: torch.Tensor) -> torch.Tensor:
        return functional_call(model, weights, (images,)).sin().sum()

    grads = torch.autograd.grad(loss(params, support), list(params.values()), create_graph=True)
    adapted = {name: p - 0.1 * g for (name, p), g in zip(params.items(), grads, strict=True)}
    return loss(adapted, query)


def test_second_order_maml_gradient_matches_finite_differences() -> None:
    torch.manual_seed(0)
    model = Conv4(in_channels=1, hidden=2, layers=2, track_running_stats=False).double()
    x = torch.randn(2, 4, 1, 4, 4, dtype=torch.float64)
    names = [name for name, _ in model.named_parameters()]

    def meta_loss(*values: torch.Tensor) -> torch.Tensor:
        return _maml_loss(model, dict(zip(names, values, strict=True)), x)

    params = tuple(p.detach().clone().requires_grad_() for p in model.parameters())
    assert torch.autograd.gradcheck(meta_loss, params, fast_mode=True)


def test_functional_call_matches_the_module() -> None:
    torch.manual_seed(0)
    model = BACKBONES["resnet12-wide"]()
    twin = copy.deepcopy(model)
    x = _images()
    params = {name: p.detach().clone().requires_grad_() for name, p in model.named_parameters()}
    out = functional_call(model, params, (x,))
    torch.testing.assert_close(out, twin(x), rtol=0, atol=0)
    out.sum().backward()
    assert all(p.grad is not None for p in params.values())


class Batched:
    """A backbone's :meth:`embed` calls, counted, with ``embeds_episodes_apart`` forced to ``False`` when
    ``together`` (the batched path the library took before)."""

    def __init__(self, backbone: nn.Module, monkeypatch: pytest.MonkeyPatch, together: bool = False) -> None:
        self.calls: list[int] = []
        embed = backbone.embed

        def counted(images: torch.Tensor, episodes: int) -> torch.Tensor:
            self.calls.append(episodes)
            return embed(images, episodes)

        monkeypatch.setattr(backbone, "embed", counted)
        if together:
            monkeypatch.setattr(backbone, "embeds_episodes_apart", lambda: False)


def scoring_state(backbone: nn.Module) -> None:
    """Training mode with the batch norms out of it, as resampling's scoring forward leaves a model."""
    for module in backbone.modules():
        if type(module).__name__ == "EpisodicBatchNorm2d":
            module.training, module.eval_batch_norm = False, "episode"


@pytest.mark.parametrize("name", BACKBONES)
@pytest.mark.parametrize("state", ["running", "episode", "scoring"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_without_autograd_on_a_cpu_episodes_embed_one_at_a_time_to_the_same_bits(
    name: str, state: str, channels_last: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Evaluation and scoring forwards (no autograd, CPU) embed episode by episode, which keeps one episode's
    activations in the caches; the features are bit for bit those of the batched forward."""
    torch.manual_seed(0)
    backbone = BACKBONES[name]()
    if state == "scoring":
        backbone.train()
        scoring_state(backbone)
    else:
        backbone.eval()
        set_eval_batch_norm(backbone, state)  # type: ignore[arg-type]
    backbone.channels_last = channels_last
    together = copy.deepcopy(backbone)
    apart, batched = Batched(backbone, monkeypatch), Batched(together, monkeypatch, together=True)
    images = _images()
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            ours, theirs = backbone(images), together(images)
        assert torch.equal(ours, theirs)
    assert apart.calls == [1] * EPISODES * 2  # no layer draws random numbers (drop rate 0)
    assert batched.calls == [EPISODES] * 2


@pytest.mark.parametrize("name", BACKBONES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_training_forwards_on_a_cpu_embed_one_episode_at_a_time_as_the_batch_would(
    name: str, channels_last: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With autograd and training batch norms, a CPU embeds one episode at a time: the batched forward's features,
    parameter gradients and running statistics (updated once, in the batch's order), up to float rounding."""
    torch.manual_seed(0)
    backbone = BACKBONES[name]()
    backbone.train()
    backbone.channels_last = channels_last
    if channels_last:
        backbone.to(memory_format=torch.channels_last)
    together = copy.deepcopy(backbone)
    apart, batched = Batched(backbone, monkeypatch), Batched(together, monkeypatch, together=True)
    images = _images()
    ours, theirs = backbone(images), together(images)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    ours.square().sum().backward()
    theirs.square().sum().backward()
    for (key, mine), other in zip(backbone.named_parameters(), together.parameters(), strict=True):
        assert mine.grad is not None
        assert other.grad is not None
        # the weight gradients sum over the episodes in another order: rounding relative to the largest entry
        scale = float(other.grad.abs().max())
        torch.testing.assert_close(mine.grad, other.grad, rtol=1e-5, atol=1e-5 * max(scale, 1.0), msg=key)
    _assert_same_state(backbone, together)
    assert (apart.calls, batched.calls) == ([1] * EPISODES, [EPISODES])
    backbone(images[0])  # one episode, 4-D
    assert apart.calls[-1] == 1


def test_a_dropout_in_training_keeps_the_episodes_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropout draws its masks for the batch: one episode at a time would draw other ones."""
    backbone = ResNet12(in_channels=3, widths=(4, 8, 8, 16), drop_rate=0.1)
    counted = Batched(backbone, monkeypatch)
    backbone.train()
    backbone(_images())
    backbone.eval()
    with torch.no_grad():
        backbone(_images())
    assert counted.calls == [EPISODES] + [1] * EPISODES

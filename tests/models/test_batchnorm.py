"""EpisodicBatchNorm2d against torch.nn.BatchNorm2d forwarding one episode at a time."""

from __future__ import annotations

import copy
import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.func import functional_call

from lightning_episodes.models import EpisodicBatchNorm2d, set_eval_batch_norm

C = 3


def _episodes(episodes: int = 4, size: int = 5, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # Episodes with different scales and offsets so that per-episode and batch statistics differ.
    x = torch.randn(episodes, size, C, 4, 4, generator=generator, dtype=dtype)
    scale = torch.rand(episodes, 1, C, 1, 1, generator=generator, dtype=dtype) * 3 + 0.5
    return x * scale + torch.arange(episodes, dtype=dtype).view(-1, 1, 1, 1, 1)


def _pair(momentum: float | None = 0.1, affine: bool = True) -> tuple[EpisodicBatchNorm2d, nn.BatchNorm2d]:
    ours = EpisodicBatchNorm2d(C, momentum=momentum, affine=affine)
    reference = nn.BatchNorm2d(C, momentum=momentum, affine=affine)
    with torch.no_grad():
        if affine:
            reference.weight.uniform_(0.5, 1.5)
            reference.bias.uniform_(-1, 1)
        reference.running_mean.uniform_(-1, 1)
        reference.running_var.uniform_(0.5, 2)
        reference.num_batches_tracked.fill_(3)
    ours.load_state_dict(reference.state_dict())  # the state dicts are interchangeable
    return ours, reference


def _assert_same_state(ours: nn.Module, reference: nn.Module) -> None:
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[key], value, rtol=0, atol=1e-6, msg=key)


@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
@pytest.mark.parametrize("affine", [True, False])
def test_training_equals_episodes_one_by_one(momentum: float | None, affine: bool) -> None:
    ours, reference = _pair(momentum, affine)
    x = _episodes()
    expected = torch.stack([reference(episode) for episode in x])
    torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-6)
    _assert_same_state(ours, reference)
    assert int(ours.num_batches_tracked) == 3 + 4  # type: ignore[arg-type]


def test_four_dimensional_inputs() -> None:
    ours, reference = _pair()
    x = _episodes(episodes=2)
    # [M, C, H, W] is one episode ...
    torch.testing.assert_close(ours(x[0]), reference(x[0]), rtol=0, atol=1e-6)
    # ... unless `episodes` says how many equal episodes are stacked.
    expected = torch.cat([reference(episode) for episode in x])
    torch.testing.assert_close(ours(x.flatten(0, 1), episodes=2), expected, rtol=0, atol=1e-6)
    _assert_same_state(ours, reference)


def test_eval_uses_running_statistics_and_changes_nothing() -> None:
    ours, reference = _pair()
    ours.eval(), reference.eval()
    before = copy.deepcopy(ours.state_dict())
    x = _episodes()
    torch.testing.assert_close(ours(x), reference(x.flatten(0, 1)).view_as(x), rtol=0, atol=1e-6)
    for key, value in before.items():
        assert torch.equal(ours.state_dict()[key], value), key


def test_episode_eval_mode_uses_episode_statistics_without_updating_buffers() -> None:
    ours, _ = _pair()
    x = _episodes()
    training_output = copy.deepcopy(ours).train()(x)
    assert set_eval_batch_norm(nn.Sequential(ours, nn.ReLU()), "episode") == 1
    ours.eval()
    before = copy.deepcopy(ours.state_dict())
    torch.testing.assert_close(ours(x), training_output, rtol=0, atol=0)
    for key, value in before.items():
        assert torch.equal(ours.state_dict()[key], value), key
    set_eval_batch_norm(ours, "running")
    assert not torch.allclose(ours(x), training_output)


def test_without_running_stats_eval_equals_training() -> None:
    ours = EpisodicBatchNorm2d(C, track_running_stats=False)
    reference = nn.BatchNorm2d(C, track_running_stats=False)
    assert ours.state_dict().keys() == reference.state_dict().keys() == {"weight", "bias"}
    x = _episodes()
    expected = torch.stack([reference(episode) for episode in x])
    torch.testing.assert_close(ours.eval()(x), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours.train()(x), expected, rtol=0, atol=1e-6)


def test_second_order_gradients_match_finite_differences() -> None:
    norm = EpisodicBatchNorm2d(2, track_running_stats=False).double()
    x = torch.randn(2, 3, 2, 2, 2, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(2, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2, dtype=torch.float64, requires_grad=True)

    def normalise(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return functional_call(norm, {"weight": weight, "bias": bias}, (x,))

    assert torch.autograd.gradcheck(normalise, (x, weight, bias))
    assert torch.autograd.gradgradcheck(normalise, (x, weight, bias))


def test_functional_call_updates_the_buffers_it_is_given() -> None:
    ours, reference = _pair()
    x = _episodes()
    state = {key: value.clone() for key, value in ours.state_dict().items()}
    state["weight"] = state["weight"].requires_grad_()
    out = functional_call(ours, state, (x,))
    expected = torch.stack([reference(episode) for episode in x])
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(state["running_mean"], reference.running_mean, rtol=0, atol=1e-6)
    (grad,) = torch.autograd.grad(out.square().sum(), state["weight"])
    assert grad.shape == (C,)


def test_channels_last_and_bfloat16_autocast() -> None:
    ours, reference = _pair()
    x = _episodes()
    expected = torch.stack([reference(episode) for episode in x])
    flat = x.flatten(0, 1).contiguous(memory_format=torch.channels_last)
    out = ours(flat, episodes=4)
    assert out.is_contiguous(memory_format=torch.channels_last)  # the layout is kept
    torch.testing.assert_close(out, expected.flatten(0, 1), rtol=0, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = ours(x.to(torch.bfloat16))
    assert low.dtype == torch.bfloat16
    assert ours.running_mean is not None
    assert ours.running_mean.dtype == torch.float32
    torch.testing.assert_close(low.float(), expected, rtol=0.05, atol=0.05)


def test_not_converted_to_sync_batch_norm() -> None:
    model = nn.Sequential(EpisodicBatchNorm2d(C))
    assert isinstance(nn.SyncBatchNorm.convert_sync_batchnorm(model)[0], EpisodicBatchNorm2d)


def test_errors() -> None:
    norm = EpisodicBatchNorm2d(C)
    with pytest.raises(ValueError, match=r"\[B, N, 3, H, W\]"):
        norm(torch.randn(2, 4, 4, 4))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        norm(torch.randn(2, 1, C, 1, 1))
    with pytest.raises(ValueError, match="episodes=3 must be positive and divide"):
        norm(torch.randn(4, C, 2, 2), episodes=3)
    with pytest.raises(ValueError, match="num_features"):
        EpisodicBatchNorm2d(0)
    with pytest.raises(ValueError, match="momentum"):
        EpisodicBatchNorm2d(C, momentum=1.5)
    with pytest.raises(ValueError, match="eval_batch_norm"):
        EpisodicBatchNorm2d(C, eval_batch_norm="batch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eval_batch_norm"):
        set_eval_batch_norm(norm, "train")  # type: ignore[arg-type]


def _rank_forward(rank: int, world: int, rendezvous: str, state: dict, x: torch.Tensor, results: Any) -> None:
    """One DDP rank: forward its slice of the episodes, send back (as numpy) its output and buffers."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world)
    try:
        norm = EpisodicBatchNorm2d(C)
        norm.load_state_dict(state)
        local = x.chunk(world)[rank]  # docs/method.md's slicing: rank r takes episodes [rB/W, (r+1)B/W)
        out = norm(local).detach().numpy()
        # numpy arrays travel by value: shared-memory tensors would vanish with the exiting process
        results.put((rank, out, {key: value.numpy().copy() for key, value in norm.state_dict().items()}))
    finally:
        dist.destroy_process_group()


def test_running_stats_under_two_processes_equal_one_process(tmp_path: Path) -> None:
    """With torch.distributed (gloo, 2 forked processes) the buffers see the global batch in order."""
    ours, reference = _pair()
    state = copy.deepcopy(ours.state_dict())
    x = _episodes()
    expected = torch.stack([reference(episode) for episode in x])
    context = mp.get_context("fork")
    results = context.Queue()
    rendezvous = f"file://{tmp_path}/rendezvous"
    processes = [
        context.Process(target=_rank_forward, args=(rank, 2, rendezvous, state, x, results)) for rank in range(2)
    ]
    for process in processes:
        process.start()
    outputs = {rank: (out, buffers) for rank, out, buffers in (results.get(timeout=30) for _ in processes)}
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    # Normalisation stays per episode and local; every rank's buffers are the one-process ones.
    out = torch.cat([torch.from_numpy(outputs[0][0]), torch.from_numpy(outputs[1][0])])
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    for _, buffers in outputs.values():
        for key, value in reference.state_dict().items():
            torch.testing.assert_close(torch.from_numpy(buffers[key]), value, rtol=0, atol=1e-6, msg=key)

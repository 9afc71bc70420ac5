"""ESS and the ESS-normalised loss (Algorithm 1, Eq. 3): hand computations, gradients, DDP, edge cases."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_episodes.weighting import (
    available_targets,
    effective_sample_size,
    ess_weighted_loss,
    get_target,
    importance_weights,
    weighted_loss,
)

# The hand-computed batch of test_weights.py: mu = 2, sigma = 0.5, uniform target, L = Omega.
LOSSES = [2.0, 2.5, 1.0, 3.5]
WEIGHTS = [0.48098114501548433, 0.793003844592732, 3.5539966630473123, 0.0]
# sum w = 4.827981652655529, sum w^2 = 13.49109024035069, ESS = 1.7277630216023598,
# sum w L = 6.4984685645601115, so loss = 3.7612036392197523 ("ess"), 1.3460010894999501 ("sum_weights").


def test_hand_computed_ess_and_loss() -> None:
    losses, weights = torch.tensor(LOSSES, dtype=torch.float64), torch.tensor(WEIGHTS, dtype=torch.float64)
    assert effective_sample_size(weights).item() == pytest.approx(1.7277630216023598, rel=1e-13)
    assert ess_weighted_loss(losses, weights).item() == pytest.approx(3.7612036392197523, rel=1e-13)
    assert ess_weighted_loss(losses, weights, "sum_weights").item() == pytest.approx(1.3460010894999501, rel=1e-13)
    out = weighted_loss(losses, weights)
    assert out.loss.item() == pytest.approx(3.7612036392197523, rel=1e-13)
    assert out.sum_weights.item() == pytest.approx(4.827981652655529, rel=1e-13)
    assert out.sum_squared_weights.item() == pytest.approx(13.49109024035069, rel=1e-13)
    assert out.batch_size.item() == 4
    assert out.nonfinite == 0
    assert not out.skipped
    assert out.batch_over_ess.item() == pytest.approx(4 / 1.7277630216023598, rel=1e-13)
    # the loss over the self-normalised estimate: sum w / ESS under "ess", 1 under "sum_weights", sum w / D
    assert out.loss_scale.item() == pytest.approx(4.827981652655529 / 1.7277630216023598, rel=1e-13)
    assert out.loss_scale.item() == pytest.approx(3.7612036392197523 / 1.3460010894999501, rel=1e-13)
    assert weighted_loss(losses, weights, "sum_weights").loss_scale.item() == 1.0
    assert weighted_loss(losses, weights, "denominator", denominator=2.0).loss_scale.item() == pytest.approx(
        4.827981652655529 / 2.0, rel=1e-13
    )
    # The weights of test_weights.py's batch are these weights.
    computed = importance_weights(losses, 2.0, 0.5)
    assert computed.tolist() == pytest.approx(WEIGHTS, rel=1e-12)
    # Small integers: w = [1, 2, 0, 1], L = [1, 2, 3, 4]: ESS = 16 / 6, sum w L = 9.
    small = ess_weighted_loss(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 0.0, 1.0]))
    assert small.item() == pytest.approx(9 / (16 / 6))


def test_unit_weights_give_the_plain_mean() -> None:
    gen = torch.Generator().manual_seed(0)
    losses = torch.rand(16, generator=gen, dtype=torch.float64)
    for divisor in ("ess", "sum_weights"):
        loss = ess_weighted_loss(losses, torch.ones(16), divisor)
        assert loss.item() == pytest.approx(losses.mean().item(), rel=1e-14)
    assert effective_sample_size(torch.ones(16)).item() == 16.0
    assert weighted_loss(losses, torch.ones(16)).batch_over_ess.item() == pytest.approx(1.0)
    # Constant weights other than 1: ESS = |B| still, so "ess" scales the mean by the weight (only
    # w = 1 gives the plain mean, docs/method.md), while "sum_weights" gives the mean.
    constant = torch.full((16,), 3.7, dtype=torch.float64)
    assert ess_weighted_loss(losses, constant).item() == pytest.approx(3.7 * losses.mean().item())
    assert ess_weighted_loss(losses, constant, "sum_weights").item() == pytest.approx(losses.mean().item())


def test_effective_sample_size_edge_cases() -> None:
    assert effective_sample_size(torch.zeros(4)).item() == 0.0
    assert effective_sample_size(torch.zeros(0)).item() == 0.0
    assert effective_sample_size(torch.tensor([0.0, 5.0, 0.0])).item() == 1.0
    weird = torch.tensor([1.0, float("nan"), float("inf"), -2.0, 1.0])
    assert effective_sample_size(weird).item() == 2.0  # non-finite and negative entries count as 0
    assert effective_sample_size(torch.tensor([1e300, 1e300], dtype=torch.float64)).item() == 2.0
    assert effective_sample_size(torch.tensor([1, 1, 2])).dtype == torch.get_default_dtype()


def _toy_losses(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-episode losses that depend smoothly on the parameters (float64)."""
    return ((x @ theta - y) ** 2).mean(dim=1) + 0.1 * torch.sin(x.sum(dim=1) @ theta)


def _toy(batch: int = 12, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True)
    x = torch.randn(batch, 5, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(batch, 5, generator=gen, dtype=torch.float64)
    return theta, x, y


@pytest.mark.parametrize("divisor", ["ess", "sum_weights"])
def test_gradient_matches_finite_differences_with_frozen_weights(divisor: str) -> None:
    theta, x, y = _toy()
    losses = _toy_losses(theta, x, y)
    # Weights from the losses themselves (difficulty = loss), as in training.
    weights = importance_weights(losses, losses.mean(), losses.std(), "uniform", out_of_support="clamp")
    (grad,) = torch.autograd.grad(ess_weighted_loss(losses, weights, divisor), theta)

    def frozen(t: torch.Tensor) -> float:
        return ess_weighted_loss(_toy_losses(t, x, y), weights, divisor).item()

    h = 1e-6
    numeric = torch.stack(
        [
            torch.tensor((frozen(theta.detach() + h * e) - frozen(theta.detach() - h * e)) / (2 * h))
            for e in torch.eye(3, dtype=torch.float64)
        ]
    )
    torch.testing.assert_close(grad, numeric.to(grad.dtype), rtol=1e-7, atol=1e-9)

    # Had the weights carried gradient (a differentiable function of the losses), the gradient would
    # differ: the check above can fail.
    losses = _toy_losses(theta, x, y)
    soft = torch.exp(-losses)
    s1, s2 = soft.sum(), (soft * soft).sum()
    leaky = (soft * losses).sum() / (s1 * s1 / s2 if divisor == "ess" else s1)
    (leaky_grad,) = torch.autograd.grad(leaky, theta)
    (frozen_grad,) = torch.autograd.grad(ess_weighted_loss(_toy_losses(theta, x, y), soft, divisor), theta)
    assert not torch.allclose(leaky_grad, frozen_grad, rtol=1e-3)


def test_no_gradient_flows_into_the_weights() -> None:
    losses = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    raw = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
    weights = raw * 2
    out = weighted_loss(losses, weights)
    out.loss.backward()
    assert raw.grad is None
    assert losses.grad is not None
    assert not out.ess.requires_grad
    assert not out.sum_weights.requires_grad
    # d loss / d L_j = w_j / ESS.
    w = weights.detach()
    torch.testing.assert_close(losses.grad, w / effective_sample_size(w))


def _chunks(n: int, world_size: int, uneven: bool) -> list[slice]:
    if not uneven:
        size = n // world_size
        return [slice(r * size, (r + 1) * size) for r in range(world_size)]
    cuts = [0, 1, *range(3, n, max(1, n // world_size))][:world_size] + [n]
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


@pytest.mark.parametrize("divisor", ["ess", "sum_weights"])
@pytest.mark.parametrize(("world_size", "uneven"), [(1, False), (2, False), (3, False), (4, False), (3, True)])
def test_ddp_form_reproduces_the_single_process_gradient(divisor: str, world_size: int, uneven: bool) -> None:
    theta, x, y = _toy(batch=12, seed=world_size)
    losses = _toy_losses(theta, x, y)
    losses = torch.cat([losses[:5], torch.tensor([float("inf")], dtype=torch.float64), losses[6:]])
    weights = importance_weights(losses.detach(), 1.0, 0.8, "hard", out_of_support="clamp")
    single = weighted_loss(losses, weights, divisor)
    (single_grad,) = torch.autograd.grad(single.loss, theta, retain_graph=True)

    slices = _chunks(12, world_size, uneven)
    local = []  # each rank's local statistics, as its reduce() sees them

    def record(t: torch.Tensor) -> torch.Tensor:
        local.append(t.clone())
        return t

    for s in slices:
        weighted_loss(losses[s], weights[s], divisor, reduce=record)
    total = torch.stack(local).sum(0)  # what an all-reduce sum would return on every rank

    calls = []

    def reduce(t: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return total

    grad = torch.zeros_like(theta)
    loss_sum = 0.0
    for s in slices:
        out = weighted_loss(losses[s], weights[s], divisor, reduce=reduce, world_size=world_size)
        (g,) = torch.autograd.grad(out.loss, theta, retain_graph=True)
        grad += g / world_size  # DDP averages gradients over ranks
        loss_sum += out.loss.item()
        assert out.ess.item() == pytest.approx(single.ess.item(), rel=1e-13)
        assert out.loss_scale.item() == pytest.approx(single.loss_scale.item(), rel=1e-13)  # global, as the ESS
        assert out.nonfinite == 1
        assert out.batch_size.item() == 12
        assert not out.skipped
    assert len(calls) == world_size  # one collective per rank and step
    torch.testing.assert_close(grad, single_grad, rtol=1e-10, atol=1e-12)
    assert loss_sum / world_size == pytest.approx(single.loss.item(), rel=1e-12)

    if world_size > 1:  # dropping W, or a local ESS, is visibly wrong
        no_w = sum(
            torch.autograd.grad(weighted_loss(losses[s], weights[s], divisor, reduce)[0], theta, retain_graph=True)[0]
            for s in slices
        )
        assert not torch.allclose(no_w / world_size, single_grad, rtol=1e-3)
        local_ess = sum(
            torch.autograd.grad(
                weighted_loss(losses[s], weights[s], divisor, world_size=world_size)[0],
                theta,
                retain_graph=True,
            )[0]
            for s in slices
        )
        assert not torch.allclose(local_ess / world_size, single_grad, rtol=1e-3)


def test_zero_weight_sum_skips_the_step_with_a_connected_graph() -> None:
    # easy target, every episode above mu: sum w = 0.
    losses = torch.tensor([2.5, 3.0, 2.8], requires_grad=True)
    weights = importance_weights(losses, 2.0, 0.5, "easy")
    assert weights.tolist() == [0.0, 0.0, 0.0]
    for divisor in ("ess", "sum_weights"):
        out = weighted_loss(losses, weights, divisor)
        assert out.skipped
        assert out.loss.item() == 0.0
        assert out.ess.item() == 0.0
        assert out.batch_over_ess.item() == 0.0
        assert out.loss_scale.item() == 0.0
        (grad,) = torch.autograd.grad(out.loss, losses)
        assert grad.tolist() == [0.0, 0.0, 0.0]
    # Empty batch: also skipped, no NaN.
    empty = weighted_loss(torch.zeros(0, requires_grad=True), torch.zeros(0))
    assert empty.skipped
    assert empty.loss.item() == 0.0
    assert empty.loss.requires_grad


def test_nonfinite_losses_are_masked_before_the_product() -> None:
    theta = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    finite_part = theta * torch.tensor([1.0, 3.0], dtype=torch.float64)
    losses = torch.cat([finite_part, torch.tensor([float("inf"), float("nan")], dtype=torch.float64)])
    weights = torch.tensor([1.0, 2.0, 5.0, 5.0], dtype=torch.float64)
    out = weighted_loss(losses, weights)
    assert out.nonfinite == 2
    assert not out.skipped
    assert torch.isfinite(out.loss)
    reference = ess_weighted_loss(finite_part, weights[:2])
    assert out.loss.item() == pytest.approx(reference.item(), rel=1e-14)
    (grad,) = torch.autograd.grad(out.loss, theta)
    (ref_grad,) = torch.autograd.grad(
        ess_weighted_loss(theta * torch.tensor([1.0, 3.0], dtype=torch.float64), weights[:2]), theta
    )
    torch.testing.assert_close(grad, ref_grad)
    # Only non-finite losses: skipped, loss 0, gradient 0 and finite.
    bad = torch.tensor([float("inf"), float("nan")], requires_grad=True)
    out = weighted_loss(bad, torch.ones(2))
    assert out.skipped
    assert out.nonfinite == 2
    assert out.loss.item() == 0.0
    (grad,) = torch.autograd.grad(out.loss, bad)
    assert grad.tolist() == [0.0, 0.0]


def test_dtype_is_kept() -> None:
    losses = torch.tensor([1.0, 2.0], dtype=torch.float32, requires_grad=True)
    assert ess_weighted_loss(losses, torch.tensor([1.0, 2.0], dtype=torch.float64)).dtype == torch.float32
    assert ess_weighted_loss(losses.detach().bfloat16(), torch.ones(2)).dtype == torch.bfloat16


def test_validation_errors() -> None:
    x = torch.ones(3)
    with pytest.raises(ValueError, match="divisor"):
        ess_weighted_loss(x, x, divisor="mean")
    with pytest.raises(ValueError, match="divisor"):
        weighted_loss(x, x, divisor="ESS")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="world_size"):
            weighted_loss(x, x, world_size=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weights must have the shape of losses"):
        ess_weighted_loss(x, torch.ones(4))


special = st.sampled_from([0.0, 1e30, -1e30, float("nan"), float("inf"), float("-inf")])
loss_values = st.one_of(st.floats(-1e30, 1e30), special)


@settings(max_examples=150, deadline=None)
@given(
    losses=st.lists(loss_values, min_size=1, max_size=24),
    difficulties=st.lists(st.floats(-50, 50), min_size=24, max_size=24),
    target=st.sampled_from([t for t in available_targets() if not get_target(t).needs_progress]),
    mode=st.sampled_from(["zero", "clamp"]),
    sigma=st.one_of(st.just(0.0), st.floats(1e-9, 100.0)),
    divisor=st.sampled_from(["ess", "sum_weights"]),
)
def test_loss_and_ess_are_finite_and_bounded(losses, difficulties, target, mode, sigma, divisor) -> None:
    values = torch.tensor(losses, dtype=torch.float32, requires_grad=True)
    omegas = torch.tensor(difficulties[: len(losses)])
    weights = importance_weights(omegas, 0.0, sigma, target, out_of_support=mode)
    out = weighted_loss(values, weights, divisor)
    assert torch.isfinite(out.loss)
    assert 0.0 <= out.ess.item() <= len(losses)
    assert torch.isfinite(out.batch_over_ess)
    assert 0.0 <= effective_sample_size(weights).item() <= len(losses)
    (grad,) = torch.autograd.grad(out.loss, values)
    assert torch.isfinite(grad).all()


@settings(max_examples=50, deadline=None)
@given(value=st.one_of(st.floats(-1e30, 1e30), st.just(1e30)), n=st.integers(1, 32))
def test_all_equal_losses_give_that_loss(value: float, n: int) -> None:
    gen = torch.Generator().manual_seed(n)
    weights = importance_weights(torch.randn(n, generator=gen, dtype=torch.float64), 0.0, 1.0)
    losses = torch.full((n,), value, dtype=torch.float64)
    out = weighted_loss(losses, weights, "sum_weights")
    if out.skipped:
        assert out.loss.item() == 0.0
    else:
        assert out.loss.item() == pytest.approx(value, rel=1e-12)

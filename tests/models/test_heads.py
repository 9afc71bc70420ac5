"""LinearHead: shapes, initialisation, functional adaptation."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from lightning_episodes.models import LinearHead


def test_logits_over_ways() -> None:
    head = LinearHead(in_features=16, ways=5)
    assert head(torch.randn(2, 7, 16)).shape == (2, 7, 5)
    assert head.ways == 5
    assert torch.equal(head.bias, torch.zeros(5))
    bound = (6 / (16 + 5)) ** 0.5  # Xavier-uniform, as learn2learn's MAML classifiers
    assert head.weight.abs().max() <= bound


def test_functional_call_adapts_the_head() -> None:
    head = LinearHead(4, 3)
    features = torch.randn(6, 4)
    weight = torch.zeros(3, 4, requires_grad=True)
    logits = functional_call(head, {"weight": weight, "bias": head.bias}, (features,))
    torch.testing.assert_close(logits, head.bias.expand(6, 3))
    (grad,) = torch.autograd.grad(logits.sum(), weight, create_graph=True)
    torch.testing.assert_close(grad, features.sum(0).expand(3, 4))


@pytest.mark.parametrize(("in_features", "ways", "name"), [(0, 5, "in_features"), (8, 0, "ways")])
def test_errors(in_features: int, ways: int, name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be positive"):
        LinearHead(in_features, ways)

"""The maths the algorithms share, as plain functions of tensors: prototypes, distances, the per-episode query loss
and MAML's inner loop. No Lightning, no modules of their own: each algorithm file composes these."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call


def prototypes(support: Tensor, ways: int) -> Tensor:
    """Class means ``[B, ways, D]`` of class-major support features ``[B, ways * shots, D]``."""
    return support.unflatten(1, (ways, -1)).mean(2)


def negative_squared_distances(x: Tensor, centres: Tensor) -> Tensor:
    """``-‖x_i − c_j‖²`` ``[B, N, K]`` of ``x`` ``[B, N, D]`` and ``centres`` ``[B, K, D]``.

    The explicit difference (not ``cdist``) is exact and has a finite gradient at zero distance.
    """
    return -(x[:, :, None] - centres[:, None]).pow(2).sum(-1)


def scaled_cosine(x: Tensor, centres: Tensor, scale: Tensor | float) -> Tensor:
    """``scale · cos(x_i, c_j)`` ``[B, N, K]`` of ``x`` ``[B, N, D]`` and ``centres`` ``[B, K, D]``."""
    return scale * F.normalize(x, dim=-1) @ F.normalize(centres, dim=-1).transpose(1, 2)


def query_loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> tuple[Tensor, Tensor]:
    """Per-episode mean cross-entropy (with ``label_smoothing``, as ``torch.nn.functional.cross_entropy`` applies
    it) and accuracy ``([B], [B])`` of ``logits`` ``[B, Q, ways]`` against ``labels`` ``[B, Q]``."""
    losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none", label_smoothing=label_smoothing)
    losses = losses.mean(1)
    accuracies = (logits.argmax(-1) == labels).float().mean(1)
    return losses, accuracies


def adapt(
    module: nn.Module,
    params: Mapping[str, Tensor],
    inputs: Tensor,
    labels: Tensor,
    steps: int,
    lr: float,
    create_graph: bool,
) -> dict[str, Tensor]:
    """``steps`` steps of SGD on the cross-entropy of ``module`` called with ``params`` on ``(inputs, labels)``.

    The returned parameters stay differentiable functions of ``params``: through the updates' gradients
    when ``create_graph`` (second-order MAML), or only through the identity path otherwise (first-order).

    Args:
        module: the network, called as ``functional_call(module, params, (inputs,))``.
        params: the (subset of) parameters to adapt, by name.
        inputs: one episode's support inputs.
        labels: their labels.
        steps: number of gradient steps.
        lr: the step size.
        create_graph: differentiate through the updates (second order).

    Returns:
        The adapted parameters, by name.
    """
    fast = dict(params)
    with torch.enable_grad():  # adaptation needs gradients even where the caller wants none (scoring)
        for _ in range(steps):
            loss = F.cross_entropy(functional_call(module, fast, (inputs,)), labels)
            grads = torch.autograd.grad(loss, list(fast.values()), create_graph=create_graph)
            fast = {name: p - lr * g for (name, p), g in zip(fast.items(), grads, strict=True)}
    return fast

"""The training step's episode losses as a CUDA graph: ``EpisodicModule(cuda_graphs=True)``.

On a GPU a small model's step is bound by the host launching its kernels one by one (ProtoNet conv4-64 on an H200:
~7 ms a step for 1-2 ms of GPU work). :class:`GraphedLosses` captures the algorithm's ``episode_losses`` — the
backbone's forward, the episodes' losses — and its backward with ``torch.cuda.make_graphed_callables``, so each
training step replays the two graphs in two launches. What stays eager: the importance weights (the weighting
callback keeps state on the host), the weighted loss (a handful of small kernels) and the optimiser step (one fused
launch with the default optimiser on CUDA). Evaluation stays eager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from lightning_episodes.algorithms.interface import EpisodeOutput
from lightning_episodes.data.episode import Episode, EpisodeIdentity

if TYPE_CHECKING:
    import pytorch_lightning as pl

#: an algorithm's ``episode_losses``: a batch of episodes to their per-episode losses, accuracies and difficulties
EpisodeLosses = Callable[[Episode], EpisodeOutput]


def check_cuda_graphs(trainer: pl.Trainer, algorithm: str, capturable: bool, compile_backbone: bool) -> None:
    """Raise ``ValueError`` (one line naming ``model.cuda_graphs``) where the training step cannot be captured.

    Args:
        trainer: the Trainer that fits the model.
        algorithm: the algorithm's class name, for the message.
        capturable: whether its ``episode_losses`` can be captured (``EpisodicModule.supports_cuda_graphs``).
        compile_backbone: the model's ``compile_backbone``.

    Raises:
        ValueError: on a device other than CUDA, several processes (DDP), mixed precision (autocast's cache),
            gradient accumulation, ``compile_backbone``, or an algorithm that differentiates through its own
            gradients (MAML, ANIL).
    """
    device = trainer.strategy.root_device
    reason = None
    if not capturable:
        reason = f"is not available for {algorithm}: its inner loop differentiates through its gradients"
    elif compile_backbone:
        reason = "and model.compile_backbone=true exclude each other (choose one)"
    elif "mixed" in str(trainer.precision):
        reason = f"needs trainer.precision 32-true, bf16-true or 16-true, got {trainer.precision} (autocast's cache)"
    elif getattr(trainer, "accumulate_grad_batches", 1) > 1:
        # the graph's gradient buffers become the parameters' .grad: a second replay would overwrite them
        reason = f"needs trainer.accumulate_grad_batches=1, got {trainer.accumulate_grad_batches}"
    elif trainer.world_size > 1:
        reason = "runs on one device only (the graphed backward does not overlap DDP's gradient all-reduce)"
    elif device.type != "cuda":
        reason = f"needs a CUDA device (trainer.accelerator=gpu); this run's device is {device.type}"
    if reason is not None:
        raise ValueError(f"model.cuda_graphs=true {reason}")


class _Losses(nn.Module):
    """``episode_losses`` as a function of the episode tensors (what the graph captures)."""

    def __init__(self, model: nn.Module, episode_losses: EpisodeLosses, identity: EpisodeIdentity) -> None:
        super().__init__()
        self.model = model  # a submodule here (its parameters are the graph's), never the other way round
        self.episode_losses = episode_losses
        self.identity = identity

    def forward(self, support: Tensor, support_labels: Tensor, query: Tensor, query_labels: Tensor) -> Any:
        out = self.episode_losses(Episode(support, support_labels, query, query_labels, self.identity))
        # the difficulty as its own tensor: a graph's outputs must not alias each other
        return out.losses, out.accuracies, out.difficulty.clone()


class GraphedLosses:
    """Per-episode losses of training batches by replaying a CUDA graph (one graph per episode shape).

    The graph is captured on the first batch of each shape: ``make_graphed_callables`` first runs 3 warm-up
    forward and backward passes, whose batch-norm statistics and random numbers are undone, so the run's numbers do
    not depend on the capture. A replay reads each batch's images and labels; the episodes' identities reach the
    algorithm only through their shape (ways, shots, queries).

    Args:
        model: the module whose parameters and buffers ``episode_losses`` uses (the algorithm's).
        episode_losses: the algorithm's per-episode losses of a batch (its ``episode_losses``).
    """

    def __init__(self, model: nn.Module, episode_losses: EpisodeLosses) -> None:
        self.model, self.episode_losses = model, episode_losses
        self.graphs: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, batch: Episode) -> EpisodeOutput:
        tensors = (batch.support, batch.support_labels, batch.query, batch.query_labels)
        key = tuple((t.shape, t.dtype, t.stride()) for t in tensors)
        graphed = self.graphs.get(key)
        if graphed is None:
            graphed = self.graphs[key] = self._capture(batch, tensors)
        losses, accuracies, difficulty = graphed(*tensors)
        # the graph's outputs are overwritten by the next replay: hand on copies of what may be kept
        return EpisodeOutput(losses, accuracies.clone(), difficulty.clone())

    def _capture(self, batch: Episode, tensors: tuple[Tensor, ...]) -> Callable[..., Any]:
        model = self.model
        device = batch.support.device
        buffers = [b.detach().clone() for b in model.buffers()]
        rng = torch.cuda.get_rng_state(device)
        losses = _Losses(model, self.episode_losses, batch.identity)
        graphed = torch.cuda.make_graphed_callables(losses, tuple(t.clone() for t in tensors), allow_unused_input=True)
        with torch.no_grad():
            for buffer, saved in zip(model.buffers(), buffers, strict=True):
                buffer.copy_(saved)
        torch.cuda.set_rng_state(rng, device)
        return graphed

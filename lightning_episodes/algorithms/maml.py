"""Model-Agnostic Meta-Learning: adapt every parameter to each episode's support set by gradient descent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor, nn
from torch.func import functional_call
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodeOutput, EpisodicModule, EvalBatchNorm, default_optimizer
from lightning_episodes.algorithms.protonet import query_loss
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import LinearHead, build_backbone, feature_size

Parameters = dict[str, Tensor]


def adapt(
    module: nn.Module,
    params: Mapping[str, Tensor],
    inputs: Tensor,
    labels: Tensor,
    steps: int,
    lr: float,
    create_graph: bool,
) -> Parameters:
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


def _check(name: str, value: float, minimum: float, inclusive: bool) -> None:
    if value < minimum or (not inclusive and value == minimum):
        raise ValueError(f"model.{name} must be {'>=' if inclusive else '>'} {minimum}, got {value}")


class MAML(EpisodicModule):
    """Model-Agnostic Meta-Learning (Finn et al., ICML 2017), as learn2learn's ``MAML`` runs it.

    Per episode, a copy of all parameters takes ``adaptation_steps`` SGD steps of size ``adaptation_lr``
    on the support set; the episode's loss (and difficulty, Arnold et al., NeurIPS 2021, §3) is the query
    cross-entropy under the adapted parameters. The outer gradient goes through the updates (second
    order) unless ``first_order``. Support and query are forwarded separately and batch norm keeps no
    running buffers (it always normalises with the statistics of its current input), so evaluation
    cannot change the model. The head has ``ways`` outputs: training and evaluation ways must be equal.
    Evaluation, and scoring under ``torch.no_grad()``, still adapt (with first-order updates) but keep
    no graph of the query loss.

    Episodes are adapted one by one with ``torch.func.functional_call``: it matches learn2learn's
    gradients exactly at learn2learn's speed, whereas ``vmap`` over episodes was slower on CPU and gave
    wrong second-order gradients with affine batch norm.

    Args:
        backbone: registered backbone name (``conv4``, ``resnet12``, ``resnet12-wide``).
        backbone_options: extra backbone arguments (``track_running_stats`` defaults to False here).
        in_channels: image channels (linked from ``data.channels`` by the CLI).
        image_size: image height and width (linked from ``data.image_size`` by the CLI).
        ways: classes per episode, the head's outputs (linked from ``data.ways`` by the CLI).
        adaptation_steps: inner SGD steps in training (default 5).
        adaptation_lr: inner step size (default 0.01).
        eval_adaptation_steps: inner steps at validation/test (default: ``adaptation_steps``).
        first_order: ignore second derivatives (first-order MAML).
        optimizer: outer optimiser factory (default Adam, lr 1e-3, the paper's).
        lr_scheduler: optional scheduler factory.
        eval_batch_norm: ``episode`` (default; the only mode without running statistics).
        channels_last: run the convolutions ``channels_last`` (see :class:`EpisodicModule`; default False).
        compile_backbone: compile the backbone (see :class:`EpisodicModule`; default False).

    Raises:
        ValueError: on a non-positive step count, learning rate or ``ways``, an unknown backbone, an image
            too small for it, ``eval_batch_norm="running"`` without running statistics, or
            ``compile_backbone`` (MAML's inner loop recompiles the backbone until torch.compile gives up).
    """

    requires_grad_in_evaluation: ClassVar[bool] = True
    #: whether the inner loop calls the backbone with fast weights (then ``compile_backbone`` is refused)
    adapts_backbone: ClassVar[bool] = True

    def __init__(
        self,
        backbone: str = "conv4",
        backbone_options: dict[str, Any] | None = None,
        in_channels: int = 1,
        image_size: int = 28,
        ways: int = 5,
        adaptation_steps: int = 5,
        adaptation_lr: float = 0.01,
        eval_adaptation_steps: int | None = None,
        first_order: bool = False,
        optimizer: OptimizerCallable = default_optimizer,
        lr_scheduler: LRSchedulerCallable | None = None,
        eval_batch_norm: EvalBatchNorm = "episode",
        channels_last: bool = False,
        compile_backbone: bool = False,
    ) -> None:
        super().__init__(optimizer, lr_scheduler, eval_batch_norm, channels_last, compile_backbone)
        _check("ways", ways, 1, True)
        _check("adaptation_steps", adaptation_steps, 1, True)
        _check("adaptation_lr", adaptation_lr, 0, False)
        eval_adaptation_steps = adaptation_steps if eval_adaptation_steps is None else eval_adaptation_steps
        _check("eval_adaptation_steps", eval_adaptation_steps, 1, True)
        if compile_backbone and self.adapts_backbone:
            raise ValueError(
                f"model.compile_backbone=true does not speed up {type(self).__name__}: every episode's support and "
                "query forwards with fast weights (other shapes, grad modes, tensors) recompile the backbone until "
                "torch.compile's recompile limit, after which it runs eager (ANIL, which adapts only its head, "
                "compiles)"
            )
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        options = {"track_running_stats": False} | (backbone_options or {})
        if eval_batch_norm == "running" and not options["track_running_stats"]:
            raise ValueError(
                "model.eval_batch_norm='running' needs running statistics, which MAML's backbone does not keep "
                "(set model.backbone_options.track_running_stats=true, or use eval_batch_norm='episode')"
            )
        try:
            self.backbone = build_backbone(backbone, in_channels, image_size, **options)
        except ValueError as error:
            raise ValueError(f"model.backbone: {error}") from None
        self.head = LinearHead(feature_size(self.backbone, in_channels, image_size), ways)
        self.ways, self.first_order = ways, first_order
        self.adaptation_steps, self.adaptation_lr = adaptation_steps, adaptation_lr
        self.eval_adaptation_steps = eval_adaptation_steps

    @override
    def forward(self, images: Tensor) -> Tensor:
        """Logits ``[..., ways]`` of one episode's images ``[N, C, H, W]`` (or a batch ``[B, N, C, H, W]``)."""
        return self.head(self.backbone(images))

    def _inner_loop(self) -> tuple[int, bool]:
        """Steps and whether to differentiate through them: evaluation needs no second-order graph."""
        if self.training:
            return self.adaptation_steps, not self.first_order
        return self.eval_adaptation_steps, False

    def _outer_grad(self) -> torch.autograd.grad_mode.set_grad_enabled:
        """Where the outer loss needs a graph: in training, unless gradients are off (evaluation keeps none,
        which bounds its memory to one episode's adaptation)."""
        return torch.set_grad_enabled(self.training and torch.is_grad_enabled())

    def _check_ways(self, ways: int) -> None:
        if ways != self.ways:
            raise ValueError(
                f"{type(self).__name__}'s head has model.ways={self.ways} outputs but the episode has {ways} ways: "
                "training and evaluation ways must both equal model.ways"
            )

    @override
    def setup(self, stage: str) -> None:
        super().setup(stage)
        datamodule = getattr(self.trainer, "datamodule", None)
        for name in ("ways", "eval_ways"):
            ways = getattr(datamodule, name, None)
            if ways is not None and ways != self.ways:
                raise ValueError(
                    f"{type(self).__name__}'s head has model.ways={self.ways} outputs but data.{name}={ways}: "
                    "training and evaluation ways must both equal model.ways"
                )

    @override
    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        return EpisodeOutput(*query_loss(self.query_logits(batch), batch.query_labels))

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        """Query logits under the parameters adapted to each episode's support set."""
        self._check_ways(batch.ways)
        steps, create_graph = self._inner_loop()
        params = {name: p for name, p in self.named_parameters() if p.requires_grad}
        logits = []
        for i in range(len(batch)):
            fast = adapt(
                self, params, batch.support[i], batch.support_labels[i], steps, self.adaptation_lr, create_graph
            )
            with self._outer_grad():
                logits.append(functional_call(self, fast, (batch.query[i],)))
        return torch.stack(logits)

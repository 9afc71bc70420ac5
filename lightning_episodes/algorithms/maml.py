"""Model-Agnostic Meta-Learning: adapt every parameter to each episode's support set by gradient descent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.func import functional_call
from typing_extensions import override

from lightning_episodes.algorithms.base import EpisodicModule, EvalBatchNorm, check_min
from lightning_episodes.algorithms.functional import adapt
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import LinearHead


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
        ways: classes per episode, the head's outputs (linked from ``data.ways`` by the CLI).
        adaptation_steps: inner SGD steps in training (default 5).
        adaptation_lr: inner step size (default 0.01).
        eval_adaptation_steps: inner steps at validation/test (default: ``adaptation_steps``).
        first_order: ignore second derivatives (first-order MAML).
        eval_batch_norm: ``episode`` (default; the only mode without running statistics).
        **kwargs: the backbone (whose ``track_running_stats`` defaults to False here), optimiser (default Adam,
            lr 1e-3, the paper's) and evaluation arguments of :class:`EpisodicModule`.

    Raises:
        ValueError: on a non-positive step count or learning rate, ``ways`` below 2, an unknown backbone, an image
            too small for it, ``eval_batch_norm="running"`` without running statistics, or
            ``compile_backbone`` (MAML's inner loop recompiles the backbone until torch.compile gives up).
    """

    requires_grad_in_evaluation: ClassVar[bool] = True
    supports_cuda_graphs: ClassVar[bool] = False
    #: whether the inner loop calls the backbone with fast weights (then ``compile_backbone`` is refused)
    adapts_backbone: ClassVar[bool] = True

    backbone_defaults: ClassVar[dict[str, Any]] = {"track_running_stats": False}

    def __init__(
        self,
        ways: int = 5,
        adaptation_steps: int = 5,
        adaptation_lr: float = 0.01,
        eval_adaptation_steps: int | None = None,
        first_order: bool = False,
        eval_batch_norm: EvalBatchNorm = "episode",
        **kwargs: Any,
    ) -> None:
        check_min("ways", ways, 2)
        check_min("adaptation_steps", adaptation_steps, 1)
        check_min("adaptation_lr", adaptation_lr, 0, inclusive=False)
        # resolved before the base saves the hyper-parameters: the checkpoint records the steps evaluation takes
        eval_adaptation_steps = adaptation_steps if eval_adaptation_steps is None else eval_adaptation_steps
        check_min("eval_adaptation_steps", eval_adaptation_steps, 1)
        super().__init__(eval_batch_norm=eval_batch_norm, **kwargs)
        if self.compile_backbone and self.adapts_backbone:
            raise ValueError(
                f"model.compile_backbone=true does not speed up {type(self).__name__}: every episode's support and "
                "query forwards with fast weights (other shapes, grad modes, tensors) recompile the backbone until "
                "torch.compile's recompile limit, after which it runs eager (ANIL, which adapts only its head, "
                "compiles)"
            )
        if eval_batch_norm == "running" and not self.backbone_options["track_running_stats"]:
            raise ValueError(
                "model.eval_batch_norm='running' needs running statistics, which MAML's backbone does not keep "
                "(set model.backbone_options.track_running_stats=true, or use eval_batch_norm='episode')"
            )
        self.head = LinearHead(self.feature_size(), ways)
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

    def _check_ways(self, ways: int | None, source: str) -> None:
        if ways is not None and ways != self.ways:
            raise ValueError(
                f"{type(self).__name__}'s head has model.ways={self.ways} outputs but {source}: "
                "training and evaluation ways must both equal model.ways"
            )

    @override
    def setup(self, stage: str) -> None:
        super().setup(stage)
        datamodule = getattr(self.trainer, "datamodule", None)
        for name in ("ways", "eval_ways"):
            ways = getattr(datamodule, name, None)
            self._check_ways(ways, f"data.{name}={ways}")

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        """Query logits under the parameters adapted to each episode's support set."""
        params = {name: p for name, p in self.named_parameters() if p.requires_grad}
        return self.adapted_logits(batch, self, params, batch.support, batch.query)

    def adapted_logits(
        self, batch: Episode, module: nn.Module, params: Mapping[str, Tensor], support: Tensor, query: Tensor
    ) -> Tensor:
        """Logits ``[B, Q, ways]`` of ``module`` on each episode's ``query`` inputs after :func:`adapt` fitted its
        ``params`` to the episode's ``support`` inputs (``[B, N, ...]``, images or features) and labels."""
        self._check_ways(batch.ways, f"the episode has {batch.ways} ways")
        steps, create_graph = self._inner_loop()
        logits = []
        for i in range(len(batch)):
            fast = adapt(module, params, support[i], batch.support_labels[i], steps, self.adaptation_lr, create_graph)
            with self._outer_grad():
                logits.append(functional_call(module, fast, (query[i],)))
        return torch.stack(logits)

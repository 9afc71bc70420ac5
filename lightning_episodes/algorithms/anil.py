"""Almost No Inner Loop: MAML that adapts only the head, on features computed once per episode."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor
from typing_extensions import override

from lightning_episodes.algorithms.maml import MAML
from lightning_episodes.data.episode import Episode


class ANIL(MAML):
    """ANIL (Raghu et al., ICLR 2020): MAML whose inner loop adapts only the linear head.

    The backbone embeds each episode's support and query sets once (separately, with per-episode
    batch-norm statistics), then a copy of the head takes ``adaptation_steps`` SGD steps on the support
    features. The backbone is never changed in the inner loop; it learns from the outer gradient of the
    query loss, which flows through both the query features and (second order) the adapted head.

    Args:
        adaptation_lr: inner step size on the head (default 0.1).
        **kwargs: the arguments of :class:`MAML`.

    Raises:
        ValueError: as :class:`MAML`.
    """

    adapts_backbone: ClassVar[bool] = False  # the backbone runs once per batch: it may be compiled

    def __init__(self, adaptation_lr: float = 0.1, **kwargs: Any) -> None:
        super().__init__(adaptation_lr=adaptation_lr, **kwargs)

    @override
    def query_logits(self, batch: Episode) -> Tensor:
        """Query logits under the head adapted to each episode's support features."""
        with self._outer_grad():
            support, query = self.backbone(batch.support), self.backbone(batch.query)  # once per episode
        return self.adapted_logits(batch, self.head, dict(self.head.named_parameters()), support, query)

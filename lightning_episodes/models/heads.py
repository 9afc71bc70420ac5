"""Classification heads appended to a backbone's features."""

from __future__ import annotations

from torch import nn

from lightning_episodes.models.base import check_positive


class LinearHead(nn.Linear):
    """A linear classifier over an episode's `ways` classes, as MAML and ANIL append to the backbone.

    Initialised as learn2learn's MAML classifiers: Xavier-uniform weights and zero biases. It maps
    features `[..., in_features]` to logits `[..., ways]`; its parameters are `weight` and `bias`, as
    `torch.nn.Linear`'s, so `torch.func.functional_call` can adapt them.

    References:
        Finn et al. 2017, "Model-Agnostic Meta-Learning for Fast Adaptation of Deep Networks", ICML.
        Raghu et al. 2020, "Rapid Learning or Feature Reuse? Towards Understanding the Effectiveness
            of MAML", ICLR.

    Args:
        in_features: Feature dimension of the backbone (see `feature_size`).
        ways: Number of classes per episode.

    Raises:
        ValueError: If `in_features` or `ways` is not positive.
    """

    def __init__(self, in_features: int, ways: int) -> None:
        check_positive(in_features=in_features, ways=ways)
        super().__init__(in_features, ways, bias=True)
        self.ways = ways

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight, gain=1.0)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

"""Label smoothing of the training loss (``model.label_smoothing``), against the formula written out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_episodes import FEAT, ProtoNet
from lightning_episodes.data import Episode
from tests.helpers import tiny_datamodule

#: one episode, two queries, three classes
LOGITS = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 1.0]]])
LABELS = torch.tensor([[0, 2]])


def _by_hand(epsilon: float) -> tuple[float, float]:
    """(plain, smoothed) mean cross-entropy: ``-(1 - e) log p_y - e / K sum_k log p_k``, averaged over the queries."""
    plain = smoothed = 0.0
    for row, label in zip(LOGITS[0].tolist(), LABELS[0].tolist(), strict=True):
        log_z = math.log(sum(math.exp(v) for v in row))
        log_p = [v - log_z for v in row]
        plain += -log_p[label] / 2
        smoothed += (-(1 - epsilon) * log_p[label] - epsilon / len(row) * sum(log_p)) / 2
    return plain, smoothed


class FixedLogits(ProtoNet):
    def query_logits(self, batch: Episode) -> torch.Tensor:
        return LOGITS


def test_the_training_loss_is_smoothed_and_the_difficulty_and_evaluation_are_not() -> None:
    model = FixedLogits(label_smoothing=0.2, image_size=16)
    batch = Episode.__new__(Episode)
    object.__setattr__(batch, "query_labels", LABELS)
    plain, smoothed = _by_hand(0.2)
    model.train()
    out = model.episode_losses(batch)
    assert out.losses.item() == pytest.approx(smoothed, rel=1e-6)
    assert out.difficulty.item() == pytest.approx(plain, rel=1e-6)  # the weighting's difficulty: plain
    model.eval()
    assert model.episode_losses(batch).losses.item() == pytest.approx(plain, rel=1e-6)
    assert smoothed > plain  # smoothing penalises the confident first query


def test_feat_smooths_its_main_cross_entropy_only_in_training() -> None:
    torch.manual_seed(0)
    data = tiny_datamodule(val_episodes=4, episodes_per_batch=2)
    data.setup("fit")
    batch = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)
    models = {e: FEAT(backbone="conv4", image_size=16, label_smoothing=e) for e in (0.0, 0.3)}
    models[0.3].load_state_dict(models[0.0].state_dict())
    torch.manual_seed(1)
    plain = models[0.0].train().episode_losses(batch)
    torch.manual_seed(1)
    smoothed = models[0.3].train().episode_losses(batch)
    torch.testing.assert_close(smoothed.difficulty, plain.difficulty)
    assert not torch.allclose(smoothed.losses, plain.losses)


@pytest.mark.parametrize("epsilon", [-0.1, 1.0, 1.5])
def test_a_value_outside_zero_to_one_is_refused(epsilon: float) -> None:
    with pytest.raises(ValueError, match=r"model.label_smoothing must be in \[0, 1\), got"):
        ProtoNet(label_smoothing=epsilon)

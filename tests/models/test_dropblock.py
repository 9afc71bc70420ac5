"""DropBlock: schedule, per-episode rescaling, evaluation, checkpointed counter."""

from __future__ import annotations

import pytest
import torch

from lightning_episodes.models import DropBlock, resnet12_wide
from lightning_episodes.models.dropblock import dropped_blocks


def test_keep_rate_ramps_linearly_then_stays() -> None:
    drop = DropBlock(drop_rate=0.1, block_size=3, schedule_steps=10)
    x = torch.ones(2, 4, 8, 8)
    rates = []
    for _ in range(15):
        drop(x)
        rates.append(drop.keep_rate())
    # The reference: keep = max(1 - rate * t / steps, 1 - rate), t counting this forward.
    expected = [max(1 - 0.1 * t / 10, 0.9) for t in range(1, 16)]
    assert rates == pytest.approx(expected)
    assert DropBlock(0.1, schedule_steps=0).keep_rate() == pytest.approx(0.9)


def test_drops_blocks_and_rescales_each_episode() -> None:
    torch.manual_seed(0)
    drop = DropBlock(drop_rate=0.3, block_size=3, schedule_steps=0)
    x = torch.ones(2 * 5, 6, 10, 10)
    out = drop(x, episodes=2)
    for episode in out.unflatten(0, (2, 5)):
        kept = episode[episode > 0]
        # One scale per episode, numel / kept, so that the episode keeps its mean.
        torch.testing.assert_close(kept, torch.full_like(kept, episode.numel() / kept.numel()))
        assert 0.4 < kept.numel() / episode.numel() < 0.95


def test_block_expansion() -> None:
    seeds = torch.zeros(1, 1, 4, 4)
    seeds[0, 0, 1, 2] = 1.0
    dropped = dropped_blocks(seeds, 3)  # a 6 × 6 map
    expected = torch.zeros(6, 6)
    expected[1:4, 2:5] = 1.0
    assert torch.equal(dropped[0, 0], expected)


def test_evaluation_is_identity_and_does_not_count() -> None:
    drop = DropBlock(drop_rate=0.5).eval()
    x = torch.randn(4, 3, 6, 6)
    assert drop(x) is x
    assert drop.steps == 0


def test_counter_is_checkpointed() -> None:
    model = resnet12_wide(in_channels=1, widths=(2, 2, 2, 2))
    images = torch.randn(2, 3, 1, 16, 16)
    model.train()(images)
    model(images)
    clone = resnet12_wide(in_channels=1, widths=(2, 2, 2, 2))
    clone.load_state_dict(model.state_dict())
    assert [block.dropblock.steps for block in clone.blocks[2:]] == [2, 2]
    assert clone.blocks[0].dropblock is None
    assert clone.blocks[0].drop_rate == pytest.approx(0.1)


def test_small_feature_maps_clip_the_block() -> None:
    drop = DropBlock(drop_rate=0.5, block_size=5, schedule_steps=0)
    assert drop(torch.ones(3, 2, 2, 2)).shape == (3, 2, 2, 2)


def test_errors() -> None:
    with pytest.raises(ValueError, match="drop_rate"):
        DropBlock(drop_rate=1.0)
    with pytest.raises(ValueError, match="block_size"):
        DropBlock(block_size=0)
    with pytest.raises(ValueError, match="schedule_steps"):
        DropBlock(schedule_steps=-1)

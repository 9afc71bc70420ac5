"""DifficultyTrackingCallback: fixed episodes re-scored during training, equal to re-scoring checkpoints."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.loading import load_episodic_module
from lightning_episodes.analysis import extreme_episodes, lines_cross
from lightning_episodes.callbacks.difficulty_tracking import DifficultyTrackingCallback
from lightning_episodes.evaluation.scoring import score_episodes
from tests.helpers import tiny_datamodule, tiny_trainer

EPISODES = 9


def _fit(
    tmp_path: Path, max_steps: int = 6, callbacks: list[Callback] | None = None, **options: Any
) -> tuple[pl.Trainer, ProtoNet, DifficultyTrackingCallback]:
    pl.seed_everything(0)
    tracker = DifficultyTrackingCallback(
        episodes=EPISODES, every_n_steps=2, output=tmp_path / "tracking.npz", **options
    )
    trainer = tiny_trainer(max_steps=max_steps, limit_val_batches=0, callbacks=[tracker, *(callbacks or [])])
    model = ProtoNet(image_size=16)
    trainer.fit(model, tiny_datamodule(eval_episodes_per_batch=4))
    return trainer, model, tracker


class Snapshots(Callback):
    """Copies of the model at each global step (step 0: before the first update)."""

    def __init__(self) -> None:
        self.models: dict[int, ProtoNet] = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.models[0] = copy.deepcopy(pl_module)  # type: ignore[assignment]

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.models[trainer.global_step] = copy.deepcopy(pl_module)  # type: ignore[assignment]


def test_every_score_equals_rescoring_that_steps_model(tmp_path: Path) -> None:
    snapshots = Snapshots()
    trainer, _, tracker = _fit(tmp_path, max_steps=5, callbacks=[snapshots])
    assert tracker.steps == [0, 2, 4, 5]  # step 0, every 2 steps and the last step
    assert tuple(tracker.scores.shape) == tuple(tracker.accuracies.shape) == (4, EPISODES)
    for t, step in enumerate(tracker.steps):
        table = score_episodes(snapshots.models[step], tiny_datamodule(), count=EPISODES, split="train")
        np.testing.assert_allclose(tracker.scores[t].numpy(), table.difficulty, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(tracker.accuracies[t].numpy(), table.accuracy)
    assert tracker.table().records == score_episodes(snapshots.models[5], tiny_datamodule(), EPISODES, "train").records
    assert trainer.callback_metrics["difficulty_tracking/mean"] == pytest.approx(float(tracker.scores[-1].mean()))


def test_the_last_scores_equal_rescoring_the_final_checkpoint(tmp_path: Path) -> None:
    trainer, _, tracker = _fit(tmp_path, max_steps=6)
    trainer.save_checkpoint(tmp_path / "final.ckpt")
    final = score_episodes(load_episodic_module(tmp_path / "final.ckpt"), tiny_datamodule(), EPISODES, "train")
    np.testing.assert_allclose(tracker.scores[-1].numpy(), final.difficulty, rtol=1e-6, atol=1e-7)
    assert tracker.steps[-1] == 6

    with np.load(tmp_path / "tracking.npz") as saved:
        np.testing.assert_array_equal(saved["steps"], [0, 2, 4, 6])
        np.testing.assert_array_equal(saved["scores"], tracker.scores.numpy())
        np.testing.assert_array_equal(saved["accuracies"], tracker.accuracies.numpy())
        np.testing.assert_array_equal(saved["episode_ids"], final.episode_ids)
        np.testing.assert_array_equal(saved["classes"], [r.classes for r in final])
        assert str(saved["split"]) == "train"
        assert int(saved["seed"]) == 0
        # the §4.2 analysis runs on the file as written
        easy, hard = extreme_episodes(saved["scores"][-1], count=3)
        report = lines_cross(saved["scores"], easy, hard, saved["steps"])
        assert report.margin <= report.margins[-1]
        assert report.margins[-1] > 0  # separated at the final step by construction


def test_tracking_changes_neither_training_nor_the_model(tmp_path: Path) -> None:
    _, tracked, _ = _fit(tmp_path)
    pl.seed_everything(0)
    plain = ProtoNet(image_size=16)
    tiny_trainer(max_steps=6, limit_val_batches=0).fit(plain, tiny_datamodule(eval_episodes_per_batch=4))
    assert tracked.training == plain.training
    for (name, a), b in zip(tracked.state_dict().items(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_state_round_trips_through_a_weights_only_checkpoint(tmp_path: Path) -> None:
    _, _, tracker = _fit(tmp_path, max_steps=4)
    buffer = io.BytesIO()
    torch.save({"callbacks": {tracker.state_key: tracker.state_dict()}}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["callbacks"]["DifficultyTrackingCallback[]"]
    restored = DifficultyTrackingCallback(episodes=EPISODES, every_n_steps=2)
    restored.load_state_dict(state)
    assert restored.steps == tracker.steps == [0, 2, 4]
    assert torch.equal(restored.scores, tracker.scores)
    assert torch.equal(restored.accuracies, tracker.accuracies)


def test_load_is_tolerant_of_other_sets_and_missing_keys() -> None:
    state = DifficultyTrackingCallback(episodes=3).state_dict()
    state.update(steps=[0], scores=torch.zeros(1, 3), accuracies=torch.zeros(1, 3))
    other = DifficultyTrackingCallback(episodes=4)
    with pytest.warns(UserWarning, match="another set of episodes"):
        other.load_state_dict(state)
    assert other.steps == []
    fresh = DifficultyTrackingCallback(episodes=3)
    fresh.load_state_dict({})
    assert fresh.steps == []
    assert tuple(fresh.scores.shape) == (0, 3)


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_scores(tmp_path: Path) -> None:
    _, _, uninterrupted = _fit(tmp_path / "a", max_steps=6)
    trainer, _, first = _fit(tmp_path / "b", max_steps=3)
    assert first.steps == [0, 2, 3]
    trainer.save_checkpoint(tmp_path / "b" / "step3.ckpt")
    pl.seed_everything(0)
    resumed = DifficultyTrackingCallback(episodes=EPISODES, every_n_steps=2, output=tmp_path / "b" / "tracking.npz")
    trainer = tiny_trainer(max_steps=6, limit_val_batches=0, callbacks=[resumed])
    trainer.fit(
        ProtoNet(image_size=16), tiny_datamodule(eval_episodes_per_batch=4), ckpt_path=tmp_path / "b" / "step3.ckpt"
    )
    assert resumed.steps == [0, 2, 3, 4, 6]  # the interruption adds its step, nothing else
    keep = [0, 1, 3, 4]
    np.testing.assert_allclose(resumed.scores[keep].numpy(), uninterrupted.scores.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_two_processes_gather_the_same_scores_as_one(tmp_path: Path) -> None:
    files = {}
    for devices in (1, 2):
        pl.seed_everything(0)
        output = tmp_path / f"world{devices}.npz"
        # 9 episodes over 2 ranks: 5 and 4, padded for the gather
        tracker = DifficultyTrackingCallback(episodes=EPISODES, every_n_steps=2, output=output, batch_size=2)
        trainer = tiny_trainer(
            devices=devices, max_steps=4, limit_val_batches=0, callbacks=[tracker], precision="64-true"
        )
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule())
        files[devices] = dict(np.load(output))
    one, two = files[1], files[2]
    np.testing.assert_array_equal(two["steps"], one["steps"])
    np.testing.assert_array_equal(two["episode_ids"], np.arange(EPISODES))
    np.testing.assert_array_equal(two["classes"], one["classes"])
    np.testing.assert_allclose(two["scores"], one["scores"], rtol=1e-9)
    np.testing.assert_array_equal(two["accuracies"], one["accuracies"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"episodes": 0}, "episodes"),
        ({"every_n_steps": 1.5}, "every_n_steps"),
        ({"batch_size": -1}, "batch_size"),
        ({"split": "support"}, "split"),
    ],
)
def test_invalid_arguments_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DifficultyTrackingCallback(**options)


def test_needs_an_episodic_module() -> None:
    with pytest.raises(TypeError, match="EpisodicModule"):
        DifficultyTrackingCallback().setup(tiny_trainer(), pl.LightningModule(), "fit")

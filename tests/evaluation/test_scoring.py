"""score_episodes: fixed episodes scored as at evaluation, joinable by id; a checkpoint's test split scored as
`lightning-episodes compare` does reproduces its test metric (the commands: tests/commands)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from lightning_episodes import Episode, EpisodeIdentity, EpisodicDataModule, EpisodicModule, ProtoNet
from lightning_episodes.algorithms import ANIL, MAML
from lightning_episodes.algorithms.loading import load_episodic_module
from lightning_episodes.evaluation import DifficultyTable, join_on_episode
from lightning_episodes.evaluation.scoring import checkpoint_datamodule, score_episodes, scoring_identities
from lightning_episodes.models import set_eval_batch_norm
from tests.helpers import tiny_datamodule, tiny_trainer

ALGORITHMS: dict[str, Callable[[], EpisodicModule]] = {
    "protonet": lambda: ProtoNet(image_size=16),
    "protonet-cosine-episode-bn": lambda: ProtoNet(image_size=16, distance="cosine", eval_batch_norm="episode"),
    "maml": lambda: MAML(image_size=16, ways=5, adaptation_steps=1, adaptation_lr=0.1),
    "anil": lambda: ANIL(image_size=16, ways=5, adaptation_steps=2),
}


def _warmed_up(name: str) -> EpisodicModule:
    """A model whose batch-norm buffers are no longer their initial values (so 'running' mode matters)."""
    torch.manual_seed(0)
    model = ALGORITHMS[name]()
    dm = tiny_datamodule()
    dm.setup("fit")
    batch = dm.assemble(next(iter(dm.train_dataloader())))
    model.train()
    with torch.no_grad() if not type(model).requires_grad_in_evaluation else torch.enable_grad():
        model.episode_losses(batch)
    return model


def _by_hand(model: EpisodicModule, table: DifficultyTable, dm: EpisodicDataModule) -> tuple[list, list]:
    """The reference: rebuild each episode from its identity alone and call episode_losses on it alone."""
    reference = copy.deepcopy(model).eval()
    set_eval_batch_norm(reference, reference.eval_batch_norm)
    losses, accuracies = [], []
    for record in table:
        identity = EpisodeIdentity(
            torch.tensor([record.classes]),
            torch.tensor([record.support_indices]),
            torch.tensor([record.query_indices]),
            torch.tensor([record.episode_id]),
        )
        episode = dm.assemble(identity)
        with torch.enable_grad() if type(reference).requires_grad_in_evaluation else torch.no_grad():
            out = reference.episode_losses(episode)
        losses.append(float(out.losses))
        accuracies.append(float(out.accuracies))
    return losses, accuracies


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_scores_equal_episode_losses_on_episodes_rebuilt_from_their_identity(name: str) -> None:
    model, dm = _warmed_up(name), tiny_datamodule()
    table = score_episodes(model, dm, count=12, batch_size=5)
    losses, accuracies = _by_hand(model, table, dm)
    np.testing.assert_allclose(table.difficulty, losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(table.accuracy, accuracies)
    assert table.episode_ids.tolist() == list(range(12))


def test_the_first_test_episodes_are_the_data_modules_test_set() -> None:
    dm = tiny_datamodule(test_episodes=8, eval_episodes_per_batch=3)
    table = score_episodes(ProtoNet(image_size=16), dm, count=20)
    batches = list(dm.evaluation_episodes("test", 8))
    assert all(isinstance(b, Episode) for b in batches)
    test_set = EpisodeIdentity.cat([b.identity for b in batches if isinstance(b, Episode)])
    assert [r.classes for r in table.records[:8]] == [tuple(c) for c in test_set.classes.tolist()]
    assert [r.query_indices for r in table.records[:8]] == [
        tuple(map(tuple, q)) for q in test_set.query_indices.tolist()
    ]


@pytest.mark.parametrize("name", ["protonet", "maml"])
def test_scoring_changes_no_state_of_the_model_and_restores_its_mode(name: str) -> None:
    model = _warmed_up(name)
    model.train()
    backbone = model.get_submodule("backbone")
    backbone.eval()  # a submodule the user froze stays in eval mode
    state = copy.deepcopy(model.state_dict())
    score_episodes(model, tiny_datamodule(), count=6)
    assert model.training
    assert not backbone.training
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("name", ["protonet", "protonet-cosine-episode-bn", "anil"])
def test_scores_do_not_depend_on_the_batch_size(name: str) -> None:
    model, dm = _warmed_up(name), tiny_datamodule()
    tables = [score_episodes(model, dm, count=10, batch_size=size) for size in (1, 3, 10)]
    for table in tables[1:]:
        assert table.records[0].same_episode(tables[0].records[0])
        np.testing.assert_allclose(table.difficulty, tables[0].difficulty, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(table.accuracy, tables[0].accuracy)


def test_a_larger_count_extends_the_same_set() -> None:
    model, dm = _warmed_up("protonet"), tiny_datamodule()
    small, large = score_episodes(model, dm, count=5), score_episodes(model, dm, count=11)
    assert small.records == large.records[:5]


def test_two_models_scored_with_the_same_data_seed_join_by_episode() -> None:
    torch.manual_seed(1)
    a, b = ProtoNet(image_size=16), ProtoNet(image_size=16, distance="cosine")
    # independent data modules with the same settings: the same episodes
    table_a = score_episodes(a, tiny_datamodule(), count=15)
    table_b = score_episodes(b, tiny_datamodule(), count=15)
    joined = join_on_episode(table_a, DifficultyTable(tuple(reversed(table_b.records))))
    assert len(joined) == 15
    np.testing.assert_array_equal(joined.difficulty_a, table_a.difficulty)
    np.testing.assert_array_equal(joined.difficulty_b, table_b.difficulty)
    assert not np.allclose(joined.difficulty_a, joined.difficulty_b)  # two models, two opinions
    other_seed = score_episodes(b, tiny_datamodule(seed=1), count=15)
    with pytest.raises(ValueError, match="different episode"):
        join_on_episode(table_a, other_seed)


@pytest.mark.parametrize(("split", "sizes"), [("train", (5, 2, 3)), ("validation", (3, 1, 2)), ("test", (3, 1, 2))])
def test_each_split_draws_its_own_classes_with_its_own_sizes(split: str, sizes: tuple[int, int, int]) -> None:
    dm = tiny_datamodule(eval_ways=3, eval_shots=1, eval_queries=2)
    table = score_episodes(ProtoNet(image_size=16), dm, count=6, split=split)  # type: ignore[arg-type]
    assert dm.data is not None
    classes = set(dm.data.splits[split])
    for record in table:
        assert set(record.classes) <= classes
        assert (len(record.classes), len(record.support_indices[0]), len(record.query_indices[0])) == sizes
    if split == "train":  # a fixed set, never the training stream's own episodes
        stream = tiny_datamodule()
        stream.setup("fit")
        step0 = next(iter(stream.train_dataloader()))
        assert not torch.equal(step0.identity.classes[0], torch.tensor(table.records[0].classes))


def test_identities_without_images_equal_the_scored_ones() -> None:
    dm = tiny_datamodule()
    table = score_episodes(ProtoNet(image_size=16), dm, count=7, split="train", batch_size=2)
    identity = scoring_identities(dm, "train", 7)
    assert [r.classes for r in table] == [tuple(c) for c in identity.classes.tolist()]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"split": "support"}, "split"), ({"count": 0}, "count"), ({"batch_size": 0}, "batch_size")],
)
def test_invalid_arguments_are_named(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        score_episodes(ProtoNet(image_size=16), tiny_datamodule(), **options)


def test_scoring_the_test_split_reproduces_the_test_metric(tmp_path: Path) -> None:
    pl.seed_everything(0)
    datamodule = tiny_datamodule(test_episodes=30, eval_episodes_per_batch=4)
    trainer = tiny_trainer(max_steps=3, limit_val_batches=0)
    trainer.fit(ProtoNet(image_size=16), datamodule)
    checkpoint = tmp_path / "protonet.ckpt"
    trainer.save_checkpoint(checkpoint)
    metrics = tiny_trainer().test(load_episodic_module(checkpoint), tiny_datamodule(test_episodes=30))[0]
    # scored as `compare` does: the checkpoint's data settings, the test split, as many episodes as the test
    scores = score_episodes(load_episodic_module(checkpoint), checkpoint_datamodule(checkpoint), 30, "test", 7)
    assert scores.accuracy.mean() == pytest.approx(metrics["test/acc"], abs=1e-6)
    assert 1.96 * scores.accuracy.std() / math.sqrt(30) == pytest.approx(metrics["test/acc_ci95"], abs=1e-6)
    assert 0 < scores.accuracy.mean() < 1


def test_a_task_sampler_runs_checkpoint_rebuilds_its_evaluation_data(tmp_path: Path) -> None:
    """A run with a task sampler records it as class path and init_args (a static DPP's with its reference
    checkpoint, which another machine may not have); evaluation episodes never use one, so it is left out."""
    from lightning_episodes.data import HardTaskMining

    data = EpisodicDataModule(dataset="glyphs", ways=5, shots=1, queries=2, task_sampler=HardTaskMining())
    saved = {**dict(data.hparams), "_class_path": "lightning_episodes.data.EpisodicDataModule"}
    assert saved["task_sampler"]["class_path"].endswith("HardTaskMining")
    torch.save({"state_dict": {}, "datamodule_hyper_parameters": saved}, tmp_path / "last.ckpt")
    rebuilt = checkpoint_datamodule(tmp_path / "last.ckpt")
    assert rebuilt.task_sampler is None
    assert (rebuilt.hparams.ways, rebuilt.hparams.shots, rebuilt.hparams.queries) == (5, 1, 2)

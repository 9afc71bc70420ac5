"""EpisodicDataModule: configuration errors, loaders, epochs and device-independent batches."""

from __future__ import annotations

import pytest
import torch

from lightning_episodes import Episode, EpisodicDataModule
from tests.helpers import tiny_datamodule


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ways": 0}, r"data.ways must be >= 2, got 0"),
        ({"ways": 1}, r"data.ways must be >= 2, got 1"),
        ({"eval_ways": 1}, r"data.eval_ways must be >= 2, got 1"),
        ({"queries": -2}, r"data.queries must be >= 1"),
        ({"episodes_per_batch": 0}, r"data.episodes_per_batch must be >= 1"),
        ({"val_episodes": 0}, r"data.val_episodes must be >= 1"),
        ({"eval_shots": 0}, r"data.eval_shots must be >= 1"),
        ({"num_workers": -1}, r"data.num_workers must be >= 0"),
        ({"train_episodes_per_epoch": 2}, r"train_episodes_per_epoch=2 must be >= data.episodes_per_batch=4"),
        ({"train_images_per_class": 0}, r"data.train_images_per_class must be >= 1, got 0"),
        (
            {"train_images_per_class": 4},
            r"data.train_images_per_class=4 must be >= data.shots \+ data.queries = 2 \+ 3 = 5",
        ),
    ],
)
def test_bad_sizes_fail_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tiny_datamodule(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ways": 13}, r"data.ways=13 exceeds the 12 classes of this split .*'train'"),
        ({"eval_ways": 7}, r"data.eval_ways=7 exceeds the 6 classes of this split .*'validation'"),
        ({"shots": 8, "queries": 3}, r"data.shots \+ queries = 11 exceeds the smallest class"),
        ({"eval_queries": 9}, r"data.eval_shots \+ eval_queries = 11 exceeds the smallest class"),
        (
            {"train_images_per_class": 11},
            r"data.train_images_per_class=11 exceeds the smallest class of this split \(10 samples\) .*'train'",
        ),
        ({"dataset": "imagenet-22k"}, r"data.dataset='imagenet-22k' is unknown; available: .*tiny"),
    ],
)
def test_impossible_requests_fail_at_setup(kwargs: dict, match: str) -> None:
    def prepare_and_set_up() -> None:
        dm = tiny_datamodule(**kwargs)
        dm.prepare_data()
        dm.setup("fit")

    with pytest.raises(ValueError, match=match):
        prepare_and_set_up()


def test_loaders_yield_normalised_episodes_of_the_configured_shapes() -> None:
    dm = tiny_datamodule(eval_ways=3, eval_shots=1, eval_queries=2, eval_episodes_per_batch=7)
    dm.setup("fit")
    train = dm.assemble(next(iter(dm.train_dataloader())))
    assert train.support.shape == (4, 10, 1, 16, 16)
    assert train.query.shape == (4, 15, 1, 16, 16)
    assert train.support.dtype == torch.float32
    val = [dm.assemble(b) for b in dm.val_dataloader()]
    assert [len(b) for b in val] == [7, 7, 7, 7, 2]
    assert val[0].support.shape == (7, 3, 1, 16, 16)
    assert val[0].query.shape == (7, 6, 1, 16, 16)
    # the fixed set is the same on every call and for another data module with the same seed
    again = EpisodicDataModule(**{**dm.hparams, "seed": 0})
    again.setup("validate")
    first = next(iter(again.val_dataloader()))
    assert torch.equal(first.identity.query_indices, val[0].identity.query_indices.cpu())


def test_test_split_can_be_switched_for_analyses() -> None:
    dm = tiny_datamodule(test_split="validation", eval_ways=3)
    dm.setup("test")
    batch = next(iter(dm.test_dataloader()))
    assert set(batch.identity.classes.flatten().tolist()) <= set(dm.data.splits["validation"])
    # still a distinct stream from the validation episodes
    val = next(iter(dm.val_dataloader()))
    assert not torch.equal(val.identity.query_indices, batch.identity.query_indices)


def test_augmentation_is_off_by_default_and_reproducible_when_on() -> None:
    plain = tiny_datamodule()
    plain.setup("fit")
    batch = next(iter(plain.train_dataloader()))
    assert torch.equal(plain.assemble(batch, augment=True).support, plain.assemble(batch).support)
    aug = tiny_datamodule(augment=True)
    aug.setup("fit")
    a = aug.assemble(batch, augment=True)
    b = aug.assemble(batch, augment=True)
    assert torch.equal(a.support, b.support)
    assert not torch.equal(a.support, aug.assemble(batch).support)


def test_train_seed_changes_the_training_episodes_only() -> None:
    def episodes(**kwargs: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dm = tiny_datamodule(**kwargs)
        dm.setup("fit")
        dm.setup("test")
        first = [
            next(iter(loader())).identity.query_indices
            for loader in (dm.train_dataloader, dm.val_dataloader, dm.test_dataloader)
        ]
        return first[0], first[1], first[2]

    default, explicit, other = episodes(), episodes(train_seed=0), episodes(train_seed=1)
    # the default training stream is the data seed's
    assert all(torch.equal(a, b) for a, b in zip(default, explicit, strict=True))
    # another training seed: other training episodes, the same fixed validation and test episodes
    assert not torch.equal(default[0], other[0])
    assert torch.equal(default[1], other[1])
    assert torch.equal(default[2], other[2])
    # the data seed still moves everything
    moved = episodes(seed=1, train_seed=0)
    assert torch.equal(moved[0], default[0])
    assert not torch.equal(moved[1], default[1])
    assert not torch.equal(moved[2], default[2])


def test_episodes_from_tensors_get_the_data_modules_labels_and_bad_shapes_are_named() -> None:
    dm = tiny_datamodule()
    dm.setup("fit")
    real = dm.assemble(next(iter(dm.train_dataloader())))
    built = Episode.from_tensors(real.support, real.query, real.ways)
    assert torch.equal(built.support_labels, real.support_labels)
    assert torch.equal(built.query_labels, real.query_labels)
    assert (built.ways, built.shots, built.queries) == (real.ways, real.shots, real.queries)
    with pytest.raises(ValueError, match="multiple of ways=4"):
        Episode.from_tensors(real.support, real.query, 4)
    with pytest.raises(ValueError, match="same number of episodes"):
        Episode.from_tensors(real.support, real.query[:1], real.ways)

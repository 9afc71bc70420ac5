"""A scarce training split (``train_images_per_class``): N images of every training class, chosen by the data seed
alone, nested across N, reaching every training episode and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pytorch_lightning.callbacks import Callback

from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.cli import main
from lightning_episodes.data.sampler import keep_per_class
from lightning_episodes.testing import decode_rows, tiny_dataset
from tests.callbacks.helpers import killed_and_resumed
from tests.helpers import assert_same_evaluation_episodes, tiny_datamodule, tiny_trainer

STEPS = 60  # 240 episodes of 5 of the 12 training classes: every class ~100 times, so every kept image is drawn


def drawn_rows(dm: EpisodicDataModule, steps: int = STEPS) -> dict[int, set[int]]:
    """Training class -> the dataset rows its support and query images came from in the first ``steps`` steps (read
    from the assembled images' pixels, which encode their row)."""
    assert dm.assembler is not None
    drawn: dict[int, set[int]] = {}
    for step in range(steps):
        episode = dm.assembler.gather(dm.training_identities(step, range(dm.episodes_per_batch)))  # uint8 images
        rows = decode_rows(torch.cat([episode.support, episode.query], 1))
        labels = torch.cat([episode.support_labels, episode.query_labels], 1)
        classes = episode.identity.classes.gather(1, labels)
        for row, cls in zip(rows.flatten().tolist(), classes.flatten().tolist(), strict=True):
            drawn.setdefault(cls, set()).add(row)
    return drawn


def set_up(**kwargs: int) -> EpisodicDataModule:
    dm = tiny_datamodule(**kwargs)
    dm.setup("fit")
    dm.setup("test")
    return dm


def test_training_draws_exactly_n_images_of_every_training_class() -> None:
    dm = set_up(train_images_per_class=6)
    labels = tiny_dataset().labels
    drawn = drawn_rows(dm)
    assert dm.data is not None
    assert sorted(drawn) == dm.data.splits["train"], "every training class, no other"
    for cls, rows in drawn.items():
        assert len(rows) == 6, f"class {cls}: {sorted(rows)}"
        assert set(labels[sorted(rows)].tolist()) == {cls}
    everything = drawn_rows(set_up())
    assert {len(rows) for rows in everything.values()} == {10}, "without the option, every image (10 a class)"


def test_keeping_every_image_is_the_default_bit_for_bit() -> None:
    full, default = set_up(train_images_per_class=10), set_up()  # the tiny classes have 10 images
    for step in (0, 7):
        a, b = (dm.training_identities(step, range(4)) for dm in (full, default))
        assert torch.equal(a.classes, b.classes)
        assert torch.equal(a.support_indices, b.support_indices)
        assert torch.equal(a.query_indices, b.query_indices)


def test_validation_and_test_episodes_are_untouched() -> None:
    scarce, default = set_up(train_images_per_class=5), set_up()
    assert_same_evaluation_episodes(scarce, default)


def test_the_images_depend_on_the_data_seed_alone() -> None:
    chosen = drawn_rows(set_up(train_images_per_class=6))
    for train_seed in (1, 17):
        # another training stream draws other episodes, from the same images
        dm = set_up(train_images_per_class=6, train_seed=train_seed)
        assert drawn_rows(dm) == chosen
    moved = drawn_rows(set_up(train_images_per_class=6, seed=1, train_seed=0))
    assert moved != chosen, "the data seed chooses the images"


def test_smaller_subsets_are_nested_in_larger_ones() -> None:
    subsets = [drawn_rows(set_up(train_images_per_class=n)) for n in (5, 7, 9)]
    for smaller, larger in zip(subsets, subsets[1:], strict=False):
        assert all(smaller[cls] < larger[cls] for cls in smaller)


def test_dataloader_workers_draw_from_the_same_images() -> None:
    """Workers receive the data module's sampler with its subset: the batches are those of the main process."""
    main_process, workers = (set_up(train_images_per_class=6, num_workers=n) for n in (0, 2))
    chosen = {row for rows in drawn_rows(main_process).values() for row in rows}
    for a, b, _ in zip(main_process.train_dataloader(), workers.train_dataloader(), range(4), strict=False):
        assert torch.equal(decode_rows(a.query), decode_rows(b.query))
        assert set(decode_rows(torch.cat([b.support, b.query], 1)).flatten().tolist()) <= chosen


def test_a_restarted_module_continues_the_same_stream() -> None:
    """Nothing about the subset is checkpointed: a new process (a resumed run) rebuilds the same training stream."""
    first, restarted = set_up(train_images_per_class=6), set_up(train_images_per_class=6)
    for step in (0, 5, 6):
        a, b = (dm.training_identities(step, range(4)) for dm in (first, restarted))
        assert torch.equal(a.query_indices, b.query_indices)


class Batches(Callback):
    """The query rows of every training step."""

    def __init__(self) -> None:
        self.rows: dict[int, torch.Tensor] = {}

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx) -> None:  # type: ignore[no-untyped-def]
        self.rows[trainer.global_step] = batch.identity.query_indices.cpu()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
def test_a_killed_and_resumed_run_continues_exactly(tmp_path: Path) -> None:
    straight, resumed, expected, state = killed_and_resumed(
        tmp_path, lambda: tiny_datamodule(train_images_per_class=6), Batches
    )
    assert sorted(resumed.rows) == [3, 4, 5]
    assert all(torch.equal(rows, straight.rows[step]) for step, rows in resumed.rows.items())
    assert all(torch.equal(value, expected[key]) for key, value in state.items())


@pytest.mark.slow
def test_two_processes_train_on_the_same_images() -> None:
    """Under 2-process DDP each rank sets its data module up on its own: both keep the same images, and the episodes
    each rank trains on are drawn from them."""
    chosen = {row for rows in drawn_rows(set_up(train_images_per_class=6)).values() for row in rows}

    class SameImagesOnEveryRank(Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx) -> None:  # type: ignore[no-untyped-def]
            table = trainer.datamodule.samplers["train"].table  # type: ignore[attr-defined]
            gathered = trainer.strategy.all_gather(table)
            assert torch.equal(gathered[0], gathered[1]), "the ranks keep different images"
            rows = torch.cat([batch.identity.support_indices, batch.identity.query_indices], 2)
            assert set(rows.flatten().tolist()) <= chosen
            pl_module.log("rank_checked", 1.0, sync_dist=True, reduce_fx="sum")

    dm = tiny_datamodule(train_images_per_class=6)
    trainer = tiny_trainer(devices=2, max_steps=2, callbacks=[SameImagesOnEveryRank()], limit_val_batches=0)
    trainer.fit(ProtoNet(backbone_options={"hidden": 8}, image_size=16), datamodule=dm)
    assert trainer.callback_metrics["rank_checked"] == 2, "both ranks ran the checks"


def test_too_few_images_are_refused_before_anything_is_loaded(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^data.train_images_per_class=19 must be >= data.shots \+ data.queries"):
        EpisodicDataModule(dataset="glyphs", root=str(tmp_path), shots=5, queries=15, train_images_per_class=19)
    assert not any(tmp_path.iterdir()), "nothing rendered or cached"


def test_more_images_than_a_class_has_are_refused_at_setup_before_training() -> None:
    dm = tiny_datamodule(train_images_per_class=11)
    trainer = tiny_trainer()
    with pytest.raises(ValueError, match=r"train_images_per_class=11 exceeds the smallest class .*\(10 samples\)"):
        trainer.fit(ProtoNet(backbone_options={"hidden": 8}, image_size=16), datamodule=dm)
    assert trainer.global_step == 0


def test_the_command_line_takes_the_option() -> None:
    args = ["--model", "ProtoNet", "--seed_everything", "0", "--data.dataset", "tiny", "--data.image_size", "16"]
    args += ["--data.shots", "2", "--data.queries", "3"]
    cli = main([*args, "--data.train_images_per_class", "7", "--trainer.logger", "false"], run=False)
    assert cli.datamodule.train_images_per_class == 7
    assert main([*args, "--trainer.logger", "false"], run=False).datamodule.train_images_per_class is None


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    data=st.data(),
    seed=st.integers(0, 2**62),
)
def test_any_count_keeps_that_many_rows_of_each_class_nested(sizes: list[int], data: st.DataObject, seed: int) -> None:
    labels = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    labels = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed % 1000))]  # scattered
    classes = data.draw(st.lists(st.sampled_from(range(len(sizes))), min_size=1, unique=True))
    count = data.draw(st.integers(1, min(sizes[c] for c in classes)))
    kept = keep_per_class(labels, classes, count, seed)
    assert kept.tolist() == sorted(set(kept.tolist())), "distinct rows, in ascending order"
    assert torch.equal(torch.bincount(labels[kept], minlength=len(sizes))[classes], torch.full((len(classes),), count))
    assert set(labels[kept].tolist()) == set(classes), "rows of the classes asked for only"
    if count > 1:
        assert set(keep_per_class(labels, classes, count - 1, seed).tolist()) < set(kept.tolist()), "nested"
    # a class's images do not depend on which other classes are kept
    alone = keep_per_class(labels, classes[:1], count, seed)
    assert torch.equal(alone, kept[labels[kept] == classes[0]])
    with pytest.raises(ValueError, match=r"exceeds the smallest class of this split"):
        keep_per_class(labels, classes, min(sizes[c] for c in classes) + 1, seed)

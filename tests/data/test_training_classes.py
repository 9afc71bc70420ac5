"""A subset of the training classes (``train_classes``): a count or a fraction of the training split's classes, the
same for every seed, worker and process count, nested across sizes, reaching every training episode and nothing else."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import Callback

from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.analysis.protocols import protocol_of
from lightning_episodes.cli import main
from lightning_episodes.data import AdaptiveTaskSampler, NoDiversityTasksPerBatch, TaskInterpolation, keep_classes
from lightning_episodes.data.sampler import CLASS_SUBSET_SEED, mix_seed
from lightning_episodes.testing import decode_rows
from tests.data.test_scarce_training import drawn_rows
from tests.helpers import assert_same_evaluation_episodes, tiny_datamodule, tiny_trainer

#: the tiny dataset's training split is classes 0-11; these six come first in the fixed order of the class ids
KEPT_SIX = [2, 3, 5, 8, 9, 11]


def set_up(**kwargs: object) -> EpisodicDataModule:
    dm = tiny_datamodule(**kwargs)
    dm.setup("fit")
    dm.setup("test")
    return dm


def kept(dm: EpisodicDataModule) -> list[int]:
    return dm.samplers["train"].classes.tolist()


def test_a_small_case_by_hand() -> None:
    """The rule of the docstring, computed here: the classes of the smallest keys ``mix_seed(0, 8, class id)``."""
    keys = {c: mix_seed(CLASS_SUBSET_SEED, 8, c) for c in range(12)}
    assert sorted(sorted(range(12), key=keys.__getitem__)[:6]) == KEPT_SIX
    assert keep_classes(range(12), 6) == KEPT_SIX
    assert keep_classes([11, 2, 9, 0, 3, 8, 5], 6) == [11, 2, 9, 3, 8, 5], "in the order given, the same classes"
    # a count and the fraction that gives it (floor(0.5 * 12) = 6; floor(0.54 * 12) = 6) keep the same classes
    for value in (6, 6.0, 0.5, 0.54):
        assert kept(set_up(train_classes=value)) == KEPT_SIX, value
    assert set(drawn_rows(set_up(train_classes=6))) == set(KEPT_SIX), "training episodes show those classes alone"


def test_the_classes_depend_on_no_seed() -> None:
    for seed, train_seed in ((0, 0), (0, 17), (1, 0), (5, 3)):
        dm = set_up(train_classes=6, seed=seed, train_seed=train_seed)
        assert kept(dm) == KEPT_SIX
        assert set(drawn_rows(dm, steps=20)) <= set(KEPT_SIX)


def test_smaller_subsets_are_nested_and_every_class_is_the_default_bit_for_bit() -> None:
    subsets = [set(keep_classes(range(12), count)) for count in range(13)]
    assert all(smaller < larger for smaller, larger in zip(subsets, subsets[1:], strict=False))
    default = set_up()
    for every in (set_up(train_classes=1.0), set_up(train_classes=12)):
        assert kept(every) == list(range(12))
        for step in (0, 7):
            a, b = (dm.training_identities(step, range(4)) for dm in (every, default))
            assert torch.equal(a.classes, b.classes)
            assert torch.equal(a.query_indices, b.query_indices)


def test_validation_and_test_episodes_are_untouched() -> None:
    subset, default = set_up(train_classes=5), set_up()
    assert_same_evaluation_episodes(subset, default)


def test_dataloader_workers_draw_the_same_classes() -> None:
    main_process, workers = (set_up(train_classes=6, num_workers=n) for n in (0, 2))
    for a, b, _ in zip(main_process.train_dataloader(), workers.train_dataloader(), range(4), strict=False):
        assert torch.equal(a.identity.classes, b.identity.classes)
        assert torch.equal(decode_rows(a.query), decode_rows(b.query))
        assert set(b.identity.classes.flatten().tolist()) <= set(KEPT_SIX)


def test_composes_with_a_scarce_split_the_same_images_of_each_kept_class() -> None:
    both, images_only = set_up(train_classes=6, train_images_per_class=6), set_up(train_images_per_class=6)
    drawn, reference = drawn_rows(both), drawn_rows(images_only)
    assert sorted(drawn) == KEPT_SIX
    assert all(rows == reference[cls] and len(rows) == 6 for cls, rows in drawn.items())


def test_composes_with_task_samplers_which_choose_among_the_kept_classes() -> None:
    dm = set_up(train_classes=6, task_sampler=NoDiversityTasksPerBatch())
    classes = torch.cat([dm.training_identities(step, range(4)).classes for step in range(10)])
    assert set(classes.flatten().tolist()) <= set(KEPT_SIX)
    adaptive = AdaptiveTaskSampler()
    tiny_datamodule(train_classes=0.5, task_sampler=adaptive).setup("test")  # a fit would want its feedback callback
    assert adaptive.log_potential.shape == (6, 6), "the sampler is bound to the kept classes"


def test_composes_with_task_interpolation() -> None:
    dm = set_up(train_classes=6, task_interpolation=TaskInterpolation(probability=1.0))
    episode = dm.training_episodes(3, range(4), torch.device("cpu"))
    assert set(episode.identity.classes.flatten().tolist()) <= set(KEPT_SIX)
    plain = set_up(train_classes=6).training_episodes(3, range(4), torch.device("cpu"))
    assert torch.equal(episode.identity.classes, plain.identity.classes)
    assert not torch.equal(episode.support, plain.support), "mixed"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (-3, "-3"), (0.0, "0"), (-0.5, "-0.5"), (1.5, "1.5"), (12.5, "12.5"), (4, "4"), (4.0, "4"),
     (float("nan"), "nan"), (float("inf"), "inf"), (True, "True")],
)  # fmt: skip
def test_a_bad_value_is_refused_in_one_line_before_anything_is_loaded(tmp_path: Path, value: float, shown: str) -> None:
    message = (
        f"data.train_classes={shown} must be a fraction of the training classes in (0, 1] or a whole number of them "
        ">= data.ways = 5"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        EpisodicDataModule(dataset="glyphs", root=str(tmp_path), train_classes=value)
    assert not any(tmp_path.iterdir()), "nothing rendered or cached"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (13, "data.train_classes=13 exceeds the 12 classes of the training split (dataset 'tiny')"),
        (0.4, "data.train_classes=0.4 keeps 4 of the 12 classes of the training split (dataset 'tiny'), fewer than "
         "data.ways = 5"),
        (0.05, "data.train_classes=0.05 keeps 0 of the 12 classes of the training split (dataset 'tiny'), fewer than "
         "data.ways = 5"),
    ],
)  # fmt: skip
def test_too_many_or_too_few_classes_are_refused_at_setup_before_training(value: float, message: str) -> None:
    trainer, model = tiny_trainer(), ProtoNet(backbone_options={"hidden": 8}, image_size=16)
    allowed = "allowed are a count in 5..12 or a fraction in [5/12, 1]"
    with pytest.raises(ValueError, match=f"^{re.escape(f'{message}: {allowed}')}$"):
        trainer.fit(model, datamodule=tiny_datamodule(train_classes=value))
    assert trainer.global_step == 0
    assert kept(set_up(train_classes=5 / 12)) == keep_classes(range(12), 5), "the smallest fraction allowed"


def test_the_record_carries_a_count_as_an_int_and_a_fraction_as_a_float() -> None:
    assert tiny_datamodule(train_classes=6.0).hparams["train_classes"] == 6
    assert isinstance(tiny_datamodule(train_classes=6.0).hparams["train_classes"], int)
    assert tiny_datamodule(train_classes=1).hparams["train_classes"] == 1.0
    assert tiny_datamodule().hparams["train_classes"] is None


def test_the_command_line_takes_a_count_or_a_fraction() -> None:
    args = ["--model", "ProtoNet", "--seed_everything", "0", "--data.dataset", "tiny", "--data.image_size", "16"]
    args += ["--data.shots", "2", "--data.queries", "3", "--trainer.logger", "false"]
    count = main([*args, "--data.train_classes", "6"], run=False).datamodule
    assert count.train_classes == 6
    assert isinstance(count.train_classes, int)
    assert main([*args, "--data.train_classes", "0.2"], run=False).datamodule.train_classes == 0.2
    assert main(args, run=False).datamodule.train_classes is None


@pytest.mark.slow
def test_two_processes_train_on_the_same_classes() -> None:
    """Under 2-process DDP each rank sets its data module up on its own: both keep the same classes, and every
    episode of each rank is drawn from them."""

    class SameClassesOnEveryRank(Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx) -> None:  # type: ignore[no-untyped-def]
            classes = trainer.datamodule.samplers["train"].classes  # type: ignore[attr-defined]
            gathered = trainer.strategy.all_gather(classes)
            assert torch.equal(gathered[0], gathered[1]), "the ranks keep different classes"
            assert classes.tolist() == KEPT_SIX
            assert set(batch.identity.classes.flatten().tolist()) <= set(KEPT_SIX)
            pl_module.log("rank_checked", 1.0, sync_dist=True, reduce_fx="sum")

    dm = tiny_datamodule(train_classes=6, train_images_per_class=6)
    trainer = tiny_trainer(devices=2, max_steps=2, callbacks=[SameClassesOnEveryRank()], limit_val_batches=0)
    trainer.fit(ProtoNet(backbone_options={"hidden": 8}, image_size=16), datamodule=dm)
    assert trainer.callback_metrics["rank_checked"] == 2, "both ranks ran the checks"


@pytest.mark.slow
@pytest.mark.parametrize(("value", "recorded"), [("0.5", 0.5), ("6", 6)])
def test_a_fit_through_the_command_line_records_the_option(tmp_path: Path, value: str, recorded: float) -> None:
    args = ["--model", "ProtoNet", "--seed_everything", "0", "--data.dataset", "tiny", "--data.image_size", "16"]
    args += ["--data.shots", "2", "--data.queries", "3", "--data.episodes_per_batch", "4", "--data.val_episodes", "8"]
    args += ["--data.test_episodes", "8", "--model.backbone_options", "{hidden: 8}", "--trainer.max_steps", "3"]
    args += ["--trainer.val_check_interval", "3", "--trainer.check_val_every_n_epoch", "null"]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)]
    args += ["--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", str(tmp_path)]
    args += ["--test_after_fit", "true", "--data.train_classes", value]
    cli = main(["fit", *args])
    assert cli.trainer.global_step == 3
    assert kept(cli.datamodule) == KEPT_SIX
    record = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert record["data"]["train_classes"] == recorded
    config = yaml.safe_load(next(tmp_path.rglob("config.yaml")).read_text())
    assert ("data.train_classes", value) in protocol_of(config, record)
    assert ("data.train_classes", value) in protocol_of(None, record)

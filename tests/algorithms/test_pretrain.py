"""Classification pre-training on the training classes, and FEAT starting from its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

from lightning_episodes.algorithms import FEAT, Pretrain
from lightning_episodes.testing.algorithms import build_cli
from tests.algorithms.builders import Flatten, feature_episodes, random_episodes
from tests.helpers import tiny_datamodule, tiny_trainer


def pretraining_datamodule() -> pl.LightningDataModule:
    # a training "episode" of all 12 training classes × 2 images is a class-balanced batch of 24
    sizes = {"ways": 12, "shots": 1, "queries": 1, "eval_ways": 5, "eval_shots": 1, "eval_queries": 3}
    return tiny_datamodule(**sizes, episodes_per_batch=2, val_episodes=8, test_episodes=8)


def test_training_classifies_every_image_among_the_training_classes() -> None:
    torch.manual_seed(0)
    model = Pretrain(backbone="conv4", image_size=16, num_classes=3).train()
    model.backbone = Flatten()
    model.classifier = nn.Linear(4, 3)
    model.class_rows = torch.tensor([-1, -1, 1, -1, -1, -1, -1, 0, -1, 2])  # global classes 7, 2, 9
    batch = feature_episodes(torch.randn(1, 2, 4), torch.randn(1, 4, 4), ways=2)
    batch.identity.classes = torch.tensor([[9, 7]])  # label 0 is class 9 (row 2), label 1 is class 7 (row 0)
    out = model.episode_losses(batch)
    images = torch.cat([batch.support, batch.query], 1).flatten(2)[0]
    rows = torch.tensor([2, 0, 2, 2, 0, 0])  # support 0, 1; queries 0, 0, 1, 1
    assert out.losses.item() == pytest.approx(F.cross_entropy(model.classifier(images), rows).item(), rel=1e-6)


def test_evaluation_scores_the_backbone_by_nearest_prototype() -> None:
    model = Pretrain(backbone="conv4", image_size=16, num_classes=3).eval()
    model.backbone = Flatten()
    # prototypes (0, 0) and (2, 0); queries (0.5, 0) of class 0 and (1.5, 1) of class 1 (as ProtoNet's test)
    batch = feature_episodes(
        torch.tensor([[[-1.0, 0], [1, 0], [2, 1], [2, -1]]]), torch.tensor([[[0.5, 0], [1.5, 1]]]), 2
    )
    out = model.episode_losses(batch)
    assert out.losses.item() == pytest.approx(torch.log1p(torch.exp(torch.tensor(-2.0))).item(), rel=1e-6)


def test_fit_infers_the_classes_saves_them_and_feat_starts_from_the_backbone(tmp_path: Path) -> None:
    pl.seed_everything(0)
    model = Pretrain(backbone="conv4", image_size=16)
    dm = pretraining_datamodule()
    trainer = tiny_trainer(max_steps=4, val_check_interval=4)
    trainer.fit(model, dm)
    assert model.classifier is not None
    assert model.classifier.out_features == 12
    assert trainer.callback_metrics["val/episodes"] == 8
    result = trainer.test(model, dm, verbose=False)[0]
    trainer.save_checkpoint(tmp_path / "pretrain.ckpt")
    reloaded = Pretrain.load_from_checkpoint(tmp_path / "pretrain.ckpt")
    assert reloaded.hparams["num_classes"] == 12
    checkpoint = torch.load(tmp_path / "pretrain.ckpt", weights_only=True)
    checkpoint["lightning_episodes"]["dataset"] = "tiny"
    reloaded.on_load_checkpoint(checkpoint)
    assert reloaded.trained_on == {"dataset": "tiny"}  # the base class's record is read too (reports use it)
    assert tiny_trainer().test(reloaded, dm, verbose=False)[0]["test/acc"] == pytest.approx(result["test/acc"])
    feat = FEAT(backbone="conv4", image_size=16, backbone_checkpoint=str(tmp_path / "pretrain.ckpt"))
    feat.load_backbone(tmp_path / "pretrain.ckpt")
    for key, value in model.backbone.state_dict().items():
        assert torch.equal(feat.backbone.state_dict()[key], value), key


def test_the_classifier_learns_only_the_training_classes_kept() -> None:
    """With ``data.train_classes`` the training episodes draw from some classes: the classifier has a row for each of
    those (and no unused ones), each kept class its own row."""
    from lightning_episodes.data import keep_classes

    pl.seed_everything(0)
    model = Pretrain(backbone="conv4", image_size=16)
    sizes = {"ways": 6, "shots": 1, "queries": 1, "eval_ways": 5, "eval_shots": 1, "eval_queries": 3}
    dm = tiny_datamodule(**sizes, episodes_per_batch=2, val_episodes=8, test_episodes=8, train_classes=6)
    tiny_trainer(max_steps=2, val_check_interval=2).fit(model, dm)
    kept = keep_classes(dm.data.splits["train"], 6)
    assert model.classifier is not None
    assert model.classifier.out_features == 6
    assert sorted(model.class_rows[torch.as_tensor(kept)].tolist()) == list(range(6))


def test_wrong_number_of_classes_or_no_data_fail_clearly() -> None:
    with pytest.raises(ValueError, match=r"model.num_classes=5 but the training episodes draw from 12 classes"):
        tiny_trainer(max_steps=1).fit(
            Pretrain(backbone="conv4", image_size=16, num_classes=5), pretraining_datamodule()
        )
    model = Pretrain(backbone="conv4", image_size=16, num_classes=3).train()
    with pytest.raises(RuntimeError, match="fit it with a Trainer"):
        model.episode_losses(random_episodes(dtype=torch.float32))


def test_yaml_config_follows_feats_pretraining_protocol() -> None:
    cli = build_cli("--config", "configs/feat/pretrain_resnet12.yaml")
    assert isinstance(cli.model, Pretrain)
    assert cli.model.backbone.widths == (64, 160, 320, 640)
    assert (cli.datamodule.ways, cli.datamodule.shots + cli.datamodule.queries) == (64, 2)
    config = cli.model.configure_optimizers()
    optimizer = config["optimizer"]
    assert isinstance(optimizer, torch.optim.SGD)
    assert optimizer.param_groups[0]["lr"] == 0.1
    assert optimizer.param_groups[0]["nesterov"]

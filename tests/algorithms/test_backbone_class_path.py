"""A backbone is an nn.Module: a torchvision ResNet-18 or a user's own class from a class path, through the real
Trainer and the command line, with pre-trained weights from a file, and checkpoints that reload it safely."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
import torchvision
import yaml
from pytorch_lightning.callbacks import Callback

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.loading import CheckpointError, load_episodic_module
from lightning_episodes.cli import main
from lightning_episodes.models import EpisodeAdapter
from lightning_episodes.testing.algorithms import build_cli
from tests.helpers import RESNET18, SmallNet, tiny_cli_options, tiny_datamodule, tiny_trainer

SMALL_NET = {"class_path": "tests.helpers.SmallNet", "init_args": {"width": 4}}


def _fit(model: pl.LightningModule, callbacks: list[Callback] | None = None) -> pl.Trainer:
    """Two training steps on 3-channel 16×16 tiny episodes (ResNet-18 downsamples them to 1×1)."""
    pl.seed_everything(0)
    trainer = tiny_trainer(max_steps=2, val_check_interval=2, callbacks=callbacks or [])
    trainer.fit(model, tiny_datamodule(channels=3, episodes_per_batch=2, val_episodes=4, test_episodes=4))
    return trainer


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.clone() for key, value in module.state_dict().items()}


def test_a_torchvision_resnet18_trains_as_a_backbone_from_its_class_path() -> None:
    model = ProtoNet(backbone=RESNET18, drop_head="fc", in_channels=3, image_size=16)
    assert model.feature_size() == 512
    before = _state(model.backbone)
    _fit(model)
    assert model.trainer.global_step == 2
    assert not torch.equal(before["module.conv1.weight"], model.backbone.state_dict()["module.conv1.weight"])
    assert 0 <= model.trainer.callback_metrics["val/acc"] <= 1
    assert model.hparams["backbone"]["class_path"] == "torchvision.models.ResNet"


def test_a_users_own_module_trains_and_its_checkpoint_reloads(tmp_path: Path) -> None:
    model = ProtoNet(backbone=SMALL_NET, in_channels=3, image_size=16)
    trainer = _fit(model)
    trainer.save_checkpoint(tmp_path / "small.ckpt")
    loaded = load_episodic_module(tmp_path / "small.ckpt")
    assert isinstance(loaded.backbone, EpisodeAdapter)
    assert isinstance(loaded.backbone.module, SmallNet)
    assert loaded.backbone.module.conv.out_channels == 4
    assert loaded.hparams["backbone"] == model.hparams["backbone"]
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key])


class _Weights(Callback):
    """The backbone's state when training starts (after ``setup("fit")``)."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.state = _state(pl_module.backbone.module)  # type: ignore[union-attr]


def test_pretrained_weights_load_when_fitting_starts_and_not_again(tmp_path: Path) -> None:
    torch.manual_seed(1)
    pretrained = SmallNet(width=4)
    torch.save(pretrained.state_dict(), tmp_path / "weights.pt")
    model = ProtoNet(backbone=SMALL_NET, backbone_weights=str(tmp_path / "weights.pt"), in_channels=3, image_size=16)
    assert not torch.equal(model.backbone.module.conv.weight, pretrained.conv.weight)  # not at construction
    seen = _Weights()
    trainer = _fit(model, [seen])
    for key, value in pretrained.state_dict().items():
        assert torch.equal(seen.state[key], value), key
    trainer.save_checkpoint(tmp_path / "tuned.ckpt")
    (tmp_path / "weights.pt").unlink()  # a checkpoint reloads, and fits on, without the file
    loaded = load_episodic_module(tmp_path / "tuned.ckpt")
    assert loaded.backbone_weights_loaded
    tuned = _state(loaded.backbone.module)
    again = _Weights()
    _fit(loaded, [again])
    assert all(torch.equal(again.state[key], value) for key, value in tuned.items())


def test_weights_of_another_shape_stop_the_fit_in_one_line(tmp_path: Path) -> None:
    torch.save(SmallNet(width=8).state_dict(), tmp_path / "wide.pt")
    model = ProtoNet(backbone=SMALL_NET, backbone_weights=str(tmp_path / "wide.pt"), in_channels=3, image_size=16)
    with pytest.raises(ValueError, match=r"^model.backbone_weights=.*: 'conv.weight' has shape \[8, 3, 3, 3\] in"):
        _fit(model)


def test_a_module_passed_as_an_object_is_recorded_by_its_class_and_reloads_when_given_again(tmp_path: Path) -> None:
    model = ProtoNet(backbone=SmallNet(width=4), in_channels=3, image_size=16)
    assert model.hparams["backbone"] == {"class_path": f"{SmallNet.__module__}.SmallNet", "passed_as_object": True}
    trainer = _fit(model)
    trainer.save_checkpoint(tmp_path / "object.ckpt")
    with pytest.raises(ValueError, match=r"SmallNet backbone was passed as an object, whose arguments were not saved"):
        load_episodic_module(tmp_path / "object.ckpt")
    loaded = ProtoNet.load_from_checkpoint(tmp_path / "object.ckpt", backbone=SmallNet(width=4), weights_only=True)
    assert torch.equal(loaded.backbone.module.conv.weight, model.backbone.module.conv.weight)


def _edited(tmp_path: Path, class_path: str) -> Path:
    """A checkpoint of a class-path model whose recorded backbone class was replaced by ``class_path``."""
    model = ProtoNet(backbone=SMALL_NET, in_channels=3, image_size=16)
    checkpoint = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    checkpoint["hyper_parameters"]["backbone"] = {"class_path": class_path, "init_args": {}}
    checkpoint["lightning_episodes"] = {"class_path": "lightning_episodes.algorithms.protonet.ProtoNet"}
    torch.save(checkpoint, tmp_path / "edited.ckpt")
    return tmp_path / "edited.ckpt"


@pytest.mark.parametrize(
    ("class_path", "message"),
    [
        (
            "collections.OrderedDict",
            r"records a backbone that is refused: 'collections.OrderedDict' is not an nn.Module",
        ),
        ("torchvision.models.resnet18", r"refused: 'torchvision.models.resnet18' is a function, not a class"),
        ("some_unknown_package.Net", r"records the class 'some_unknown_package.Net', .* refused before importing it"),
    ],
)
def test_a_checkpoint_naming_a_backbone_that_is_not_a_trusted_module_class_is_refused(
    tmp_path: Path, class_path: str, message: str
) -> None:
    with pytest.raises(CheckpointError, match=message):
        load_episodic_module(_edited(tmp_path, class_path))


def test_the_command_line_takes_a_class_path_and_refuses_a_function() -> None:
    options = ["--model", "ProtoNet", "--data.channels", "3", "--model.drop_head", "fc"]
    resnet = ["--model.backbone", "torchvision.models.ResNet", "--model.backbone.init_args.layers", "[2, 2, 2, 2]",
              "--model.backbone.init_args.block", "torchvision.models.resnet.BasicBlock"]  # fmt: skip
    cli = build_cli(*options, *resnet)
    assert isinstance(cli.model.backbone.module, torchvision.models.ResNet)
    assert cli.model.feature_size() == 512
    assert cli.model.hparams["backbone"]["init_args"]["block"] == "torchvision.models.resnet.BasicBlock"
    with pytest.raises(ValueError, match=r"^model.backbone: 'torchvision.models.resnet18' is a function, not a class"):
        build_cli(*options, "--model.backbone", "torchvision.models.resnet18")


def test_a_yaml_class_path_fits_tests_and_reloads_through_the_command_line(tmp_path: Path) -> None:
    config: dict[str, Any] = {
        "model": {"class_path": "lightning_episodes.algorithms.ProtoNet", "init_args": {"backbone": SMALL_NET}},
        "data": {"init_args": {"channels": 3}},
        "trainer": {"max_steps": 2, "val_check_interval": 2, "check_val_every_n_epoch": None},
    }
    (tmp_path / "backbone.yaml").write_text(yaml.safe_dump(config))
    logger = {"class_path": "pytorch_lightning.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path)}}
    options = ["--config", str(tmp_path / "backbone.yaml"), f"--trainer.logger={yaml.safe_dump(logger)}"]
    options += tiny_cli_options(tmp_path, **{"data.episodes_per_batch": 2})
    main(["fit", *options])
    (last,) = glob.glob(str(tmp_path / "**" / "last.ckpt"), recursive=True)
    saved = torch.load(last, weights_only=True)["hyper_parameters"]["backbone"]
    assert saved == {"class_path": SMALL_NET["class_path"], "init_args": {"in_channels": 3, "width": 4}}
    assert isinstance(load_episodic_module(last).backbone.module, SmallNet)
    cli = main(["test", *options, "--ckpt_path", last])
    assert cli.model.test_results is not None

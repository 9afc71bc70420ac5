"""Any nn.Module as a backbone: the class-path checks, the episode adapter, the dropped head and pre-trained weights."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from lightning_episodes.models import (
    Conv4,
    EpisodeAdapter,
    build_episodic_backbone,
    build_module,
    drop_head,
    feature_size,
    load_backbone_weights,
    module_class,
)
from tests.helpers import RESNET18, SmallNet


def test_module_class_accepts_only_nn_module_classes() -> None:
    assert module_class("torchvision.models.ResNet") is torchvision.models.ResNet
    assert module_class("tests.helpers.SmallNet") is SmallNet
    with pytest.raises(ValueError, match=r"'torchvision.models.resnet18' is a function, not a class"):
        module_class("torchvision.models.resnet18")
    with pytest.raises(ValueError, match=r"'collections.OrderedDict' is not an nn.Module subclass"):
        module_class("collections.OrderedDict")
    with pytest.raises(ValueError, match=r"cannot import 'no_such_package.Net'"):
        module_class("no_such_package.Net")


def test_build_module_records_names_and_plain_values_only() -> None:
    module, record = build_module(RESNET18)
    assert isinstance(module, torchvision.models.ResNet)
    assert record["class_path"] == "torchvision.models.ResNet"
    assert record["init_args"]["block"] == "torchvision.models.resnet.BasicBlock"  # a name, not the class
    assert record["init_args"]["layers"] == [2, 2, 2, 2]
    module, _ = build_module({"class_path": "torchvision.models.ResNet", "init_args": {**RESNET18["init_args"]}})
    with pytest.raises(ValueError, match=r"^torchvision.models.ResNet: Option 'bogus' is not accepted$"):
        build_module({**RESNET18, "init_args": {**RESNET18["init_args"], "bogus": 1}})
    with pytest.raises(ValueError, match=r"expected \{'class_path'"):
        build_module({"class_path": "torchvision.models.ResNet", "extra": 1})


def test_a_torchvision_resnet18_without_its_head_gives_512_features_per_image() -> None:
    backbone, record = build_episodic_backbone(RESNET18, 3, 32, {}, head="fc")
    assert isinstance(backbone, EpisodeAdapter)
    assert isinstance(backbone.module.fc, nn.Identity)
    assert record is not None
    assert record["class_path"] == "torchvision.models.ResNet"
    assert feature_size(backbone, 3, 32) == 512
    assert backbone(torch.zeros(2, 5, 3, 32, 32)).shape == (2, 5, 512)
    whole, _ = build_episodic_backbone(RESNET18, 3, 32, {})
    assert feature_size(whole, 3, 32) == 1000  # the 1,000 ImageNet logits without drop_head


def test_registered_names_and_episodic_backbones_are_not_wrapped() -> None:
    conv4, record = build_episodic_backbone("conv4", 1, 28, {"hidden": 8})
    assert isinstance(conv4, Conv4)
    assert record is None
    given = Conv4(in_channels=1, hidden=8)
    built, record = build_episodic_backbone(given, 1, 28, {})
    assert built is given
    assert record == {"class_path": "lightning_episodes.models.conv4.Conv4", "passed_as_object": True}


@pytest.mark.parametrize(
    ("backbone", "options", "message"),
    [
        ("no.such.Backbone", None, r"^model.backbone: unknown backbone 'no.such.Backbone': neither a registered one"),
        ("nope", None, r"^model.backbone: unknown backbone 'nope'; available backbones: conv4"),
        ({"class_path": "torchvision.models.resnet18"}, None, r"^model.backbone: .* is a function, not a class"),
        ({"class_path": "collections.OrderedDict"}, None, r"^model.backbone: .* is not an nn.Module subclass$"),
        (RESNET18, {"width": 3}, r"^model.backbone: a module takes no model.backbone_options"),
        ({"class_path": "x.Net", "passed_as_object": True}, None, r"x.Net backbone was passed as an object"),
    ],
)
def test_refused_backbones_are_one_line_naming_the_option(backbone: object, options: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        build_episodic_backbone(backbone, 3, 32, {}, given_options=options)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_drop_head_names_the_option_and_the_children() -> None:
    net = drop_head(SmallNet(), "pool")
    assert isinstance(net.pool, nn.Identity)
    nested = drop_head(nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 3))), "1.1")
    assert isinstance(nested[1][1], nn.Identity)
    with pytest.raises(ValueError, match=r"^model.drop_head='fc': SmallNet has no submodule 'fc' \(its children: conv"):
        drop_head(SmallNet(), "fc")


def test_the_adapter_keeps_each_episode_independent_of_its_batch_mates() -> None:
    torch.manual_seed(0)
    adapter = EpisodeAdapter(SmallNet()).train()
    episodes = torch.randn(3, 6, 3, 8, 8)
    together = adapter(episodes)
    # training batch norm: each episode alone gives the same features (its own statistics)
    for i in range(3):
        torch.testing.assert_close(together[i], adapter(episodes[i : i + 1])[0])
    adapter.eval()  # running statistics: one forward of every image gives the same as one per episode
    torch.testing.assert_close(adapter(episodes), torch.stack([adapter(e[None])[0] for e in episodes]))


def test_weights_round_trip_through_a_state_dict_file(tmp_path: Path) -> None:
    torch.manual_seed(0)
    pretrained = torchvision.models.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1])
    torch.save(pretrained.state_dict(), tmp_path / "resnet.pt")
    spec = {**RESNET18, "init_args": {**RESNET18["init_args"], "layers": [1, 1, 1, 1]}}
    backbone, _ = build_episodic_backbone(spec, 3, 32, {}, head="fc")
    load_backbone_weights(backbone, tmp_path / "resnet.pt", skip="fc")  # the file's fc.* belong to the dropped head
    expected = {k: v for k, v in pretrained.state_dict().items() if not k.startswith("fc.")}
    assert backbone.module.state_dict().keys() == expected.keys()
    assert all(torch.equal(backbone.module.state_dict()[k], v) for k, v in expected.items())


def _saved(tmp_path: Path, **changes: torch.Tensor | None) -> Path:
    state = SmallNet().state_dict()
    for key, value in changes.items():
        if value is None:
            del state[key]
        else:
            state[key] = value
    torch.save(state, tmp_path / "weights.pt")
    return tmp_path / "weights.pt"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"conv.weight": torch.zeros(4, 3, 3, 3)}, r"'conv.weight' has shape \[4, 3, 3, 3\] in the file and \[8, 3"),
        ({"norm.running_var": None}, r"it has no 'norm.running_var' \(shape \[8\]\)$"),
        ({"extra.weight": torch.zeros(1)}, r"the backbone has no 'extra.weight'$"),
    ],
)
def test_weights_that_do_not_fit_are_one_line_naming_the_key(
    tmp_path: Path, changes: dict[str, torch.Tensor | None], message: str
) -> None:
    path = _saved(tmp_path, **changes)
    where = re.escape(f"model.backbone_weights='{path}' does not fit the backbone: ")
    with pytest.raises(ValueError, match=f"^{where}{message}") as e:
        load_backbone_weights(EpisodeAdapter(SmallNet()), path)
    assert "\n" not in str(e.value)


def test_weights_load_safely_or_not_at_all(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"model.backbone_weights='.*missing.pt' does not exist"):
        load_backbone_weights(SmallNet(), tmp_path / "missing.pt")
    torch.save(SmallNet(), tmp_path / "module.pt")  # a pickled module, not a state dict: code would run to load it
    with pytest.raises(ValueError, match=r"^model.backbone_weights=.* cannot be loaded safely: ") as error:
        load_backbone_weights(SmallNet(), tmp_path / "module.pt")
    assert "\n" not in str(error.value)
    torch.save({"weights": [1, 2]}, tmp_path / "list.pt")
    with pytest.raises(ValueError, match=r"is not a state dict"):
        load_backbone_weights(SmallNet(), tmp_path / "list.pt")

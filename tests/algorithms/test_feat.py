"""FEAT: hand-checked logits, the official code's losses re-computed literally, pre-trained backbones, Trainer."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import Callback
from torch import nn

from lightning_episodes.algorithms import FEAT
from lightning_episodes.testing.algorithms import build_cli
from tests.algorithms.builders import Flatten, feature_episodes
from tests.helpers import tiny_datamodule, tiny_trainer


def feat_on_features(dim: int, **kwargs: object) -> FEAT:
    model = FEAT(backbone="conv4", image_size=16, **kwargs)
    model.backbone = Flatten()
    model.attention = type(model.attention)(dim, dropout=0.0)
    model.attention.attention_dropout.p = 0.0  # deterministic training-mode forwards
    return model


def test_logits_with_an_identity_set_function_match_a_hand_computation() -> None:
    # with a zero output layer the set function is layer norm of its input: 2-d prototypes become (±1, ∓1)
    model = feat_on_features(2, temperature=4.0).eval()
    nn.init.zeros_(model.attention.output.weight)
    nn.init.zeros_(model.attention.output.bias)
    # 2-way 2-shot: prototypes (0, 2) -> (-1, 1) and (3, 1) -> (1, -1); queries (-1, 1) of class 0, (1, 0) of class 1
    batch = feature_episodes(
        torch.tensor([[[-1.0, 2], [1, 2], [3, 0], [3, 2]]]), torch.tensor([[[-1.0, 1], [1, 0]]]), 2
    )
    out = model.episode_losses(batch)
    # squared distances: query 0 -> 0 and 8, logits 0 and -2; query 1 -> 5 and 1, logits -5/4 and -1/4
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))) / 2
    assert out.losses.item() == pytest.approx(expected, rel=1e-4)  # layer norm's eps = 1e-5
    assert out.accuracies.item() == 1.0
    torch.testing.assert_close(out.difficulty, out.losses)  # evaluation: the main cross-entropy only


def official_feat_loss(model: FEAT, support: torch.Tensor, query: torch.Tensor, way: int, balance: float) -> float:
    """FEAT's ``_forward`` and training loss (github.com/Sha-Lab/FEAT, model/models/feat.py and
    model/trainer/fsl_trainer.py), literally, on one episode in its shot-major order."""
    d = support.shape[-1]
    shot, n_query = support.shape[0] // way, query.shape[0] // way
    # our episodes are class-major; FEAT's are shot-major (label = arange(way).repeat(shot))
    support = support.view(way, shot, d).transpose(0, 1).contiguous().view(1, shot, way, d)
    query = query.view(way, n_query, d).transpose(0, 1).contiguous().view(1, n_query, way, d)
    proto = model.attention(support.mean(dim=1))
    num_query = n_query * way
    q = query.view(-1, d).unsqueeze(1)
    proto = proto.unsqueeze(1).expand(1, num_query, way, d).contiguous().view(num_query, way, d)
    logits = -torch.sum((proto - q) ** 2, 2) / model.temperature
    aux_task = torch.cat([support.view(1, shot, way, d), query.view(1, n_query, way, d)], 1)
    num_query = shot * way + n_query * way
    aux_task = aux_task.permute([0, 2, 1, 3]).contiguous().view(-1, shot + n_query, d)
    aux_emb = model.attention(aux_task).view(1, way, shot + n_query, d)
    aux_center = torch.mean(aux_emb, 2)
    aux_task = aux_task.permute([1, 0, 2]).contiguous().view(-1, d).unsqueeze(1)
    aux_center = aux_center.unsqueeze(1).expand(1, num_query, way, d).contiguous().view(num_query, way, d)
    logits_reg = -torch.sum((aux_center - aux_task) ** 2, 2) / model.temperature2
    label = torch.arange(way).repeat(n_query)
    label_aux = torch.arange(way).repeat(shot + n_query)
    return (F.cross_entropy(logits, label) + balance * F.cross_entropy(logits_reg, label_aux)).item()


def test_training_losses_match_the_official_code_and_difficulty_is_the_main_cross_entropy() -> None:
    torch.manual_seed(0)
    ways, shots, queries, dim = 3, 2, 4, 6
    model = feat_on_features(dim, temperature=8.0, temperature2=2.0, balance=0.5).train()
    batch = feature_episodes(torch.randn(2, ways * shots, dim), torch.randn(2, ways * queries, dim), ways)
    out = model.episode_losses(batch)
    for i in range(2):
        expected = official_feat_loss(model, batch.support[i].flatten(1), batch.query[i].flatten(1), ways, 0.5)
        assert out.losses[i].item() == pytest.approx(expected, rel=1e-5)
        without = official_feat_loss(model, batch.support[i].flatten(1), batch.query[i].flatten(1), ways, 0.0)
        assert out.difficulty[i].item() == pytest.approx(without, rel=1e-5)
    model.eval()
    torch.testing.assert_close(model.episode_losses(batch).losses, out.difficulty)


def test_set_function_attends_within_each_set_only() -> None:
    torch.manual_seed(0)
    attention = FEAT(backbone="conv4", image_size=16).attention.eval()
    sets = torch.randn(3, 5, 64)
    torch.testing.assert_close(attention(sets)[1], attention(sets[1:2])[0])


def test_optimizer_gives_the_set_function_a_multiplied_learning_rate() -> None:
    model = FEAT(backbone="conv4", image_size=16, lr_multiplier=10.0)
    config = model.configure_optimizers()
    assert isinstance(config, torch.optim.SGD)
    backbone, attention = config.param_groups
    assert (backbone["lr"], attention["lr"]) == (pytest.approx(2e-4), pytest.approx(2e-3))
    assert backbone["nesterov"]
    assert (backbone["momentum"], backbone["weight_decay"]) == (0.9, 5e-4)
    assert {id(p) for p in attention["params"]} == {id(p) for p in model.attention.parameters()}
    model = FEAT(backbone="conv4", image_size=16, lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 4))
    scheduler = model.configure_optimizers()["lr_scheduler"]["scheduler"]
    assert scheduler.base_lrs == [pytest.approx(2e-4), pytest.approx(2e-3)]


class _BackboneAtFitStart(Callback):
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.state = copy.deepcopy(pl_module.backbone.state_dict())


def test_backbone_checkpoint_is_loaded_when_fitting_and_not_needed_to_reload(tmp_path: Path) -> None:
    donor = FEAT(backbone="conv4", image_size=16).backbone
    torch.save(donor.state_dict(), tmp_path / "backbone.pt")  # a plain state dict
    pl.seed_everything(0)
    model = FEAT(backbone="conv4", image_size=16, backbone_checkpoint=str(tmp_path / "backbone.pt"))
    dm = tiny_datamodule(val_episodes=8, test_episodes=8)
    spy = _BackboneAtFitStart()
    trainer = tiny_trainer(max_steps=2, val_check_interval=2, callbacks=[spy])
    trainer.fit(model, dm)
    for key, value in donor.state_dict().items():
        assert torch.equal(spy.state[key], value), key
    result = trainer.test(model, dm, verbose=False)[0]
    trainer.save_checkpoint(tmp_path / "feat.ckpt")
    (tmp_path / "backbone.pt").unlink()  # a saved FEAT reloads without its pre-trained backbone
    reloaded = FEAT.load_from_checkpoint(tmp_path / "feat.ckpt")
    assert reloaded.backbone_loaded
    assert tiny_trainer().test(reloaded, dm, verbose=False)[0]["test/acc"] == pytest.approx(result["test/acc"])
    tiny_trainer(max_steps=1).fit(reloaded, dm)  # fine-tuning further does not look for the file again


def test_bad_backbone_checkpoints_fail_clearly(tmp_path: Path) -> None:
    model = FEAT(backbone="conv4", image_size=16, backbone_checkpoint=str(tmp_path / "missing.ckpt"))
    with pytest.raises(FileNotFoundError, match=r"model.backbone_checkpoint=.*missing.ckpt' does not exist"):
        tiny_trainer(max_steps=1).fit(model, tiny_datamodule())
    torch.save({"state_dict": {"backbone.blocks.0.conv.weight": torch.zeros(1)}}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match=r"does not fit the 'conv4' backbone"):
        model.load_backbone(tmp_path / "other.ckpt")


@pytest.mark.parametrize("protocol", ["miniimagenet_5w1s", "miniimagenet_5w5s"])
def test_yaml_configs_follow_the_official_protocol(protocol: str) -> None:
    cli = build_cli("--config", "configs/models/feat_resnet12.yaml", "--config", f"configs/feat/{protocol}.yaml")
    model, data = cli.model, cli.datamodule
    assert isinstance(model, FEAT)
    assert model.backbone.widths == (64, 160, 320, 640)
    assert model.attention.output.in_features == 640
    assert model.temperature == 64.0
    assert (model.balance, model.temperature2) == ((0.01, 64.0) if protocol.endswith("1s") else (0.1, 32.0))
    assert data.test_episodes == 10000
    assert data.shots == (1 if protocol.endswith("1s") else 5)
    optimizer = model.configure_optimizers()["optimizer"]
    assert isinstance(optimizer, torch.optim.SGD)
    assert optimizer.param_groups[0]["nesterov"]
    assert optimizer.param_groups[0]["weight_decay"] == 5e-4

"""The contract every algorithm keeps, tested once for all (the idea of torchmetrics' ``MetricTester``).

A row of :data:`ROWS` is an algorithm with the options that make it small; a new algorithm gets every test here by
adding its row. The algorithms' own files test their maths.
"""

from __future__ import annotations

import copy
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from lightning_episodes.algorithms import (
    ANIL,
    FEAT,
    MAML,
    EpisodeOutput,
    EpisodicModule,
    Pretrain,
    ProtoNet,
    checkpoint_info,
    load_episodic_module,
)
from lightning_episodes.cli import main
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import set_eval_batch_norm
from lightning_episodes.weighting import EpisodeWeights
from tests.algorithms.builders import HIDDEN, build_cli
from tests.algorithms.example_algorithm import NearestNeighbour
from tests.helpers import tiny_datamodule, tiny_trainer

# a training "episode" of all 12 training classes × 2 images is a class-balanced batch of 24
PRETRAINING = {"ways": 12, "shots": 1, "queries": 1, "eval_ways": 5, "eval_shots": 1, "eval_queries": 3}


@dataclass(frozen=True)
class Row:
    """One algorithm of the contract tests.

    Args:
        cls: the algorithm.
        options: constructor arguments that keep it small and fast (``image_size=16`` is added).
        bad_configs: ``(arguments, message)`` pairs it must reject at construction, besides the base's.
        data: :func:`tiny_datamodule` overrides (the episode shape it trains on).
        eval_batch_norms: the ``eval_batch_norm`` modes it supports.
        deterministic_training: whether two training forwards agree (no dropout).
        name: the test id.
    """

    cls: type[EpisodicModule]
    options: dict[str, Any] = field(default_factory=dict)
    bad_configs: tuple[tuple[dict[str, Any], str], ...] = ()
    data: dict[str, Any] = field(default_factory=dict)
    eval_batch_norms: tuple[str, ...] = ("running", "episode")
    deterministic_training: bool = True
    name: str = ""

    def make(self, **overrides: Any) -> EpisodicModule:
        return self.cls(**({"image_size": 16} | self.options | overrides))

    def datamodule(self) -> pl.LightningDataModule:
        return tiny_datamodule(**({"val_episodes": 8, "test_episodes": 8} | self.data))

    def __str__(self) -> str:
        return self.name or self.cls.__name__


ROWS = [
    Row(
        ProtoNet,
        bad_configs=(
            ({"distance": "manhattan"}, r"model.distance must be 'euclidean' or 'cosine', got 'manhattan'"),
            ({"cosine_scale": 0.0}, r"model.cosine_scale must be > 0, got 0.0"),
        ),
    ),
    Row(ProtoNet, {"distance": "cosine"}, name="ProtoNet-cosine"),
    Row(
        MAML,
        {"backbone_options": {"hidden": HIDDEN}, "adaptation_steps": 2, "first_order": True},
        bad_configs=(
            ({"adaptation_steps": 0}, r"model.adaptation_steps must be >= 1, got 0"),
            ({"eval_adaptation_steps": 0}, r"model.eval_adaptation_steps must be >= 1, got 0"),
            ({"adaptation_lr": -0.1}, r"model.adaptation_lr must be > 0, got -0.1"),
            ({"ways": 1}, r"model.ways must be >= 2, got 1"),
            ({"eval_batch_norm": "running"}, r"model.eval_batch_norm='running' needs running statistics"),
            ({"compile_backbone": True}, r"model.compile_backbone=true does not speed up MAML"),
        ),
        eval_batch_norms=("episode",),
    ),
    Row(
        ANIL,
        {"backbone_options": {"hidden": HIDDEN}, "adaptation_steps": 2, "eval_adaptation_steps": 3},
        bad_configs=(
            ({"adaptation_steps": 0}, r"model.adaptation_steps must be >= 1, got 0"),
            ({"adaptation_lr": -1.0}, r"model.adaptation_lr must be > 0, got -1.0"),
        ),
        eval_batch_norms=("episode",),
    ),
    Row(
        FEAT,
        {"backbone": "conv4", "temperature": 4.0, "balance": 0.1},
        bad_configs=(
            ({"temperature": 0.0}, r"model.temperature must be > 0, got 0.0"),
            ({"temperature2": -1.0}, r"model.temperature2 must be > 0, got -1.0"),
            ({"balance": -0.1}, r"model.balance must be >= 0, got -0.1"),
            ({"lr_multiplier": 0.0}, r"model.lr_multiplier must be > 0, got 0.0"),
            ({"dropout": 1.0}, r"model.dropout must be in \[0, 1\), got 1.0"),
        ),
        deterministic_training=False,  # dropout
    ),
    Row(
        Pretrain,
        {"backbone": "conv4"},
        bad_configs=(({"num_classes": 0}, r"model.num_classes must be > 0, got 0"),),
        data=PRETRAINING,
    ),
    # the example of the guide "Your own algorithm": its one row
    Row(NearestNeighbour, bad_configs=(({"temperature": 0.0}, r"model.temperature must be > 0, got 0.0"),)),
]

#: what every algorithm rejects, through the base class
BASE_BAD_CONFIGS = (
    ({"eval_batch_norm": "batch"}, r"model.eval_batch_norm must be 'running' or 'episode', got 'batch'"),
    ({"backbone": "vgg"}, r"model.backbone: unknown backbone 'vgg'"),
    ({"backbone": "resnet12", "image_size": 8}, r"model.backbone: image_size=8 is too small for backbone 'resnet12'"),
)


def rows(*, modes: bool = False) -> list[Any]:
    if not modes:
        return [pytest.param(row, id=str(row)) for row in ROWS]
    return [pytest.param(row, mode, id=f"{row}-{mode}") for row in ROWS for mode in row.eval_batch_norms]


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def signature_defaults(cls: type[EpisodicModule]) -> dict[str, Any]:
    """Every constructor argument of ``cls`` (its own, then its bases' through ``**kwargs``) with its default."""
    defaults: dict[str, Any] = {}
    for klass in cls.__mro__:
        if not (isinstance(klass, type) and issubclass(klass, EpisodicModule)):
            continue
        for name, parameter in inspect.signature(klass.__init__).parameters.items():
            if name != "self" and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                defaults.setdefault(name, parameter.default)
    return defaults


def state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return copy.deepcopy(model.state_dict())


def assert_same_state(model: torch.nn.Module, expected: dict[str, torch.Tensor], when: str) -> None:
    actual = model.state_dict()
    assert set(actual) == set(expected), when
    for key, value in actual.items():
        assert torch.equal(value, expected[key]), f"{key} changed during {when}"


# -- construction ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("row", "kwargs", "match"),
    [
        pytest.param(row, kwargs, match, id=f"{row}-{'-'.join(kwargs)}")
        for row in ROWS
        for kwargs, match in row.bad_configs
    ],
)
def test_bad_configs_are_rejected_at_construction_naming_the_argument(row: Row, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        row.make(**kwargs)


@pytest.mark.parametrize(
    ("row", "kwargs", "match"),
    [
        pytest.param(row, kwargs, match, id=f"{row}-{'-'.join(kwargs)}")
        for row in ROWS
        for kwargs, match in BASE_BAD_CONFIGS
    ],
)
def test_the_base_arguments_are_checked_for_every_algorithm(row: Row, kwargs: dict, match: str) -> None:
    # without the row's options (a narrow conv4's `hidden` would not fit another backbone)
    with pytest.raises(ValueError, match=match):
        row.cls(**({"image_size": 16} | kwargs))


@pytest.mark.parametrize("row", rows())
def test_help_lists_every_argument_with_its_default_and_description(
    row: Row, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lightning-episodes fit --model.help CLASS`` shows the base's arguments too (passed on with ``**kwargs``),
    with the defaults the algorithm gives them."""
    monkeypatch.setenv("COLUMNS", "400")  # long defaults unbroken
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model.help", class_path(row.cls)])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    listed: dict[str, str] = {}
    for block in re.split(r"\n  (?=--model\.)", text[text.index("Help for") :])[1:]:
        flag, words = block.split()[0], " ".join(block.split())
        if flag.endswith(".help"):
            continue
        description, _, typed = words.partition("(type: ")
        assert len(description.split()) > 1, f"{flag} has no description"
        default = re.search(r"default: ([^,)]+)", typed)
        assert default is not None, f"{flag} shows no default"
        listed[flag.removeprefix("--model.")] = default.group(1)
    expected = {
        name: "null" if value is None else class_path(value) if callable(value) else str(value)
        for name, value in signature_defaults(row.cls).items()
    }
    assert listed == expected
    assert set(inspect.signature(EpisodicModule.__init__).parameters) - {"self"} <= set(listed)


def test_help_shows_the_defaults_that_subclasses_change() -> None:
    defaults = {cls: signature_defaults(cls) for cls in (MAML, ANIL, FEAT, Pretrain)}
    assert (defaults[MAML]["adaptation_lr"], defaults[ANIL]["adaptation_lr"]) == (0.01, 0.1)
    assert defaults[ANIL]["eval_batch_norm"] == defaults[MAML]["eval_batch_norm"] == "episode"
    assert defaults[FEAT]["backbone"] == defaults[Pretrain]["backbone"] == "resnet12-wide"
    assert signature_defaults(ProtoNet)["eval_batch_norm"] == "running"


@pytest.mark.parametrize("row", rows())
def test_the_command_line_builds_it_by_class_path_with_its_defaults(row: Row) -> None:
    cli = build_cli("--model", class_path(row.cls))
    assert type(cli.model) is row.cls
    defaults = signature_defaults(row.cls) | {"image_size": 16}  # linked from the data
    hparams = {key: value for key, value in cli.model.hparams.items() if not key.startswith("_")}  # LightningCLI's
    assert set(hparams) == set(defaults) - {"optimizer", "lr_scheduler"}
    for key, value in hparams.items():
        if defaults[key] is not None:  # None may be resolved (MAML's eval_adaptation_steps)
            assert value == defaults[key], key


# -- evaluation and checkpoints ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("row", "mode"), rows(modes=True))
def test_evaluation_changes_nothing(row: Row, mode: str) -> None:
    model = row.make(eval_batch_norm=mode).train()
    before = state(model)
    dm = row.datamodule()
    val = tiny_trainer().validate(model, dm, verbose=False)[0]
    test = tiny_trainer().test(model, dm, verbose=False)[0]
    assert val["val/episodes"] == test["test/episodes"] == 8
    assert 0.0 <= val["val/acc"] <= 1.0
    assert_same_state(model, before, f"{mode} evaluation")
    assert all(p.grad is None for p in model.parameters())
    assert model.training  # the Trainer puts it back


@pytest.mark.parametrize("row", rows())
def test_reloads_from_its_class_path(row: Row, tmp_path: Path) -> None:
    pl.seed_everything(0)
    model = row.make()
    before = state(model)
    dm = row.datamodule()
    trainer = tiny_trainer(max_steps=2, val_check_interval=2)
    trainer.fit(model, dm)
    assert any(not torch.equal(value, before[key]) for key, value in model.state_dict().items())  # it learnt
    trainer.save_checkpoint(tmp_path / "model.ckpt")  # after fitting: it records the training data
    result = trainer.test(model, dm, verbose=False)[0]
    info = checkpoint_info(tmp_path / "model.ckpt")
    assert info["class_path"] == class_path(row.cls)
    reloaded = load_episodic_module(tmp_path / "model.ckpt")
    assert type(reloaded) is row.cls
    assert dict(reloaded.hparams) == dict(model.hparams)
    assert reloaded.trained_on == {"dataset": "tiny"} | {key: getattr(dm, key) for key in ("ways", "shots", "queries")}
    assert_same_state(reloaded, model.state_dict(), "loading")
    assert tiny_trainer().test(reloaded, dm, verbose=False)[0] == pytest.approx(result)


@pytest.mark.parametrize("training", [True, False], ids=["training", "evaluation"])
@pytest.mark.parametrize("row", rows())
def test_batch_mates_do_not_matter(row: Row, training: bool) -> None:
    """An episode's loss, accuracy and difficulty are the same alone and among other episodes."""
    if training and not row.deterministic_training:
        pytest.skip(f"{row} draws dropout masks in training")
    pl.seed_everything(0)
    model = row.make()
    dm = row.datamodule()
    tiny_trainer(max_steps=1, limit_val_batches=0).fit(model, dm)  # what some algorithms set up (Pretrain)
    batch = dm.assemble(next(iter(dm.train_dataloader() if training else dm.val_dataloader())))
    model.train(training)
    if not training:
        set_eval_batch_norm(model, model.eval_batch_norm)
    assert len(batch) > 1
    together = model.episode_losses(batch)
    alone = [model.episode_losses(batch[i]) for i in range(len(batch))]
    for name in ("losses", "accuracies", "difficulty"):
        torch.testing.assert_close(
            getattr(together, name).detach(), torch.cat([getattr(out, name).detach() for out in alone]), msg=name
        )


# -- training ---------------------------------------------------------------------------------------------------
class _Weights:
    """A weighting strategy (what DifficultyWeightingCallback installs) that records what it is given."""

    def __init__(self) -> None:
        self.difficulties: list[torch.Tensor] = []

    def episode_weights(self, module: EpisodicModule, batch: Episode, difficulties: torch.Tensor) -> EpisodeWeights:
        self.difficulties.append(difficulties)
        return EpisodeWeights(torch.arange(1.0, len(difficulties) + 1), "ess")  # 1, 2, 3, ...


class _LossRecorder(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, outputs: dict, *args: object) -> None:
        self.losses.append(outputs["loss"].detach())


@pytest.mark.parametrize("row", rows())
def test_importance_weights_multiply_each_episodes_whole_loss(row: Row) -> None:
    """The training loss is ``Σ w L / ESS`` of the episodes' losses, and the weighting strategy is given their
    difficulties (FEAT's: the main cross-entropy, without the regulariser that is in its loss)."""
    pl.seed_everything(0)
    module = row.make()
    weighting, recorder, outputs = _Weights(), _LossRecorder(), []
    module.weighting = weighting
    episode_losses = module.episode_losses

    def record(batch: Episode) -> EpisodeOutput:
        outputs.append(episode_losses(batch))
        return outputs[-1]

    module.episode_losses = record  # type: ignore[method-assign]
    tiny_trainer(max_steps=2, limit_val_batches=0, callbacks=[recorder]).fit(module, row.datamodule())
    assert len(outputs) == len(recorder.losses) == len(weighting.difficulties) == 2
    for out, loss, difficulties in zip(outputs, recorder.losses, weighting.difficulties, strict=True):
        torch.testing.assert_close(difficulties, out.difficulty)
        w = torch.arange(1.0, len(difficulties) + 1, dtype=torch.float64)
        expected = (w * out.losses.detach().double()).sum() / (w.sum() ** 2 / (w**2).sum())
        torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-6)


def test_the_guide_shows_the_example_algorithm() -> None:
    """The guide "Your own algorithm" shows ``example_algorithm.py`` (a row of :data:`ROWS`) as it is."""
    root = Path(__file__).resolve().parents[2]
    blocks = re.findall(r"```python\n(.*?)```", (root / "docs/guides/own-algorithm.md").read_text(), flags=re.DOTALL)
    assert (root / "tests/algorithms/example_algorithm.py").read_text() in blocks
    assert any(row.cls is NearestNeighbour for row in ROWS)

"""The contract every algorithm keeps, checked for one of them by :func:`check_algorithm` (the idea of
torchmetrics' ``MetricTester``).

An :class:`AlgorithmSpec` is an algorithm with the options that keep it small; the checks build it, read its
``--model.help``, build it through the command line, and fit, evaluate and reload it on the tiny dataset
(:mod:`lightning_episodes.testing.tiny`). The algorithm's own tests check its maths.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import io
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytorch_lightning as pl
import torch

from lightning_episodes.algorithms import EpisodeOutput, EpisodicModule, checkpoint_info, load_episodic_module
from lightning_episodes.data import EpisodicDataModule
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import set_eval_batch_norm
from lightning_episodes.testing._checks import Check, assert_approx, raises, run_checks
from lightning_episodes.testing.tiny import register_tiny_dataset, tiny_datamodule, tiny_trainer
from lightning_episodes.weighting import EpisodeWeights

if TYPE_CHECKING:
    from lightning_episodes.cli import EpisodicCLI

#: ``(arguments, message)``: what every algorithm rejects at construction, through the base class
BASE_BAD_CONFIGS: tuple[tuple[dict[str, Any], str], ...] = (
    ({"eval_batch_norm": "batch"}, r"model.eval_batch_norm must be 'running' or 'episode', got 'batch'"),
    ({"backbone": "vgg"}, r"model.backbone: unknown backbone 'vgg'"),
    ({"backbone": "resnet12", "image_size": 8}, r"model.backbone: image_size=8 is too small for backbone 'resnet12'"),
    ({"optimizer": functools.partial(torch.optim.Adam, lr=0.0)}, r"model.optimizer.lr must be > 0, got 0.0"),
    ({"label_smoothing": 1.0}, r"model.label_smoothing must be in \[0, 1\), got 1.0"),
)


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm and what its contract checks need to know of it.

    Args:
        cls: the algorithm, a subclass of :class:`~lightning_episodes.algorithms.EpisodicModule` importable by its
            class path (``module.ClassName``).
        options: constructor arguments that keep it small and fast (``image_size=16`` is added).
        bad_configs: ``(arguments, message)`` pairs it must reject at construction with a ``ValueError`` whose message
            ``re.search`` finds, besides the base's (:data:`BASE_BAD_CONFIGS`).
        data: :func:`~lightning_episodes.testing.tiny_datamodule` arguments (the episode shape it trains on).
        eval_batch_norms: the ``eval_batch_norm`` modes it supports.
        deterministic_training: whether two training forwards agree (no dropout).
        name: its name in messages and test ids (default: the class's).
    """

    cls: type[EpisodicModule]
    options: dict[str, Any] = field(default_factory=dict)
    bad_configs: tuple[tuple[dict[str, Any], str], ...] = ()
    data: dict[str, Any] = field(default_factory=dict)
    eval_batch_norms: tuple[str, ...] = ("running", "episode")
    deterministic_training: bool = True
    name: str = ""

    def make(self, **overrides: Any) -> EpisodicModule:
        """The algorithm with its small options, ``image_size=16`` and ``overrides``."""
        return self.cls(**({"image_size": 16} | self.options | overrides))

    def datamodule(self) -> EpisodicDataModule:
        """The tiny data module with 8 validation and 8 test episodes and the spec's ``data``."""
        return tiny_datamodule(**({"val_episodes": 8, "test_episodes": 8} | self.data))

    def __str__(self) -> str:
        return self.name or self.cls.__name__


def class_path(cls: type) -> str:
    """``module.QualifiedName``: how the command line and checkpoints name a class."""
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


def build_cli(*args: str) -> EpisodicCLI:
    """The command line, parsed and instantiated on the tiny dataset without running anything."""
    from lightning_episodes.cli import main

    register_tiny_dataset()
    return main([*args, "--data.dataset", "tiny", "--data.image_size", "16", "--trainer.logger", "false"], run=False)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return copy.deepcopy(model.state_dict())


def _assert_same_state(model: torch.nn.Module, expected: dict[str, torch.Tensor], when: str) -> None:
    actual = model.state_dict()
    assert set(actual) == set(expected), when
    for key, value in actual.items():
        assert torch.equal(value, expected[key]), f"{key} changed during {when}"


@contextlib.contextmanager
def _environment(**variables: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- construction ----------------------------------------------------------------------------------------------
def _rejects_bad_configs(spec: AlgorithmSpec) -> None:
    for kwargs, match in spec.bad_configs:
        with raises(ValueError, match=match):
            spec.make(**kwargs)


def _checks_the_base_arguments(spec: AlgorithmSpec) -> None:
    # without the spec's options (a narrow conv4's `hidden` would not fit another backbone)
    for kwargs, match in BASE_BAD_CONFIGS:
        with raises(ValueError, match=match):
            spec.cls(**({"image_size": 16} | kwargs))


def _help_lists_every_argument(spec: AlgorithmSpec) -> None:
    """``lightning-episodes fit --model.help CLASS`` shows the base's arguments too (passed on with ``**kwargs``),
    with the defaults the algorithm gives them, each with a description."""
    from lightning_episodes.cli import main

    out = io.StringIO()
    with _environment(COLUMNS="400"), contextlib.redirect_stdout(out), raises(SystemExit, match="") as exit_info:
        main(["fit", "--model.help", class_path(spec.cls)])  # long defaults unbroken at 400 columns
    code = getattr(exit_info[0], "code", None)
    assert code == 0, f"--model.help exited with {code}"
    text = out.getvalue()
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
        for name, value in signature_defaults(spec.cls).items()
    }
    assert listed == expected, f"--model.help lists {listed}, the signature {expected}"
    missing = set(inspect.signature(EpisodicModule.__init__).parameters) - {"self"} - set(listed)
    assert not missing, f"--model.help lacks the base's {sorted(missing)}"


def _builds_by_class_path(spec: AlgorithmSpec) -> None:
    cli = build_cli("--model", class_path(spec.cls))
    assert type(cli.model) is spec.cls, f"the command line built a {type(cli.model).__name__}"
    defaults = signature_defaults(spec.cls) | {"image_size": 16}  # linked from the data
    hparams = {key: value for key, value in cli.model.hparams.items() if not key.startswith("_")}  # LightningCLI's
    assert set(hparams) == set(defaults) - {"optimizer", "lr_scheduler"}, f"hparams {sorted(hparams)}"
    for key, value in hparams.items():
        if defaults[key] is not None:  # None may be resolved (MAML's eval_adaptation_steps)
            assert value == defaults[key], f"hparams[{key!r}] = {value!r}, its default {defaults[key]!r}"


# -- evaluation and checkpoints ----------------------------------------------------------------------------------
def _evaluation_changes_nothing(spec: AlgorithmSpec) -> None:
    for mode in spec.eval_batch_norms:
        model = spec.make(eval_batch_norm=mode).train()
        before = _state(model)
        dm = spec.datamodule()
        val = tiny_trainer().validate(model, dm, verbose=False)[0]
        test = tiny_trainer().test(model, dm, verbose=False)[0]
        assert val["val/episodes"] == test["test/episodes"] == 8, f"{mode}: episodes {val}, {test}"
        assert 0.0 <= val["val/acc"] <= 1.0, f"{mode}: val/acc {val['val/acc']}"
        _assert_same_state(model, before, f"{mode} evaluation")
        assert all(p.grad is None for p in model.parameters()), f"{mode} evaluation left gradients"
        assert model.training, f"{mode} evaluation left the model in eval mode"  # the Trainer puts it back


def _reloads_from_its_class_path(spec: AlgorithmSpec) -> None:
    pl.seed_everything(0)
    model = spec.make()
    before = _state(model)
    dm = spec.datamodule()
    trainer = tiny_trainer(max_steps=2, val_check_interval=2)
    trainer.fit(model, dm)
    assert any(not torch.equal(value, before[key]) for key, value in model.state_dict().items()), "it learnt nothing"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.ckpt"
        trainer.save_checkpoint(path)  # after fitting: it records the training data
        result = trainer.test(model, dm, verbose=False)[0]
        info = checkpoint_info(path)
        assert info["class_path"] == class_path(spec.cls), f"the checkpoint names {info['class_path']}"
        reloaded = load_episodic_module(path)
    assert type(reloaded) is spec.cls, f"reloaded as a {type(reloaded).__name__}"
    assert dict(reloaded.hparams) == dict(model.hparams), "the reloaded hparams differ"
    trained_on = {"dataset": "tiny"} | {key: getattr(dm, key) for key in ("ways", "shots", "queries")}
    assert reloaded.trained_on == trained_on, f"trained_on {reloaded.trained_on}"
    _assert_same_state(reloaded, model.state_dict(), "loading")
    assert_approx(tiny_trainer().test(reloaded, dm, verbose=False)[0], result, what="the reloaded model's test")


def _prefixed(what: str) -> Callable[[str], str]:
    """``torch.testing.assert_close``'s message, after ``what``."""
    return lambda message: f"{what}: {message}"


def _batch_mates_do_not_matter(spec: AlgorithmSpec) -> None:
    """An episode's loss, accuracy and difficulty are the same alone and among other episodes, in training (unless
    it draws dropout masks) and in evaluation."""
    for training in (True, False) if spec.deterministic_training else (False,):
        pl.seed_everything(0)
        model = spec.make()
        dm = spec.datamodule()
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
                getattr(together, name).detach(),
                torch.cat([getattr(out, name).detach() for out in alone]),
                msg=_prefixed(f"{name} in {'training' if training else 'evaluation'}"),
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

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, *args: object) -> None:
        self.losses.append(outputs["loss"].detach())


def _weights_multiply_each_episodes_loss(spec: AlgorithmSpec) -> None:
    """The training loss is ``Σ w L / ESS`` of the episodes' losses, and the weighting strategy is given their
    difficulties (FEAT's: the main cross-entropy, without the regulariser that is in its loss)."""
    pl.seed_everything(0)
    module = spec.make()
    weighting, recorder, outputs = _Weights(), _LossRecorder(), []
    module.weighting = weighting
    episode_losses = module.episode_losses

    def record(batch: Episode) -> EpisodeOutput:
        outputs.append(episode_losses(batch))
        return outputs[-1]

    module.episode_losses = record  # type: ignore[method-assign]
    tiny_trainer(max_steps=2, limit_val_batches=0, callbacks=[recorder]).fit(module, spec.datamodule())
    assert len(outputs) == len(recorder.losses) == len(weighting.difficulties) == 2, "two training steps"
    for out, loss, difficulties in zip(outputs, recorder.losses, weighting.difficulties, strict=True):
        torch.testing.assert_close(difficulties, out.difficulty, msg=_prefixed("the difficulties weighted"))
        w = torch.arange(1.0, len(difficulties) + 1, dtype=torch.float64)
        expected = (w * out.losses.detach().double()).sum() / (w.sum() ** 2 / (w**2).sum())
        torch.testing.assert_close(
            loss.double(), expected, rtol=1e-5, atol=1e-6, msg=_prefixed("the loss is not sum w L / ESS")
        )


#: the properties of the algorithm contract, by name, in the order :func:`check_algorithm` checks them
ALGORITHM_CHECKS: dict[str, Check[AlgorithmSpec]] = {
    "rejects_bad_configs": Check(_rejects_bad_configs, lambda spec: bool(spec.bad_configs)),
    "checks_the_base_arguments": Check(_checks_the_base_arguments),
    "help_lists_every_argument": Check(_help_lists_every_argument),
    "builds_by_class_path": Check(_builds_by_class_path),
    "evaluation_changes_nothing": Check(_evaluation_changes_nothing),
    "reloads_from_its_class_path": Check(_reloads_from_its_class_path),
    "batch_mates_do_not_matter": Check(_batch_mates_do_not_matter),
    "weights_multiply_each_episodes_loss": Check(_weights_multiply_each_episodes_loss),
}


def check_algorithm(spec: AlgorithmSpec, checks: Iterable[str] | None = None) -> None:
    """Check that an algorithm keeps the contract of every algorithm (a few seconds on a CPU):

    - ``rejects_bad_configs``: the spec's ``bad_configs`` are rejected at construction with their messages;
    - ``checks_the_base_arguments``: so are the base's (:data:`BASE_BAD_CONFIGS`);
    - ``help_lists_every_argument``: ``lightning-episodes fit --model.help CLASS`` lists every argument, the base's
      included, with its default and a description;
    - ``builds_by_class_path``: ``--model CLASS`` builds it with its defaults;
    - ``evaluation_changes_nothing``: validation and testing, in each of its ``eval_batch_norms``, change no parameter
      or buffer, leave no gradient and give an accuracy in [0, 1];
    - ``reloads_from_its_class_path``: a checkpoint of it after two steps names its class path, and reloads
      (:func:`~lightning_episodes.algorithms.load_episodic_module`) with its hyperparameters, its state and its test
      results;
    - ``batch_mates_do_not_matter``: an episode's loss, accuracy and difficulty are the same alone and in a batch;
    - ``weights_multiply_each_episodes_loss``: the training loss is ``Σ w L / ESS`` of the episodes' whole losses and
      the weighting is given their difficulties.

    Args:
        spec: the algorithm and its small options.
        checks: names of :data:`ALGORITHM_CHECKS` to run (default: all).

    Raises:
        AssertionError: naming the algorithm and the first property it breaks.
    """
    run_checks(ALGORITHM_CHECKS, spec, checks)

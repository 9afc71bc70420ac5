"""bf16-mixed precision, the channels_last layout and a compiled backbone, through the real Trainer on the CPU.

Each algorithm trains two steps on the tiny dataset (3 channels, so that the first convolution's input has a
layout to check) and validates. The reference for every option is the same run without it, in float32 and the
default (contiguous) layout: same seed, same initial weights, same episodes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from torch import Tensor, nn
from torch._dynamo.utils import counters

from lightning_episodes import ANIL, FEAT, MAML, EpisodicDataModule, EpisodicModule, Pretrain, ProtoNet
from lightning_episodes.callbacks.reference import load_reference
from lightning_episodes.models import EpisodicBackbone
from lightning_episodes.testing.algorithms import build_cli
from tests.helpers import tiny_datamodule, tiny_trainer

TINY = {"in_channels": 3, "image_size": 16}

ALGORITHMS: dict[str, Callable[..., EpisodicModule]] = {
    "protonet-euclidean": lambda **o: ProtoNet(**TINY, **o),
    "protonet-cosine": lambda **o: ProtoNet(**TINY, distance="cosine", **o),
    "maml": lambda **o: MAML(**TINY, ways=5, adaptation_steps=2, **o),
    "anil": lambda **o: ANIL(**TINY, ways=5, adaptation_steps=2, **o),
    "feat": lambda **o: FEAT(backbone="conv4", **TINY, **o),
    "pretrain": lambda **o: Pretrain(backbone="conv4", **TINY, **o),
    # residual blocks, 1x1 shortcut convolutions, LeakyReLU and average pooling, at a tenth of FEAT's widths (the
    # layers, not their sizes, are what a layout or a precision reaches; at full width a bfloat16 step takes minutes
    # on a CPU that emulates it); without dropout, which draws its mask in memory order, so that the two layouts
    # would drop different (equally likely) units
    "feat-resnet12": lambda **o: FEAT(
        backbone="resnet12-wide", backbone_options={"drop_rate": 0.0, "widths": (8, 16, 32, 64)}, **TINY, **o
    ),
}
CASES = list(ALGORITHMS)


def _datamodule(algorithm: str) -> EpisodicDataModule:
    sizes: dict[str, Any] = {"channels": 3, "val_episodes": 8, "episodes_per_batch": 2}
    if algorithm == "pretrain":  # a training "episode" of all 12 training classes is a class-balanced batch
        sizes.update(ways=12, shots=1, queries=1, eval_ways=5, eval_shots=2, eval_queries=3)
    return tiny_datamodule(**sizes)


def _sgd(params: Any) -> torch.optim.Optimizer:
    # SGD, not Adam: Adam turns the rounding noise of the conv biases' zero gradient (see Conv4) into full steps
    return torch.optim.SGD(params, lr=0.05)


class Recorder(Callback):
    """Every step's loss, the first step's gradients, and the layout of every convolution's input."""

    def __init__(self, layout: bool = True) -> None:
        self.layout = layout  # hooks on the convolutions (not inside a compiled backbone)
        self.losses: list[float] = []
        self.grads: dict[str, Tensor] = {}
        self.conv_inputs: dict[str, list[bool]] = {"train": [], "validate": []}  # channels_last or not
        self.conv_dtypes: set[torch.dtype] = set()  # of the convolutions' outputs

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not self.layout:
            return

        def record_input(module: nn.Module, args: tuple[Tensor, ...]) -> None:
            stage = "train" if pl_module.training else "validate"
            self.conv_inputs[stage].append(args[0].is_contiguous(memory_format=torch.channels_last))

        def record_output(module: nn.Module, args: tuple[Tensor, ...], output: Tensor) -> None:
            self.conv_dtypes.add(output.dtype)

        for module in pl_module.modules():
            if isinstance(module, nn.Conv2d):
                module.register_forward_pre_hook(record_input)
                module.register_forward_hook(record_output)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        if trainer.global_step == 0:
            self.grads = {n: p.grad.clone() for n, p in pl_module.named_parameters() if p.grad is not None}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any) -> None:
        self.losses.append(float(outputs["loss"]))


class Run(NamedTuple):
    model: EpisodicModule
    recorder: Recorder
    metrics: dict[str, float]


def _fit(algorithm: str, precision: str = "32-true", **options: Any) -> Run:
    """Two training steps, then validation on 8 episodes."""
    pl.seed_everything(0, verbose=False)
    model = ALGORITHMS[algorithm](optimizer=_sgd, **options)
    recorder = Recorder(layout=not options.get("compile_backbone"))
    trainer = tiny_trainer(max_steps=2, val_check_interval=2, precision=precision, callbacks=[recorder])
    trainer.fit(model, _datamodule(algorithm))
    return Run(model, recorder, {k: float(v) for k, v in trainer.callback_metrics.items()})


@pytest.fixture(scope="module")
def reference_runs() -> dict[tuple[str, str], Run]:
    """The contiguous runs without the option under test, by (algorithm, precision), computed once."""
    return {}


def _reference(cache: dict[tuple[str, str], Run], algorithm: str, precision: str = "32-true") -> Run:
    if (algorithm, precision) not in cache:
        cache[algorithm, precision] = _fit(algorithm, precision=precision)
    return cache[algorithm, precision]


@pytest.mark.parametrize("algorithm", CASES)
def test_bf16_mixed_trains_and_validates_close_to_float32(
    reference_runs: dict[tuple[str, str], Run], algorithm: str
) -> None:
    reference = _reference(reference_runs, algorithm)
    run = _fit(algorithm, precision="bf16-mixed")
    assert all(torch.isfinite(torch.tensor(run.recorder.losses)))
    assert torch.isfinite(torch.tensor([run.metrics["val/loss"], run.metrics["val/acc"]])).all()
    assert run.metrics["val/episodes"] == 8
    assert all(p.dtype == torch.float32 for p in run.model.parameters())  # mixed: the weights stay float32
    assert run.recorder.conv_dtypes == {torch.bfloat16}  # and the convolutions compute in bf16
    assert reference.recorder.conv_dtypes == {torch.float32}
    # the same initial weights and episodes: bf16 keeps 8 significant bits (rounding 2^-9 = 0.2% per
    # operation); measured: 0.02-0.3% from the float32 loss
    assert run.recorder.losses[0] == pytest.approx(reference.recorder.losses[0], rel=2e-2)


@pytest.mark.parametrize("algorithm", CASES)
def test_channels_last_matches_contiguous_and_reaches_every_convolution(
    reference_runs: dict[tuple[str, str], Run], algorithm: str
) -> None:
    # ResNet-12 in float64: in float32 the two layouts' rounding (different summation orders) flips the odd
    # LeakyReLU sign or max-pool winner among its activations, and each flip moves a weight's gradient
    # by ~0.1% (as it does between float32 and float64); in float64 what remains is the layout's arithmetic
    precision = "64-true" if "resnet" in algorithm else "32-true"
    contiguous = _reference(reference_runs, algorithm, precision)
    run = _fit(algorithm, precision=precision, channels_last=True)

    # every convolution saw channels_last inputs, in training and in validation, and none did without the option
    for stage in ("train", "validate"):
        assert run.recorder.conv_inputs[stage], stage
        assert all(run.recorder.conv_inputs[stage]), stage
        assert not any(contiguous.recorder.conv_inputs[stage]), stage
    convolutions = [m.weight for m in run.model.modules() if isinstance(m, nn.Conv2d)]
    assert all(w.is_contiguous(memory_format=torch.channels_last) for w in convolutions)

    # the same numbers up to rounding (the layouts sum in different orders)
    assert_same_training(run, contiguous)


def assert_same_training(run: Run, expected: Run) -> None:
    """The same losses, first gradient, parameters after two SGD steps and validation results, up to rounding."""
    assert run.recorder.losses == pytest.approx(expected.recorder.losses, rel=1e-4)
    grads = run.recorder.grads
    assert grads.keys() == expected.recorder.grads.keys()
    # the conv biases' true gradient is 0 (batch norm follows), so theirs is rounding noise: absolute errors
    # are measured against the largest gradient of the model
    scale = max(float(g.abs().max()) for g in expected.recorder.grads.values())
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected.recorder.grads[name], rtol=1e-4, atol=1e-5 * scale, msg=name)
    after = dict(run.model.named_parameters())
    for name, parameter in expected.model.named_parameters():
        torch.testing.assert_close(after[name], parameter, rtol=1e-4, atol=1e-6, msg=name)
    assert run.metrics["val/loss"] == pytest.approx(expected.metrics["val/loss"], rel=1e-4)
    assert run.metrics["val/acc"] == pytest.approx(expected.metrics["val/acc"], abs=1e-6)


def test_bf16_mixed_with_channels_last_trains(reference_runs: dict[tuple[str, str], Run]) -> None:
    """The combination a GPU run would use."""
    reference = _reference(reference_runs, "protonet-euclidean")
    run = _fit("protonet-euclidean", precision="bf16-mixed", channels_last=True)
    assert all(run.recorder.conv_inputs["train"])
    assert all(run.recorder.conv_inputs["validate"])
    assert run.recorder.conv_dtypes == {torch.bfloat16}
    assert run.recorder.losses[0] == pytest.approx(reference.recorder.losses[0], rel=2e-2)
    assert torch.isfinite(torch.tensor(run.metrics["val/loss"]))


def test_channels_last_survives_a_checkpoint_and_the_command_line(tmp_path: Path) -> None:
    pl.seed_everything(0, verbose=False)
    trainer = tiny_trainer(max_steps=1, limit_val_batches=0)
    trainer.fit(ALGORITHMS["maml"](channels_last=True), _datamodule("maml"))
    path = tmp_path / "maml.ckpt"
    trainer.save_checkpoint(path)

    reloaded = MAML.load_from_checkpoint(path)
    assert reloaded.hparams["channels_last"] is True
    assert reloaded.channels_last
    recorder = Recorder()
    tiny_trainer(callbacks=[recorder]).validate(reloaded, _datamodule("maml"), verbose=False)
    assert recorder.conv_inputs["validate"]
    assert all(recorder.conv_inputs["validate"])

    # an offline reference runs in the layout it was trained in
    reference = load_reference(path)
    assert reference.backbone.channels_last
    assert reference.backbone.blocks[0].conv.weight.is_contiguous(memory_format=torch.channels_last)

    cli = build_cli("--model", "ProtoNet", "--model.channels_last", "true")
    assert cli.model.channels_last is True
    assert build_cli("--model", "ANIL").model.channels_last is False


def test_use_channels_last_converts_the_convolutions_and_the_backbone_inputs() -> None:
    model = ALGORITHMS["feat"]()
    model.use_channels_last()
    model.use_channels_last()  # idempotent
    backbones = [m for m in model.modules() if isinstance(m, EpisodicBackbone)]
    assert backbones
    assert all(b.channels_last for b in backbones)
    for name, parameter in model.named_parameters():
        if parameter.dim() == 4:  # convolutions
            assert parameter.is_contiguous(memory_format=torch.channels_last), name
            assert not parameter.is_contiguous(), name
        else:  # everything else is left as it was
            assert parameter.is_contiguous(), name


# -- torch.compile ----------------------------------------------------------------------------------------------------


@pytest.mark.slow  # compiling the training and evaluation graphs takes 1-2 minutes on 2 cores
@pytest.mark.parametrize("algorithm", ["protonet-euclidean", "anil"])
def test_compiled_backbone_trains_like_eager(reference_runs: dict[tuple[str, str], Run], algorithm: str) -> None:
    eager = _reference(reference_runs, algorithm)
    torch._dynamo.reset()
    counters["stats"].clear()
    run = _fit(algorithm, compile_backbone=True)
    assert counters["stats"]["unique_graphs"] >= 2  # training and evaluation graphs really were compiled
    assert_same_training(run, eager)
    torch._dynamo.reset()


def test_compile_backbone_compiles_in_place_once_and_maml_refuses_it() -> None:
    model = ALGORITHMS["protonet-euclidean"](compile_backbone=True)
    names = list(model.state_dict())
    model.configure_model()  # what the Trainer calls; compilation itself happens at the first forward
    compiled = model.backbone._compiled_call_impl
    assert compiled is not None
    model.configure_model()
    assert model.backbone._compiled_call_impl is compiled  # not compiled again by a later fit or test
    assert list(model.state_dict()) == names  # in place: checkpoints keep their parameter names
    assert build_cli("--model", "FEAT", "--model.compile_backbone", "true").model.compile_backbone is True
    with pytest.raises(ValueError, match="compile_backbone=true does not speed up MAML"):
        ALGORITHMS["maml"](compile_backbone=True)
    assert ALGORITHMS["anil"](compile_backbone=True).compile_backbone  # ANIL's backbone runs once per batch

"""``EpisodicModule(cuda_graphs=True)``: refused in one line where the step cannot be captured (tested here, on
the CPU); on CUDA, the graphed fit ends with the eager fit's parameters for every weighting arm (CUDA-only)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from lightning_episodes import MAML, ProtoNet
from lightning_episodes.algorithms.graphs import check_cuda_graphs
from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.cli import main
from lightning_episodes.console import TOOLS, run
from tests.helpers import tiny_cli_options, tiny_datamodule, tiny_trainer


def _trainer(device: str = "cuda", world_size: int = 1, precision: str = "32-true", accumulate: int = 1) -> Any:
    strategy = SimpleNamespace(root_device=torch.device(device))
    return SimpleNamespace(
        strategy=strategy, world_size=world_size, precision=precision, accumulate_grad_batches=accumulate
    )


@pytest.mark.parametrize(
    ("module", "trainer", "message"),
    [
        (lambda: ProtoNet(image_size=16, cuda_graphs=True), _trainer("cpu"), "needs a CUDA device .* device is cpu"),
        (lambda: ProtoNet(image_size=16, cuda_graphs=True), _trainer("mps"), "needs a CUDA device .* device is mps"),
        (lambda: MAML(image_size=16, cuda_graphs=True), _trainer(), "is not available for MAML"),
        (lambda: ProtoNet(image_size=16, cuda_graphs=True), _trainer(world_size=2), "runs on one device only"),
        (
            lambda: ProtoNet(image_size=16, cuda_graphs=True),
            _trainer(accumulate=2),
            "needs trainer.accumulate_grad_batches=1, got 2",
        ),
        (
            lambda: ProtoNet(image_size=16, cuda_graphs=True),
            _trainer(precision="bf16-mixed"),
            "needs trainer.precision 32-true, bf16-true or 16-true, got bf16-mixed",
        ),
        (
            lambda: ProtoNet(image_size=16, cuda_graphs=True, compile_backbone=True),
            _trainer(),
            "and model.compile_backbone=true exclude each other",
        ),
    ],
)
def test_where_the_step_cannot_be_captured_it_is_refused_naming_the_option(
    module: Any, trainer: Any, message: str
) -> None:
    def check(model: Any, trainer: Any) -> None:  # as EpisodicModule.configure_model calls it
        check_cuda_graphs(trainer, type(model).__name__, type(model).supports_cuda_graphs, model.compile_backbone)

    with pytest.raises(ValueError, match=f"^model.cuda_graphs=true {message}"):
        check(module(), trainer)
    check(ProtoNet(image_size=16, cuda_graphs=True), _trainer())  # accepted on one CUDA device


def test_fitting_on_the_cpu_is_refused_and_evaluating_is_not() -> None:
    model = ProtoNet(image_size=16, cuda_graphs=True)
    with pytest.raises(ValueError, match=r"^model.cuda_graphs=true needs a CUDA device .* this run's device is cpu$"):
        tiny_trainer(max_steps=1).fit(model, tiny_datamodule())
    # a model trained with graphs evaluates anywhere (evaluation is eager)
    (results,) = tiny_trainer().validate(model, tiny_datamodule())
    assert 0 <= results["val/acc"] <= 1


@pytest.mark.slow
def test_the_command_line_refuses_it_on_the_cpu_in_one_line(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    options = {"trainer.accelerator": "cpu", "trainer.max_steps": 1, "model.cuda_graphs": "true"}
    args = ["fit", "--config=configs/quickstart.yaml", *tiny_cli_options(tmp_path, **options)]
    assert run(args, main, TOOLS) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "lightning-episodes fit: error: model.cuda_graphs=true needs a CUDA device" in err


#: the weighting arms of the numerical check (None: no callback, every weight 1)
ARMS: dict[str, dict[str, Any] | None] = {
    "no weighting": None,
    "uniform/normal/ess": {},
    "uniform/lognormal/running": {"proposal": "lognormal", "normalization": "running"},
    "uniform/empirical/truncated": {"proposal": "empirical", "normalization": "truncated", "window": 20},
    "hard/normal/self, placebo": {"target": "hard", "normalization": "self", "shuffle_weights": True},
    "curriculum/normal/psis": {"target": "curriculum", "normalization": "psis", "update": "batch"},
}


def _fit_on_cuda(cuda_graphs: bool, options: dict[str, Any] | None, steps: int = 12) -> dict[str, torch.Tensor]:
    pl.seed_everything(0)
    model = ProtoNet(image_size=16, backbone_options={"hidden": 16}, cuda_graphs=cuda_graphs)
    callbacks = [] if options is None else [DifficultyWeightingCallback(warmup_steps=4, **options)]
    trainer = tiny_trainer(accelerator="cuda", max_steps=steps, limit_val_batches=0, callbacks=callbacks)
    trainer.fit(model, tiny_datamodule())
    if cuda_graphs:
        assert model._graphed is None  # dropped at teardown
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("arm", list(ARMS))
def test_cuda_graphed_fit_ends_with_the_eager_fits_parameters(arm: str) -> None:
    """12 steps (4 of warm-up) graphed and eager: the same parameters and batch-norm statistics, within float32
    rounding (rtol 1e-5, atol 1e-6); the same kernels run in both, so the difference is expected to be 0 (printed
    for the record)."""
    eager, graphed = _fit_on_cuda(False, ARMS[arm]), _fit_on_cuda(True, ARMS[arm])
    worst = max(float((eager[k].double() - graphed[k].double()).abs().max()) for k in eager)
    print(f"{arm}: largest |graphed - eager| = {worst:.3g}; bitwise equal: {worst == 0.0}")
    for name in eager:
        torch.testing.assert_close(graphed[name], eager[name], rtol=1e-5, atol=1e-6, msg=name)

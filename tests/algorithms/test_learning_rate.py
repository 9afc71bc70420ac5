"""A learning rate that is not > 0 is refused when the module is built, in one line naming the option: at lr 0 the
model never changes, and ``--test_after_fit`` recorded an untrained model's accuracy as the run's."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from lightning_episodes.algorithms import FEAT, ProtoNet
from lightning_episodes.cli import entry

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "optimizer",
    [
        partial(torch.optim.Adam, lr=0.0),
        partial(torch.optim.SGD, lr=0),
        lambda params: torch.optim.SGD([{"params": params, "lr": 0.0}], lr=0.1),  # a group's own rate
    ],
)
def test_an_optimizer_at_lr_0_is_refused_at_construction(optimizer: object) -> None:
    with pytest.raises(ValueError, match=r"^model\.optimizer\.lr must be > 0, got 0\.0$"):
        ProtoNet(image_size=16, optimizer=optimizer)  # type: ignore[arg-type]


def test_positive_rates_and_the_defaults_are_accepted() -> None:
    ProtoNet(image_size=16, optimizer=partial(torch.optim.SGD, lr=1e-6))
    ProtoNet(image_size=16)  # Adam at 1e-3
    FEAT(backbone="conv4", image_size=16)  # its own SGD at 2e-4


def test_a_factory_that_fails_for_another_reason_is_left_to_the_optimisers_own_check() -> None:
    # lr -1: torch refuses it where the optimiser is built, and the command line names the option then
    model = ProtoNet(image_size=16, optimizer=partial(torch.optim.Adam, lr=-1.0))
    with pytest.raises(ValueError, match="Invalid learning rate: -1.0"):
        model.configure_optimizers()


@pytest.mark.parametrize(
    "args",
    [
        ["--model.optimizer.init_args.lr", "0"],
        ["--model.optimizer", "torch.optim.SGD", "--model.optimizer.init_args.lr", "0.0"],
    ],
)
def test_the_command_line_refuses_lr_0_in_one_line_before_anything_runs(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the quickstart config writes under ./runs
    config = str(ROOT / "configs/quickstart.yaml")
    assert entry(["fit", "--config", config, *args, "--test_after_fit", "true"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert line == "lightning-episodes fit: error: model.optimizer.lr must be > 0, got 0.0"
    assert not (tmp_path / "runs").exists()  # no folder, no checkpoint, no test record

"""Learning-rate schedules: the closed forms by hand, their properties, every ``configs/schedules`` file with every
algorithm through the real CLI (the logged ``train/lr`` against the formula), a killed and resumed run bit for bit,
and a schedule that needs ``trainer.max_steps`` refused in one line when there is none."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_episodes.algorithms.schedules import CosineToZero, LinearToZero, check_schedule
from lightning_episodes.cli import DEFAULT_CHECKPOINT, entry, main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SCHEDULES = sorted(CONFIGS.glob("schedules/*.yaml"))
ALGORITHMS = {
    "ProtoNet": {},
    "MAML": {"adaptation_steps": 1},
    "ANIL": {"adaptation_steps": 1},
    "FEAT": {"backbone": "conv4", "dropout": 0.0},
}
LR = 0.01


def _optimizer(lr: float = LR) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)


def _rates(scheduler: torch.optim.lr_scheduler.LRScheduler, steps: int) -> list[float]:
    """The learning rate of each of ``steps`` optimiser steps (the rate in force when the step runs)."""
    rates = []
    for _ in range(steps):
        rates.append(scheduler.optimizer.param_groups[0]["lr"])
        scheduler.optimizer.step()
        scheduler.step()
    return rates


def test_the_closed_forms_by_hand() -> None:
    cosine = CosineToZero(_optimizer(), max_steps=4)
    # lr_0 (1 + cos(pi t / 4)) / 2 for t = 0..5: 1, (1 + 1/sqrt2)/2, 1/2, (1 - 1/sqrt2)/2, 0, 0
    half = 0.5 / math.sqrt(2)
    assert _rates(cosine, 6) == pytest.approx([LR * f for f in (1, 0.5 + half, 0.5, 0.5 - half, 0, 0)], abs=1e-15)
    linear = LinearToZero(_optimizer(), start=2, max_steps=6)
    # flat until step 2, then (6 - t) / 4 of lr_0
    assert _rates(linear, 8) == pytest.approx([LR * f for f in (1, 1, 1, 0.75, 0.5, 0.25, 0, 0)], abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(0, 50),
    length=st.integers(1, 60),
    lr=st.floats(1e-5, 1.0),
    kind=st.sampled_from([CosineToZero, LinearToZero]),
)
def test_an_anneal_is_flat_then_falls_to_zero(start: int, length: int, lr: float, kind: type) -> None:
    scheduler = kind(_optimizer(lr), start=start, max_steps=start + length)
    rates = _rates(scheduler, start + length + 3)
    assert rates[: start + 1] == [lr] * (start + 1)
    assert all(later <= earlier for earlier, later in zip(rates, rates[1:], strict=False))
    assert all(0.0 <= rate <= lr for rate in rates)
    assert rates[start + length :] == [0.0] * 3


def test_a_resumed_schedule_continues_the_same_rates() -> None:
    straight = _rates(CosineToZero(_optimizer(), start=3, max_steps=11), 12)
    first = CosineToZero(_optimizer(), start=3, max_steps=11)
    before = _rates(first, 5)
    state = first.state_dict()
    assert "max_steps" not in state, "the run's length is the Trainer's, bound again on resume"
    # as Lightning resumes: a new optimiser and schedule, bound to the run, then both states loaded
    optimizer = _optimizer()
    resumed = CosineToZero(optimizer)
    check_schedule(resumed, 11)
    optimizer.load_state_dict(first.optimizer.state_dict())
    resumed.load_state_dict(state)
    assert before + _rates(resumed, 7) == straight


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: CosineToZero(_optimizer(), start=-1), "start must be >= 0"),
        (lambda: check_schedule(CosineToZero(_optimizer()), None), "trainer.max_steps, which is not set"),
        (lambda: check_schedule(LinearToZero(_optimizer()), -1), "trainer.max_steps, which is not set"),
        (lambda: LinearToZero(_optimizer(), start=100, max_steps=100), r"max_steps \(100\) must be larger"),
    ],
)
def test_bad_lengths_are_clear_errors(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_stepping_an_unbound_anneal_past_its_start_is_an_error() -> None:
    scheduler = LinearToZero(_optimizer(), start=1)
    scheduler.optimizer.step()
    scheduler.step()  # at its start: still the initial rate, no length needed
    scheduler.optimizer.step()
    with pytest.raises(RuntimeError, match="before it was bound"):
        scheduler.step()


def _config(folder: Path, algorithm: str, max_steps: int = 6, crash_at: int | None = None) -> Path:
    """A tiny fit of ``algorithm`` on the tiny dataset, a CSV logger writing every step and last.ckpt every 2."""
    checkpoint = {**DEFAULT_CHECKPOINT, "init_args": {**DEFAULT_CHECKPOINT["init_args"], "last_every_n_steps": 2}}
    callbacks: list[dict[str, Any]] = [checkpoint]
    if crash_at is not None:
        callbacks.insert(
            0, {"class_path": "tests.callbacks.test_checkpointing.CrashAt", "init_args": {"step": crash_at}}
        )
    config = {
        "seed_everything": 0,
        "trainer": {
            "default_root_dir": str(folder),
            "logger": {"class_path": "pytorch_lightning.loggers.CSVLogger", "init_args": {"save_dir": str(folder)}},
            "callbacks": callbacks,
            "max_steps": max_steps,
            "val_check_interval": max_steps,
            "check_val_every_n_epoch": None,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
        "model": {
            "class_path": f"lightning_episodes.algorithms.{algorithm}",
            "init_args": {
                "backbone_options": {"hidden": 8},
                "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": LR}},
                **ALGORITHMS[algorithm],
            },
        },
        "data": {
            "init_args": {
                "dataset": "tiny",
                "image_size": 16,
                "shots": 2,
                "queries": 3,
                "episodes_per_batch": 2,
                "val_episodes": 4,
                "test_episodes": 4,
            }
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"config{'' if crash_at is None else '-crash'}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _logged_rates(folder: Path) -> dict[int, float]:
    (metrics,) = folder.rglob("metrics.csv")
    with metrics.open(newline="") as handle:
        return {int(row["step"]): float(row["train/lr"]) for row in csv.DictReader(handle) if row.get("train/lr")}


#: what each config's schedule gives at steps 0..5 of a 6-step run, with the overrides below (made visible in 6 steps)
EXPECTED = {
    "constant": [1.0] * 6,
    "step": [1, 1, 0.5, 0.5, 0.25, 0.25],
    "cosine": [0.5 * (1 + math.cos(math.pi * t / 6)) for t in range(6)],
    "linear": [1, 1, 1, 0.75, 0.5, 0.25],
}
OVERRIDES = {
    "constant": [],
    "step": ["--model.init_args.lr_scheduler.init_args.step_size=2"],
    "cosine": [],
    "linear": ["--model.init_args.lr_scheduler.init_args.start=2"],
}


def test_every_schedule_config_is_tested() -> None:
    assert {p.stem for p in SCHEDULES} == set(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("schedule", [p.stem for p in SCHEDULES])
def test_every_schedule_with_every_algorithm_from_the_cli(tmp_path: Path, schedule: str, algorithm: str) -> None:
    config = _config(tmp_path, algorithm)
    main(
        ["fit", "--config", str(config), "--config", str(CONFIGS / f"schedules/{schedule}.yaml"), *OVERRIDES[schedule]]
    )
    logged = _logged_rates(tmp_path)
    assert sorted(logged) == list(range(6))
    assert [logged[t] for t in range(6)] == pytest.approx([LR * f for f in EXPECTED[schedule]], rel=1e-6, abs=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["step", "cosine", "linear"])
def test_a_killed_run_resumes_its_schedule_bit_for_bit(tmp_path: Path, schedule: str) -> None:
    """Killed before step 5 (last.ckpt at step 4), resumed with --ckpt_path last: the same weights and rates as an
    uninterrupted run."""
    extra = ["--config", str(CONFIGS / f"schedules/{schedule}.yaml"), *OVERRIDES[schedule]]
    main(["fit", "--config", str(_config(tmp_path / "straight", "ProtoNet")), *extra])
    run = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="CRASH"):
        main(["fit", "--config", str(_config(run, "ProtoNet", crash_at=5)), *extra])
    main(["fit", "--config", str(_config(run, "ProtoNet")), *extra, "--ckpt_path", "last"])

    def final(folder: Path) -> dict[str, Any]:
        (last,) = folder.rglob("last.ckpt")
        return torch.load(last, map_location="cpu", weights_only=True)

    straight, resumed = final(tmp_path / "straight"), final(run)
    assert resumed["global_step"] == straight["global_step"] == 6
    for name, tensor in straight["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], tensor), name
    assert resumed["lr_schedulers"] == straight["lr_schedulers"]
    assert _logged_rates(run) == _logged_rates(tmp_path / "straight")


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_an_anneal_without_max_steps_is_one_line_at_start(
    tmp_path: Path, schedule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, "ProtoNet")
    args = ["fit", "--config", str(config), "--config", str(CONFIGS / f"schedules/{schedule}.yaml")]
    assert entry([*args, "--trainer.max_steps=-1", "--trainer.max_epochs=1"]) == 2
    error = capsys.readouterr().err
    assert "anneals to 0 at trainer.max_steps, which is not set: set --trainer.max_steps N" in error
    assert "Traceback" not in error
    assert not list(tmp_path.rglob("*.ckpt")), "refused before training"

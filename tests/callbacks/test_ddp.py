"""Two CPU processes (gloo, fork) against one: the same gradient, estimates and weights on the same global batch.

Fork children return only ``callback_metrics`` to the parent, so each process writes what it saw to a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from lightning_episodes import ProtoNet
from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.weighting import available_normalizers, available_proposals
from tests.helpers import same_state, tiny_datamodule, tiny_trainer

WARMUP, STEPS = 2, 4


class Probe(DifficultyWeightingCallback):
    """Writes, per process and step, the global weights and difficulties, the estimates and the reduced gradient."""

    def __init__(self, folder: Path, **options: Any) -> None:
        super().__init__(**options)
        self.folder = folder
        self.grads: dict[int, torch.Tensor] = {}
        self.records: list[dict[str, Any]] = []

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        # after DDP's all-reduce: the gradient every rank steps with
        grads = [p.grad.flatten() for p in pl_module.parameters() if p.grad is not None]
        self.grads[trainer.global_step] = torch.cat(grads).detach().double().clone()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args)
        step = self.last_step
        assert step is not None
        self.records.append(
            {
                "step": step.step,
                "weights": step.weights.clone(),
                "raw_weights": step.raw_weights.clone() if step.raw_weights is not None else step.weights.clone(),
                "difficulties": step.difficulties.clone(),
                "mu": self.mu,  # after the step's update
                "variance": self.sigma**2,
                "grad": self.grads[step.step],
            }
        )

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        name = f"world{trainer.world_size}-rank{trainer.global_rank}.pt"
        torch.save({"records": self.records, "state": self.state_dict()}, self.folder / name)


def _run(
    devices: int, folder: Path, steps: int = STEPS, episodes: int = 4, **options: Any
) -> dict[int, dict[str, Any]]:
    pl.seed_everything(0)
    probe = Probe(folder, warmup_steps=WARMUP, **options)
    # float64: in float32, 2 x 2 episodes and 1 x 4 episodes round differently in the convolutions (1e-6), and a
    # ReLU or max-pool tie that flips with that rounding changes a whole filter's gradient by ~1e-3 after a few
    # steps; in float64 what remains is the algorithm, which must then agree to rounding
    trainer = tiny_trainer(
        devices=devices, max_steps=steps, limit_val_batches=0, callbacks=[probe], precision="64-true"
    )
    model = ProtoNet(image_size=16)
    trainer.fit(model, tiny_datamodule(episodes_per_batch=episodes))
    return {r: torch.load(folder / f"world{devices}-rank{r}.pt", weights_only=True) for r in range(devices)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pl.seed_everything(0)
    trainer = tiny_trainer(max_steps=2, limit_val_batches=0)
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule())
    path = tmp_path_factory.mktemp("reference") / "protonet.ckpt"
    trainer.save_checkpoint(path)
    return path


def _registry_cases() -> dict[str, dict[str, Any]]:
    """Every registered proposal and normaliser at least once (``online`` covers ``normal`` and ``ess``), the
    proposals in turn; the first case also shuffles (the placebo)."""
    proposals, normalizations = available_proposals(), [n for n in available_normalizers() if n != "ess"]
    cases: dict[str, dict[str, Any]] = {}
    for i in range(max(len(proposals) - 1, len(normalizations))):
        proposal, normalization = proposals[(i + 1) % len(proposals)], normalizations[i % len(normalizations)]
        cases[f"{proposal}-{normalization}"] = {"proposal": proposal, "normalization": normalization}
    cases[next(iter(cases))]["shuffle_weights"] = True
    return cases


# psis gets 8 episodes a step and 6 steps so that its window (>= 21 weights) is fitted and smooths during the run
CASES = {"online": {}, "offline": {"estimate": "offline"}, **_registry_cases()}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_two_processes_match_one(tmp_path: Path, reference: Path, case: str) -> None:
    options: dict[str, Any] = dict(CASES[case])
    if case == "offline":
        options.update(reference_checkpoint=reference, offline_episodes=10)  # 5 per rank
    sizes = {"steps": 6, "episodes": 8} if "psis" in case else {}
    single = _run(1, tmp_path, **sizes, **options)[0]
    double = _run(2, tmp_path, **sizes, **options)

    # every rank holds the same estimates, weights and state
    for key in ("weights", "difficulties", "mu", "variance", "grad"):
        for ours, theirs in zip(double[0]["records"], double[1]["records"], strict=True):
            assert torch.equal(torch.as_tensor(ours[key]), torch.as_tensor(theirs[key])), key
    assert same_state(double[0]["state"], double[1]["state"])

    # and they equal one process on the same global batch
    deviations: dict[str, float] = {}
    for ours, theirs in zip(double[0]["records"], single["records"], strict=True):
        assert ours["step"] == theirs["step"]
        for key in ("weights", "raw_weights", "difficulties", "grad", "mu", "variance"):
            a, b = (torch.as_tensor(x, dtype=torch.float64) for x in (ours[key], theirs[key]))
            deviation = float((a - b).norm() / b.norm())  # relative, over the whole vector
            assert deviation < 1e-10, f"{key} at step {ours['step']}: {deviation}"
            deviations[key] = max(deviations.get(key, 0.0), deviation)
    post_warmup = [r for r in single["records"] if r["step"] >= (0 if case == "offline" else WARMUP)]
    assert post_warmup
    # the raw weights p / q (the scale-only normaliser trains every episode with weight 1, scaled by their sum w / ESS)
    assert any(not torch.equal(r["raw_weights"], torch.ones_like(r["raw_weights"])) for r in post_warmup)
    print(f"\n{case}: largest relative deviation, 2 processes vs 1: {deviations}")

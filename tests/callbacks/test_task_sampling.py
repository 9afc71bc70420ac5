"""Task samplers through the real Trainer: what the model trains on, what the sampler learns, kill-and-resume and DDP.

The data module chooses a step's classes when its batch reaches the model, from the state the earlier steps left;
``TaskSamplerFeedback`` feeds an adaptive sampler the global batch's classes and losses after each step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from lightning_episodes import FEAT, ProtoNet
from lightning_episodes.callbacks import DifficultyWeightingCallback, TaskSamplerFeedback
from lightning_episodes.cli import main
from lightning_episodes.data import (
    AdaptiveTaskSampler,
    DynamicDPP,
    HardTaskMining,
    NoDiversityBatch,
    NoDiversityTask,
    TaskSampler,
)
from tests.callbacks.helpers import CrashAt, one_and_two_processes, save_rank
from tests.helpers import tiny_datamodule, tiny_trainer


class Served(Callback):
    """Every training step's classes (global ids), images' labels and per-episode losses, as the model saw them."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, idx: int) -> None:
        identity = batch.identity
        labels = trainer.datamodule.data.labels  # type: ignore[attr-defined]
        self.steps.append(
            (
                trainer.global_step - 1,
                identity.classes.clone(),
                labels[identity.support_indices.cpu()].clone(),
                outputs["difficulties"].detach().double().clone(),
            )
        )


def _fit(sampler: TaskSampler, steps: int = 6, feedback: bool = True, **data: Any) -> tuple[Served, ProtoNet]:
    pl.seed_everything(0)
    served = Served()
    callbacks: list[Callback] = [served] + ([TaskSamplerFeedback()] if feedback else [])
    trainer = tiny_trainer(max_steps=steps, limit_val_batches=0, callbacks=callbacks)
    model = ProtoNet(image_size=16)
    trainer.fit(model, tiny_datamodule(task_sampler=sampler, **data))
    return served, model


def test_the_model_trains_on_the_samplers_classes_and_their_images() -> None:
    served, _ = _fit(NoDiversityTask(), feedback=False)
    first = set(served.steps[0][1][0].tolist())
    assert len(first) == 5
    for _, classes, support_labels, _ in served.steps:
        assert all(set(row) == first for row in classes.tolist())
        assert torch.equal(support_labels, classes[..., None].expand_as(support_labels))


@pytest.mark.parametrize("data", [{"device_cache": True}, {"num_workers": 2}], ids=["device-cache", "workers"])
def test_the_choice_does_not_depend_on_where_episodes_are_assembled(data: dict[str, Any]) -> None:
    reference, _ = _fit(HardTaskMining(warmup_steps=2, hard_fraction=0.5))
    other, _ = _fit(HardTaskMining(warmup_steps=2, hard_fraction=0.5), **data)
    for ours, theirs in zip(other.steps, reference.steps, strict=True):
        assert torch.equal(ours[1], theirs[1])


def test_hard_task_mining_serves_the_hardest_class_sets_of_the_steps_before() -> None:
    """A plain re-implementation of the buffer, fed what the model did, predicts every step's hard episodes."""
    sampler = HardTaskMining(hard_fraction=0.5, buffer_size=3, warmup_steps=2)
    served, _ = _fit(sampler, steps=6)
    buffer: dict[tuple[int, ...], float] = {}
    for step, classes, _, losses in served.steps:
        if step >= 2:
            hardest = sorted(buffer, key=lambda task: (-buffer[task], task))
            assert [tuple(sorted(row)) for row in classes[:2].tolist()] == hardest[:2], step  # round(0.5 * 4) = 2
        for row, loss in zip(classes.tolist(), losses.tolist(), strict=True):
            if math.isfinite(loss):
                buffer[tuple(sorted(row))] = loss  # tiny's classes are the split's first positions: ids = positions
        buffer = {task: buffer[task] for task in sorted(buffer, key=lambda task: (-buffer[task], task))[:3]}
    assert sampler.buffer == buffer


def test_an_adaptive_sampler_without_its_feedback_is_refused_before_training() -> None:
    with pytest.raises(ValueError, match="learns from the model: add the .*TaskSamplerFeedback callback"):
        _fit(HardTaskMining(), feedback=False)
    idle = TaskSamplerFeedback()  # the command line's default callback: idle without an adaptive sampler
    tiny_trainer(max_steps=2, limit_val_batches=0, callbacks=[idle]).fit(ProtoNet(image_size=16), tiny_datamodule())
    assert not idle.active


def test_resampling_does_not_combine_with_a_task_sampler() -> None:
    weighting = DifficultyWeightingCallback(mode="resample", warmup_steps=2)
    trainer = tiny_trainer(max_steps=2, limit_val_batches=0, callbacks=[weighting])
    with pytest.raises(ValueError, match=r"mode='resample'.*data.task_sampler=NoDiversityTask\(\)"):
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule(task_sampler=NoDiversityTask()))


#: a sampler of each kind: learning from losses, from confusions, from the class features, and one that learns nothing
KINDS: dict[str, Callable[[], TaskSampler]] = {
    "hard_task_mining": lambda: HardTaskMining(hard_fraction=0.5, buffer_size=3, warmup_steps=2),
    "adaptive": lambda: AdaptiveTaskSampler(decay=0.7, hardness=3.0),
    "dynamic_dpp": lambda: DynamicDPP(warmup_steps=2, refresh_every=2, images_per_class=2),
    "no_diversity_batch": NoDiversityBatch,
}


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_killed_and_resumed_run_chooses_and_learns_exactly_as_an_uninterrupted_one(tmp_path: Path, kind: str) -> None:
    straight, straight_model = _fit(KINDS[kind](), steps=7)

    pl.seed_everything(0)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_last=True)
    trainer = tiny_trainer(
        max_steps=7, limit_val_batches=0, enable_checkpointing=True,
        callbacks=[TaskSamplerFeedback(), checkpoint, CrashAt(4)],
    )  # fmt: skip
    first = KINDS[kind]()
    with pytest.raises(RuntimeError, match="CRASH"):
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule(task_sampler=first))
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 3
    assert saved["EpisodicDataModule"]["task_sampler"].keys() == first.state_dict().keys()

    pl.seed_everything(1)  # a different initialisation: everything must come from the checkpoint
    resumed_sampler, served = KINDS[kind](), Served()
    trainer = tiny_trainer(
        max_steps=7, limit_val_batches=0, enable_checkpointing=True,
        callbacks=[TaskSamplerFeedback(), served, ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3)],
    )  # fmt: skip
    model = ProtoNet(image_size=16)
    trainer.fit(model, tiny_datamodule(task_sampler=resumed_sampler), ckpt_path=tmp_path / "last.ckpt")
    assert [step for step, *_ in served.steps] == list(range(3, 7))
    for ours, theirs in zip(served.steps, straight.steps[3:], strict=True):
        assert torch.equal(ours[1], theirs[1])
        assert torch.equal(ours[3], theirs[3])
    for ours, theirs in zip(model.parameters(), straight_model.parameters(), strict=True):
        assert torch.equal(ours, theirs)


class Recorded(Callback):
    """Saves each rank's served classes and its sampler's final state (a forked DDP process's own copy)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.classes = folder, []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, idx: int) -> None:
        self.classes.append(batch.identity.classes.clone())

    def on_train_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        state = {"classes": self.classes, "sampler": trainer.datamodule.task_sampler.state_dict()}  # type: ignore[attr-defined]
        save_rank(self.folder, trainer, state)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_two_processes_choose_and_learn_as_one(tmp_path: Path, kind: str) -> None:
    """Under DDP each rank serves its slice of the one-process batch and every rank learns the same state, bit for
    bit; it is the one process's to the rounding of float64 convolutions over other batch sizes (class features: of
    the model's parameters after some Adam steps, whose normalised updates carry that rounding further)."""

    def fit(devices: int) -> None:
        trainer = tiny_trainer(
            devices=devices, max_steps=6, limit_val_batches=0, precision="64-true",
            callbacks=[TaskSamplerFeedback(), Recorded(tmp_path)],
        )  # fmt: skip
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule(task_sampler=KINDS[kind]()))

    single, (first, second) = one_and_two_processes(tmp_path, fit)
    for step, whole in enumerate(single["classes"]):
        assert torch.equal(torch.cat([first["classes"][step], second["classes"][step]]), whole), step
    for key, value in single["sampler"].items():
        assert torch.equal(first["sampler"][key], second["sampler"][key]), key
        if not value.is_floating_point():
            assert torch.equal(first["sampler"][key], value), key
        elif key == "features":
            torch.testing.assert_close(first["sampler"][key], value, rtol=1e-6, atol=1e-9)
        else:
            torch.testing.assert_close(first["sampler"][key], value, rtol=1e-10, atol=1e-12)
    assert first["sampler"].keys() == single["sampler"].keys()


TASK_SAMPLING = sorted(Path("configs/task_sampling").glob("*.yaml"))


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart config with every output, checkpoints included, under a temporary folder."""
    folder = tmp_path_factory.mktemp("cli")
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config["trainer"]["default_root_dir"] = config["trainer"]["logger"]["init_args"]["save_dir"] = str(folder)
    config["trainer"]["callbacks"][0]["init_args"]["dirpath"] = str(folder / "checkpoints")
    path = folder / "base.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def reference(quickstart: Path) -> Path:
    """A plainly trained model's checkpoint (2 steps of the quickstart on the tiny data), made once."""
    path = quickstart.parent / "reference.ckpt"
    if not path.exists():
        cli = main([
            "fit", "--config", str(quickstart), "--data.dataset=tiny", "--data.image_size=16", "--data.shots=2",
            "--data.queries=3", "--trainer.max_steps=2", "--trainer.limit_val_batches=0",
            "--trainer.enable_progress_bar=false",
        ])  # fmt: skip
        cli.trainer.save_checkpoint(path)
    return path


def test_every_task_sampling_config_names_its_sampler_and_nothing_else() -> None:
    classes = {
        path.stem: yaml.safe_load(path.read_text())["data"]["init_args"]["task_sampler"] for path in TASK_SAMPLING
    }
    assert set(classes) == {
        "adaptive", "hard_task_mining", "no_diversity_task", "no_diversity_batch", "no_diversity_tasks_per_batch",
        "static_dpp", "dynamic_dpp",
    }  # fmt: skip
    for path in TASK_SAMPLING:
        config = yaml.safe_load(path.read_text())
        assert list(config) == ["data"]
        assert list(config["data"]) == ["init_args"]
        assert list(config["data"]["init_args"]) == ["task_sampler"]


@pytest.mark.slow
@pytest.mark.parametrize("path", TASK_SAMPLING, ids=lambda p: p.stem)
def test_each_task_sampler_trains_and_tests_through_the_cli_beside_a_weighting_scheme(
    quickstart: Path, path: Path
) -> None:
    """Each config composes after the quickstart and with the paper's weighting; the record names the sampler."""
    args = [
        "fit", "--config", str(quickstart), "--config", str(path), "--config", "configs/sampling/uniform_online.yaml",
        "--data.dataset=tiny", "--data.image_size=16", "--data.shots=2", "--data.queries=3",
        "--data.val_episodes=4", "--data.test_episodes=4", "--trainer.max_steps=4", "--trainer.val_check_interval=4",
        "--trainer.num_sanity_val_steps=0", "--trainer.enable_progress_bar=false", "--trainer.callbacks.warmup_steps=2",
        "--test_after_fit=true",
    ]  # fmt: skip
    if path.stem in ("hard_task_mining", "dynamic_dpp"):
        args.append("--data.task_sampler.init_args.warmup_steps=2")
    if path.stem == "static_dpp":
        args.append(f"--data.task_sampler.init_args.reference_checkpoint={reference(quickstart)}")
    cli = main(args)
    sampler = cli.datamodule.task_sampler
    expected = yaml.safe_load(path.read_text())["data"]["init_args"]["task_sampler"]["class_path"]
    assert f"{type(sampler).__module__.rsplit('.', 1)[0]}.{type(sampler).__name__}" == expected
    assert any(isinstance(c, TaskSamplerFeedback) for c in cli.trainer.callbacks)  # the command line's default
    record = json.loads((Path(cli.trainer.log_dir) / "test_results.json").read_text())
    assert record["data"]["task_sampler"] == sampler.config()  # its class path and init_args, not its repr
    assert record["data"]["task_sampler"]["init_args"] == sampler.init_args
    assert record["sampling"]["target"] == "uniform"


class Confusions(Callback):
    """Each step's classes, query labels and query logits, as the model produced them."""

    def __init__(self) -> None:
        self.steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, idx: int) -> None:
        self.steps.append((batch.identity.classes.clone(), batch.query_labels.clone(), outputs["query_logits"].clone()))


def test_adaptive_sampling_learns_the_confusions_the_model_made() -> None:
    """The potentials after a fit, recomputed by hand from every step's query logits: log C <- decay log C +
    hardness (S + S^T) over each episode's pairs, S the mean softmax of a class's queries."""
    sampler, recorded = AdaptiveTaskSampler(decay=0.7, hardness=3.0), Confusions()
    pl.seed_everything(0)
    trainer = tiny_trainer(max_steps=5, limit_val_batches=0, callbacks=[recorded, TaskSamplerFeedback()])
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule(task_sampler=sampler))
    expected = torch.zeros(12, 12, dtype=torch.float64)  # tiny's 12 training classes: ids = positions
    for classes, labels, logits in recorded.steps:
        step = torch.zeros_like(expected)
        for episode_classes, episode_labels, episode_logits in zip(classes, labels, logits, strict=True):
            probabilities = torch.softmax(episode_logits.double(), -1)
            for i, a in enumerate(episode_classes.tolist()):
                for j, b in enumerate(episode_classes.tolist()):
                    if i != j:
                        s_ij = probabilities[episode_labels == i, j].mean()
                        s_ji = probabilities[episode_labels == j, i].mean()
                        step[a, b] += s_ij + s_ji
        expected = 0.7 * expected + 3.0 * step
    torch.testing.assert_close(sampler.log_potential, expected, rtol=1e-12, atol=1e-12)
    assert float(expected.abs().sum()) > 0


def test_a_sampler_that_needs_confusions_refuses_a_model_without_query_logits() -> None:
    trainer = tiny_trainer(max_steps=2, limit_val_batches=0, callbacks=[TaskSamplerFeedback()])
    with pytest.raises(ValueError, match="learns from the model's confusions, which FEAT does not give"):
        trainer.fit(FEAT(image_size=16), tiny_datamodule(task_sampler=AdaptiveTaskSampler()))

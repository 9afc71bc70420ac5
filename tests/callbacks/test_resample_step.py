"""DifficultyWeightingCallback(mode="resample") through the real Trainer: the scoring pass changes nothing and is one
batched forward, the warm-up and the baseline train on the plain stream, the choice follows the weights and is
trained with weight 1, the logged goodness of fit, options; 1 process against 2 (fork DDP) and crash-and-resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from lightning_episodes import MAML, ProtoNet
from lightning_episodes.algorithms.base import EpisodeOutput, EpisodicModule
from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.callbacks._resample_step import ResampleStep, check_datamodule, score_candidates
from lightning_episodes.data import Episode
from lightning_episodes.weighting import importance_weights, select_candidates
from tests.callbacks.helpers import CrashAt, one_and_two_processes, save_rank
from tests.callbacks.test_difficulty_weighting import same_state
from tests.helpers import tiny_datamodule, tiny_trainer

BATCH, POOL, WARMUP = 4, 3, 2


class CountingProtoNet(ProtoNet):
    """Records every forward's episode count and ids, whether gradients were on, and the training difficulties."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.forwards: list[tuple[int, list[int], bool]] = []

    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        self.forwards.append((len(batch), batch.identity.episode_ids.tolist(), torch.is_grad_enabled()))
        return super().episode_losses(batch)


class Chosen(Callback):
    """Copies each step's selection record and the training step's own difficulties."""

    def __init__(self, weighting: DifficultyWeightingCallback) -> None:
        self.weighting = weighting
        self.records: list[ResampleStep] = []
        self.trained: list[torch.Tensor] = []
        self.logged: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any) -> None:
        assert self.weighting.last_selection is not None
        self.records.append(self.weighting.last_selection)
        self.trained.append(outputs["difficulties"].detach().double().clone())
        metrics = trainer.callback_metrics
        self.logged.append({k.split("/")[1]: float(v) for k, v in metrics.items() if k.startswith("weighting/")})


def _fit(
    callback: Callback | None, algorithm: type[ProtoNet] = CountingProtoNet, max_steps: int = 5, **options: Any
) -> tuple[EpisodicModule, Chosen | None]:
    pl.seed_everything(0)
    model = algorithm(image_size=16)
    chosen = Chosen(callback) if isinstance(callback, DifficultyWeightingCallback) else None
    callbacks = [c for c in (callback, chosen) if c is not None] + options.pop("extra", [])
    trainer = tiny_trainer(
        max_steps=max_steps, limit_val_batches=0, log_every_n_steps=1, callbacks=callbacks, **options
    )
    trainer.fit(model, tiny_datamodule(episodes_per_batch=BATCH))
    return model, chosen


def _resampling(**options: Any) -> DifficultyWeightingCallback:
    return DifficultyWeightingCallback(mode="resample", pool=POOL, warmup_steps=WARMUP, **options)


@pytest.mark.parametrize("algorithm", [ProtoNet, MAML])
def test_scoring_changes_no_state_and_gives_the_training_difficulty(algorithm: type[EpisodicModule]) -> None:
    datamodule = tiny_datamodule()
    datamodule.setup("fit")
    assert datamodule.assembler is not None
    batch = datamodule.assemble(datamodule.assembler.gather(datamodule.training_identities(3, range(6))))
    model = algorithm(image_size=16, **({"ways": 5} if algorithm is MAML else {})).train()
    model.backbone(batch.support)  # a training forward: running buffers away from their initial values
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scored = score_candidates(model, batch)
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    for key, value in model.state_dict().items():  # running means, variances and counts included
        assert torch.equal(value, before[key]), key
    trained = model._output(batch).difficulty  # training mode: the difficulty the weighting uses
    assert torch.allclose(scored, trained, rtol=1e-5, atol=1e-6)
    if algorithm is ProtoNet:  # the same forward outside scoring_mode does move the running statistics
        assert not torch.equal(
            model.state_dict()["backbone.blocks.0.norm.running_mean"], before["backbone.blocks.0.norm.running_mean"]
        )


def test_one_batched_scoring_forward_then_the_chosen_episodes_with_weight_one() -> None:
    callback = _resampling()
    model, chosen = _fit(callback)
    assert chosen is not None
    forwards = model.forwards  # type: ignore[attr-defined]
    assert [(n, grad) for n, _, grad in forwards] == [(POOL * BATCH, False), (BATCH, True)] * 5
    for step, record in enumerate(chosen.records):
        scored_ids, trained_ids = forwards[2 * step][1], forwards[2 * step + 1][1]
        assert scored_ids == [step * BATCH + j for j in range(POOL * BATCH)]  # the pool: positions 0..k|B|-1
        assert trained_ids == [step * BATCH + int(j) for j in record.selected]
        # the training forward sees the chosen episodes as the scoring pass did (same model, same episodes)
        assert torch.allclose(chosen.trained[step], record.difficulties[record.selected], rtol=1e-5, atol=1e-6)
        if step < WARMUP:
            assert record.raw_weights is None
            assert torch.equal(record.selected, torch.arange(BATCH))
        else:  # the weights of q as it stands after absorbing the pool, and the seeded systematic choice
            assert callback.last_step is not None
            assert record.raw_weights is not None
            expected, fallback = select_candidates(record.raw_weights, BATCH, 0, step)
            assert torch.equal(record.selected, expected)
            assert fallback == record.fallback
    step = callback.last_step
    assert step is not None
    assert step.raw_weights is not None
    assert torch.equal(step.weights, torch.ones(BATCH, dtype=torch.float64))
    last = chosen.records[-1]
    assert last.raw_weights is not None
    expected_weights = importance_weights(last.difficulties, step.mu, step.sigma, "uniform")
    assert torch.allclose(last.raw_weights, expected_weights, rtol=1e-12)
    assert any(not torch.equal(r.selected, torch.arange(BATCH)) for r in chosen.records[WARMUP:])


def test_baseline_trains_exactly_as_plain_sampling() -> None:
    """The baseline target (and the warm-up) takes the pool's first |B|: the plain stream's batch; and the scoring
    pass changes nothing, so the parameters and buffers end bit for bit as without the callback."""
    plain, _ = _fit(None, ProtoNet)
    resampled, chosen = _fit(_resampling(target="baseline"), ProtoNet)
    assert chosen is not None
    assert all(torch.equal(r.selected, torch.arange(BATCH)) for r in chosen.records)
    expected = plain.state_dict()
    for key, value in resampled.state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_placebo_draws_from_the_pools_weights_dealt_at_random_and_logs_the_fit() -> None:
    placebo_callback, targeted_callback = _resampling(shuffle_weights=True), _resampling()
    _, placebo = _fit(placebo_callback)
    _, targeted = _fit(targeted_callback)
    assert placebo is not None
    assert targeted is not None
    for ours in placebo.records[WARMUP:]:
        # the step's own weights, shuffled by the step's permutation of seed 0 (the callback's default), then drawn
        assert ours.raw_weights is not None
        expected, _ = select_candidates(ours.raw_weights, BATCH, 0, ours.step, placebo=True)
        assert torch.equal(ours.selected, expected)
    assert any(
        not torch.equal(a.selected, b.selected)
        for a, b in zip(placebo.records[WARMUP:], targeted.records[WARMUP:], strict=True)
    )
    logged, record = targeted.logged[-1], targeted.records[-1]
    for key in ("ks", "ks_pvalue", "ks_plain", "pool_ess", "pool_ess_share", "unselected", "score_ms", "draw_ms"):
        assert key in logged, key
    assert logged["unselected"] == pytest.approx(1 - record.selected.unique().numel() / (POOL * BATCH))
    assert 0 < logged["pool_ess"] <= POOL * BATCH
    assert 0 <= logged["ks"] <= 1
    assert logged["score_ms"] > 0
    assert "ks" not in targeted.logged[WARMUP - 1]  # nothing to fit during the warm-up


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pool": 1}, "pool must be an integer >= 2"),
        ({"mode": "bootstrap"}, "mode must be one of"),
        ({"replacement": "yes"}, "replacement must be true or false"),
        ({"normalization": "self"}, "normalization='self' applies to mode='reweight' only"),
    ],
)
def test_bad_options_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DifficultyWeightingCallback(**{"mode": "resample", **options})


def test_resampling_needs_an_episodic_datamodule() -> None:
    trainer = tiny_trainer()
    with pytest.raises(ValueError, match="draws its candidate episodes from an EpisodicDataModule"):
        check_datamodule(trainer)


# -- many processes, and resuming ------------------------------------------------------------------------------------


class Probe(Chosen):
    """Writes each process's selections, trained difficulties and reduced gradients to a file at the end."""

    def __init__(self, weighting: DifficultyWeightingCallback, folder: Path) -> None:
        super().__init__(weighting)
        self.folder = folder
        self.grads: list[torch.Tensor] = []

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self.grads.append(torch.cat([p.grad.flatten() for p in pl_module.parameters() if p.grad is not None]).clone())

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        saved = {
            "selected": [r.selected for r in self.records],
            "pool": [r.difficulties for r in self.records],
            "grads": self.grads,
            "state": self.weighting.state_dict(),
        }
        save_rank(self.folder, trainer, saved)


@pytest.mark.slow
def test_two_processes_train_on_the_same_episodes_as_one(tmp_path: Path) -> None:
    def fit(devices: int) -> None:
        callback = _resampling()
        trainer = tiny_trainer(
            devices=devices, max_steps=5, limit_val_batches=0, precision="64-true", callbacks=[callback]
        )
        trainer.callbacks.append(Probe(callback, tmp_path))  # type: ignore[attr-defined]
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule(episodes_per_batch=BATCH))

    single, (first, second) = one_and_two_processes(tmp_path, fit)
    assert same_state(first["state"], second["state"])
    for key in ("selected", "pool"):
        for a, b, c in zip(single[key], first[key], second[key], strict=True):
            assert torch.equal(b, c), key
            assert torch.allclose(a, b, rtol=1e-10, atol=0), key
    for a, b in zip(single["selected"], first["selected"], strict=True):
        assert torch.equal(a, b)
    assert any(not torch.equal(s, torch.arange(BATCH)) for s in single["selected"][WARMUP:])
    for a, b in zip(single["grads"], first["grads"], strict=True):
        assert float((a - b).norm() / a.norm()) < 1e-10


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
@pytest.mark.parametrize("options", [{}, {"replacement": False, "target": "curriculum"}], ids=["uniform", "without"])
def test_crash_and_resume_equals_an_uninterrupted_run(tmp_path: Path, options: dict[str, Any]) -> None:
    k, total = 3, 6
    straight_callback = _resampling(**options)
    straight_model, straight = _fit(straight_callback, ProtoNet, max_steps=total)
    assert straight is not None

    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=k, save_last=True)
    with pytest.raises(RuntimeError, match="CRASH"):
        _fit(_resampling(**options), max_steps=total, extra=[checkpoint, CrashAt(k)], enable_checkpointing=True)

    pl.seed_everything(1)  # a different initialisation: everything must come from the checkpoint
    resumed_callback = _resampling(**options)
    resumed = Chosen(resumed_callback)
    again = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=k, save_last=True)
    trainer = tiny_trainer(
        max_steps=total,
        limit_val_batches=0,
        log_every_n_steps=1,
        callbacks=[resumed_callback, resumed, again],
        enable_checkpointing=True,
    )
    model = ProtoNet(image_size=16)
    trainer.fit(model, tiny_datamodule(episodes_per_batch=BATCH), ckpt_path=tmp_path / "last.ckpt")

    assert [r.step for r in resumed.records] == list(range(k, total))
    for ours, theirs in zip(resumed.records, straight.records[k:], strict=True):
        assert torch.equal(ours.selected, theirs.selected)
        assert torch.equal(ours.difficulties, theirs.difficulties)
    timeless = [
        {k: v for k, v in logged.items() if not k.endswith("_ms")}
        for logged in (resumed.logged[-1], straight.logged[-1])
    ]
    assert timeless[0] == timeless[1]  # the goodness of fit's window came back with the checkpoint
    assert same_state(resumed_callback.state_dict(), straight_callback.state_dict())
    expected = straight_model.state_dict()
    for key, value in model.state_dict().items():
        assert torch.equal(value, expected[key]), key

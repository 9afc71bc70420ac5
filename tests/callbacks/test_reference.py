"""The offline estimate: a frozen reference model fixes mu and sigma^2 and scores every training episode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms import MAML, EpisodicModule
from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.callbacks import reference as module_under_test
from lightning_episodes.callbacks._weighting_state import WeightingState
from lightning_episodes.models import set_eval_batch_norm
from lightning_episodes.weighting import SIGMA_FLOOR, difficulty_statistics, importance_weights
from tests.helpers import tiny_datamodule, tiny_trainer

OFFLINE_EPISODES = 24


def _train(model: EpisodicModule, path: Path, steps: int = 3, **data: Any) -> Path:
    pl.seed_everything(0)
    trainer = tiny_trainer(max_steps=steps, limit_val_batches=0)
    trainer.fit(model, tiny_datamodule(**data))
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ProtoNet trained with plain sampling on 5-way episodes."""
    return _train(ProtoNet(image_size=16), tmp_path_factory.mktemp("reference") / "protonet.ckpt")


def _frozen(path: Path, cls: type[EpisodicModule] = ProtoNet) -> EpisodicModule:
    """The reference loaded independently of the library's loader, evaluated as the callback must."""
    model = cls.load_from_checkpoint(path)
    model.eval()
    set_eval_batch_norm(model, model.eval_batch_norm)
    return model


def _scores(model: EpisodicModule, batch: Any) -> torch.Tensor:
    with torch.enable_grad() if model.requires_grad_in_evaluation else torch.no_grad():
        return model.episode_losses(batch).losses.detach().double()


class BatchRecorder(Callback):
    """The weighting callback's record and the assembled batch of every step."""

    def __init__(self, weighting: DifficultyWeightingCallback) -> None:
        self.weighting = weighting
        self.records: list[tuple[Any, Any, dict[str, float]]] = []

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, *args: Any
    ) -> None:
        logged = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("weighting/")}
        self.records.append((self.weighting.last_step, batch, logged))


def _fit_offline(callback: DifficultyWeightingCallback, steps: int = 4, **trainer_options: Any) -> BatchRecorder:
    pl.seed_everything(0)
    recorder = BatchRecorder(callback)
    trainer_options.setdefault("log_every_n_steps", 1)  # the callback logs where the loggers write: every step
    trainer = tiny_trainer(max_steps=steps, limit_val_batches=0, callbacks=[callback, recorder], **trainer_options)
    model = ProtoNet(image_size=16)
    trainer.fit(model, tiny_datamodule())
    assert not any(name.startswith("reference") for name in model.state_dict())  # not part of the module
    return recorder


@pytest.mark.parametrize("target", ["uniform", "hard"])
def test_offline_estimates_and_weights_come_from_the_reference(reference: Path, target: str) -> None:
    callback = DifficultyWeightingCallback(
        target=target, estimate="offline", reference_checkpoint=reference, offline_episodes=OFFLINE_EPISODES
    )
    recorder = _fit_offline(callback)

    # mu, sigma^2: the reference's difficulties of the first OFFLINE_EPISODES episodes of the "offline" stream
    # over the training split, scored in one batch here
    frozen = _frozen(reference)
    dm = tiny_datamodule()
    dm.setup("fit")
    episodes = dm.assembler(dm.samplers["train"].sample(dm.seed, "offline", 0, range(OFFLINE_EPISODES)))
    mu, variance = difficulty_statistics(_scores(frozen, episodes))
    assert callback.ready
    assert callback.mu == pytest.approx(mu, rel=1e-6)
    assert callback.state.proposal.estimator.variance == pytest.approx(variance, rel=1e-5)
    assert callback.state.offline_scored == OFFLINE_EPISODES
    sigma = max(variance**0.5, SIGMA_FLOOR)

    for step, batch, logged in recorder.records:
        # the same episodes, scored by the reference (not by the model being trained), fixed estimates, no warm-up
        scores = _scores(frozen, batch)
        torch.testing.assert_close(step.difficulties, scores, rtol=1e-6, atol=1e-7)
        expected = importance_weights(scores.float(), mu, sigma, target)
        torch.testing.assert_close(step.weights.float(), expected, rtol=1e-5, atol=1e-6)
        assert not step.warmup
        assert (step.mu, step.sigma) == (callback.mu, callback.sigma)
        assert logged["weighting/mu"] == pytest.approx(mu, rel=1e-6)
    assert callback.state.proposal.estimator.steps == 0  # the online estimator never ran


@pytest.mark.parametrize("proposal", ["lognormal", "empirical"])
def test_every_proposal_is_fitted_to_the_references_scores(reference: Path, proposal: str) -> None:
    callback = DifficultyWeightingCallback(
        proposal=proposal, estimate="offline", reference_checkpoint=reference, offline_episodes=OFFLINE_EPISODES
    )
    recorder = _fit_offline(callback, steps=2)
    dm = tiny_datamodule()
    dm.setup("fit")
    episodes = dm.assembler(dm.samplers["train"].sample(dm.seed, "offline", 0, range(OFFLINE_EPISODES)))
    scores = _scores(_frozen(reference), episodes)
    q = callback.state.proposal
    if proposal == "lognormal":
        mu, variance = difficulty_statistics(scores.log())
        assert q.location == pytest.approx(mu, rel=1e-6)
        assert q.scale == pytest.approx(variance**0.5, rel=1e-5)
    else:
        torch.testing.assert_close(q.data, scores, rtol=1e-6, atol=1e-7)  # the window: every score, in order
    assert q.steps == 0  # fixed before training, never updated
    for step, batch, _ in recorder.records:
        expected = q.weights(_scores(_frozen(reference), batch).float(), callback.target)
        torch.testing.assert_close(step.weights.float(), expected, rtol=1e-5, atol=1e-6)


def test_a_maml_reference_adapts_while_frozen(tmp_path: Path) -> None:
    path = _train(MAML(image_size=16, ways=5, adaptation_steps=1), tmp_path / "maml.ckpt", steps=1)
    callback = DifficultyWeightingCallback(estimate="offline", reference_checkpoint=path, offline_episodes=8)
    recorder = _fit_offline(callback, steps=2)
    frozen = _frozen(path, MAML)
    for step, batch, _ in recorder.records:
        torch.testing.assert_close(step.difficulties, _scores(frozen, batch), rtol=1e-5, atol=1e-6)
    # adapting changed nothing in the reference
    for key, value in _frozen(path, MAML).state_dict().items():
        assert torch.equal(value, frozen.state_dict()[key])


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
def test_resume_restores_the_offline_estimates_without_scoring_again(
    reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {"estimate": "offline", "reference_checkpoint": reference, "offline_episodes": 8}
    first = DifficultyWeightingCallback(**options)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, every_n_train_steps=2)
    pl.seed_everything(0)
    trainer = tiny_trainer(max_steps=2, limit_val_batches=0, callbacks=[first, checkpoint], enable_checkpointing=True)
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule())

    def fail(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("scored again")

    monkeypatch.setattr(module_under_test, "score_offline", fail)
    resumed = DifficultyWeightingCallback(**options)
    again = ModelCheckpoint(dirpath=tmp_path, save_last=True, every_n_train_steps=2)
    trainer = tiny_trainer(max_steps=3, limit_val_batches=0, callbacks=[resumed, again], enable_checkpointing=True)
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule(), ckpt_path=tmp_path / "last.ckpt")
    assert resumed.state.offline_scored == first.state.offline_scored == 8
    assert resumed.state.proposal.state_dict() == first.state.proposal.state_dict()


def test_reference_errors(reference: Path, tmp_path: Path) -> None:
    missing = DifficultyWeightingCallback(estimate="offline", reference_checkpoint=tmp_path / "nope.ckpt")
    with pytest.raises(FileNotFoundError, match=r"reference_checkpoint='.*nope.ckpt' does not exist"):
        tiny_trainer(callbacks=[missing]).fit(ProtoNet(image_size=16), tiny_datamodule())

    three_way = DifficultyWeightingCallback(estimate="offline", reference_checkpoint=reference)
    with pytest.raises(ValueError, match=r"trained on 5-way episodes but data.ways=3"):
        tiny_trainer(callbacks=[three_way]).fit(ProtoNet(image_size=16), tiny_datamodule(ways=3))

    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}}, foreign)
    not_ours = DifficultyWeightingCallback(estimate="offline", reference_checkpoint=foreign)
    with pytest.raises(ValueError, match="reference_checkpoint: .* is not a lightning-episodes checkpoint"):
        tiny_trainer(callbacks=[not_ours]).fit(ProtoNet(image_size=16), tiny_datamodule())


def test_offline_resampling_checks_its_pool_once_on_the_references_scores(
    reference: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline there is no warm-up: the pool is checked when the reference has scored, before the first step."""
    calls: list[tuple[int, int, torch.Tensor]] = []
    check = WeightingState.check_pool

    def recorded(state: WeightingState, pool: int, batch: int, *args: Any) -> None:
        calls.append((pool, batch, state.diagnostics.difficulties.clone()))
        check(state, pool, batch, *args)

    monkeypatch.setattr(WeightingState, "check_pool", recorded)
    callback = DifficultyWeightingCallback(
        mode="resample", pool=2, estimate="offline", reference_checkpoint=reference, offline_episodes=OFFLINE_EPISODES
    )
    _fit_offline(callback, steps=3)
    ((pool, batch, seen),) = calls
    assert (pool, batch) == (2, 4)  # the data module's 4 episodes a step
    dm = tiny_datamodule()
    dm.setup("fit")
    episodes = dm.assembler(dm.samplers["train"].sample(dm.seed, "offline", 0, range(OFFLINE_EPISODES)))
    torch.testing.assert_close(seen, _scores(_frozen(reference), episodes), rtol=1e-6, atol=1e-7)

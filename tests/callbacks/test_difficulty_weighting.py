"""DifficultyWeightingCallback in one process: validation, the online estimate against a plain re-implementation,
logging, degenerate steps, checkpointed state and crash-and-resume equivalence."""

from __future__ import annotations

import inspect
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.loggers import Logger

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.base import EpisodeOutput
from lightning_episodes.callbacks import DifficultyWeightingCallback, WeightingStep
from lightning_episodes.data import Episode
from lightning_episodes.weighting import SIGMA_FLOOR, Target, importance_weights
from tests.callbacks.helpers import CrashAt
from tests.helpers import tiny_datamodule, tiny_trainer


class Recorder(Callback):
    """Copies, after the weighting callback's hook, what it did and logged at every step."""

    def __init__(self, weighting: DifficultyWeightingCallback) -> None:
        self.weighting = weighting
        self.steps: list[WeightingStep] = []
        self.logged: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        assert self.weighting.last_step is not None
        self.steps.append(self.weighting.last_step)
        metrics = trainer.callback_metrics
        self.logged.append({k.split("/")[1]: float(v) for k, v in metrics.items() if k.startswith("weighting/")})


class GradientRecorder(Callback):
    """The gradient (after backward, before the optimizer) of every step."""

    def __init__(self) -> None:
        self.grads: dict[int, torch.Tensor] = {}

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        grads = [p.grad.flatten() for p in pl_module.parameters() if p.grad is not None]
        self.grads[trainer.global_step] = torch.cat(grads).clone()


def _fit(
    callback: DifficultyWeightingCallback,
    model: ProtoNet | None = None,
    max_steps: int = 6,
    extra: list[Callback] | None = None,
    **trainer_options: Any,
) -> tuple[pl.Trainer, ProtoNet, Recorder]:
    pl.seed_everything(0)
    model = model or ProtoNet(image_size=16)
    recorder = Recorder(callback)
    trainer_options.setdefault("limit_val_batches", 0)  # validation changes nothing here: skip it
    trainer_options.setdefault("log_every_n_steps", 1)  # the callback logs where the loggers write: every step
    trainer = tiny_trainer(max_steps=max_steps, callbacks=[callback, recorder, *(extra or [])], **trainer_options)
    trainer.fit(model, tiny_datamodule())
    return trainer, model, recorder


def plain_estimates(
    batches: list[list[float]], decay: float, warmup: int, update: str
) -> list[tuple[float, float] | None]:
    """docs/method.md's estimator written out plainly: ``(mu, variance)`` before each step, ``None`` during warm-up."""
    s1 = s2 = 0.0
    n = 0
    mu = var = 0.0
    ready = False
    before: list[tuple[float, float] | None] = []
    for t, values in enumerate(batches):
        before.append((mu, var) if ready else None)
        values = [v for v in values if math.isfinite(v)]
        if not ready:
            s1, s2, n = s1 + sum(values), s2 + sum(v * v for v in values), n + len(values)
            if t + 1 >= warmup:
                mu, var, ready = s1 / n, s2 / n - (s1 / n) ** 2, True
        elif update == "episode":
            for v in values:
                mu, var = decay * mu + (1 - decay) * v, decay * var + (1 - decay) * (v - mu) ** 2
        else:
            m = sum(values) / len(values)
            v = sum((x - m) ** 2 for x in values) / len(values)
            mu, var = decay * mu + (1 - decay) * m, decay * var + (1 - decay) * (v + (m - mu) ** 2)
    before.append((mu, var))
    return before


# -- construction ---------------------------------------------------------------------------------------------------


def test_state_key_is_literal_and_shared_by_subclasses() -> None:
    class Custom(DifficultyWeightingCallback):
        pass

    assert DifficultyWeightingCallback().state_key == "DifficultyWeightingCallback[]"
    assert Custom(name="fast").state_key == "DifficultyWeightingCallback[fast]"
    # hyperparameters stay out of the key: a resumed run may change them
    assert DifficultyWeightingCallback(decay=0.5, target="hard").state_key == "DifficultyWeightingCallback[]"


#: A bad value of every option (the first of each row's options; the others make it bad), and what the error says.
INVALID: list[tuple[dict[str, Any], str]] = [
    ({"target": "medium"}, "target must be one of"),
    ({"decay": 1.0}, r"decay must be a number in \[0, 1\)"),
    ({"decay": -0.1}, "decay"),
    ({"warmup_steps": 1}, "warmup_steps must be an integer >= 2"),
    ({"warmup_steps": 2.5}, "warmup_steps"),
    ({"support_sigmas": 0.0}, "support_sigmas must be a finite number > 0"),
    ({"support_sigmas": float("inf")}, "support_sigmas"),
    ({"out_of_support": "drop"}, "out_of_support must be one of"),
    ({"normalization": "mean"}, "normalization must be one of"),
    ({"update": "step"}, "update must be one of"),
    ({"proposal": "oracle"}, r"proposal must be one of \['normal', 'lognormal', 'empirical'\]"),
    ({"proposal": "online"}, "proposal='online' is now estimate='online'"),
    ({"proposal": "offline"}, "replace `proposal: offline` by `estimate: offline`"),
    ({"estimate": "oracle"}, r"estimate must be one of \['online', 'offline'\]"),
    ({"estimate": "offline"}, "estimate='offline' needs reference_checkpoint"),
    ({"offline_episodes": 1, "estimate": "offline", "reference_checkpoint": "x.ckpt"}, "offline_episodes"),
    ({"reference_checkpoint": "", "estimate": "offline"}, "estimate='offline' needs reference_checkpoint"),
    (
        {"normalization": "clip"},
        r"normalization must be one of \['ess', 'self', 'truncated', 'psis', 'running', 'scale'\]",
    ),
    ({"window": 5}, "window must be an integer >= 10"),
    ({"running_decay": 1.0}, r"running_decay must be a number in \[0, 1\)"),
    ({"shuffle_weights": "yes"}, "shuffle_weights must be true or false"),
    ({"log_grad_norm": 1}, "log_grad_norm must be true or false"),
    ({"seed": -1}, "seed must be an integer >= 0"),
    ({"histogram_every_n_steps": -1}, "histogram_every_n_steps must be an integer >= 0"),
    ({"name": 3}, "name must be a string"),
    ({"mode": "choose"}, r"mode must be one of \['reweight', 'resample'\]"),
    ({"pool": 1}, "pool must be an integer >= 2"),
    ({"replacement": "no"}, "replacement must be true or false"),
]


@pytest.mark.parametrize(("options", "message"), INVALID)
def test_invalid_arguments_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        DifficultyWeightingCallback(**options)
    assert next(iter(options)) in str(raised.value)  # the message names the bad option


def test_every_option_has_a_bad_value_above() -> None:
    """An option added to the callback needs its check and a row of :data:`INVALID`."""
    checked = {next(iter(options)) for options, _ in INVALID}
    assert checked == set(inspect.signature(DifficultyWeightingCallback).parameters)


def test_curriculum_needs_max_steps() -> None:
    callback = DifficultyWeightingCallback(target="curriculum", warmup_steps=2)
    trainer = tiny_trainer(max_steps=-1, max_epochs=1, callbacks=[callback])
    with pytest.raises(ValueError, match=r"target='curriculum'\) needs trainer.max_steps > 0"):
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule())


class HardToEasy(Target):
    """A user's curriculum-like target: a ramp whose slope turns from rewarding hard episodes to easy ones."""

    needs_progress = True

    def density(self, z: torch.Tensor, support_sigmas: float, progress: float | None) -> torch.Tensor:
        if progress is None:
            raise ValueError("HardToEasy needs the training progress")
        return support_sigmas + (1.0 - 2.0 * progress) * z


def test_a_users_target_that_needs_progress_is_checked_and_logged_as_the_curriculum_is() -> None:
    """Declared by ``needs_progress``, not recognised by class: no ``max_steps`` is refused before training, and
    ``weighting/mu_t`` is logged."""
    callback = DifficultyWeightingCallback(target=HardToEasy(), warmup_steps=2)
    trainer = tiny_trainer(max_steps=-1, max_epochs=1, callbacks=[callback])
    with pytest.raises(ValueError, match=r"target='HardToEasy'\) needs trainer.max_steps > 0"):
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule())
    _, _, recorder = _fit(DifficultyWeightingCallback(target=HardToEasy(), warmup_steps=2), max_steps=4)
    weighted = [(step, log) for step, log in zip(recorder.steps, recorder.logged, strict=True) if not step.warmup]
    assert weighted
    for step, log in weighted:
        assert step.progress is not None
        assert log["mu_t"] == pytest.approx(log["low"] + (log["high"] - log["low"]) * step.progress, rel=1e-6)


def test_gradient_accumulation_is_refused() -> None:
    trainer = tiny_trainer(accumulate_grad_batches=2, callbacks=[DifficultyWeightingCallback(warmup_steps=2)])
    with pytest.raises(ValueError, match="accumulate_grad_batches=2"):
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule())


@pytest.mark.parametrize(
    ("target", "warmup", "max_steps", "warns"),
    [("uniform", 6, 6, True), ("hard", 7, 6, True), ("uniform", 5, 6, False), ("baseline", 6, 6, False)],
)
def test_a_warmup_covering_every_step_is_warned_about(target: str, warmup: int, max_steps: int, warns: bool) -> None:
    """A weighted arm whose warm-up lasts the whole run trains as plain sampling: it must say so at set-up
    (a baseline weights nothing anyway), and only when it is true."""
    callback = DifficultyWeightingCallback(target=target, warmup_steps=warmup)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, _, recorder = _fit(callback, max_steps=max_steps)
    said = [str(w.message) for w in caught if "never weights by difficulty" in str(w.message)]
    assert len(said) == int(warns), said
    if warns:
        assert f"warmup_steps={warmup}" in said[0]
        assert f"trainer.max_steps={max_steps}" in said[0]
    assert all(step.warmup for step in recorder.steps) is (warns or target == "baseline")


def test_installs_itself_as_the_weighting_strategy_for_the_fit_only() -> None:
    callback = DifficultyWeightingCallback(warmup_steps=2)

    class Check(Callback):
        def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            assert pl_module.weighting is callback  # type: ignore[attr-defined]

    model = ProtoNet(image_size=16)
    _fit(callback, model, max_steps=1, extra=[Check()])
    assert model.weighting is None


# -- the online estimate and the weights ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "update", "out_of_support"),
    [("uniform", "episode", "zero"), ("curriculum", "batch", "zero"), ("hard", "episode", "clamp")],
)
def test_weights_match_a_plain_reimplementation(target: str, update: str, out_of_support: str) -> None:
    warmup, max_steps, decay = 3, 8, 0.7
    callback = DifficultyWeightingCallback(
        target=target, decay=decay, warmup_steps=warmup, update=update, out_of_support=out_of_support
    )
    _, _, recorder = _fit(callback, max_steps=max_steps)
    steps, logged = recorder.steps, recorder.logged
    assert [s.step for s in steps] == list(range(max_steps))
    estimates = plain_estimates([s.difficulties.tolist() for s in steps], decay, warmup, update)
    for t, (step, log) in enumerate(zip(steps, logged, strict=True)):
        assert len(step.weights) == 4
        total, squares = float(step.weights.sum()), float((step.weights**2).sum())
        assert log["ess"] == pytest.approx(total**2 / squares if total else 0.0, rel=1e-6)
        assert log["ess_over_batch"] == pytest.approx(log["ess"] / 4, rel=1e-6)
        assert log["batch_over_ess"] == pytest.approx(4 / log["ess"] if total else 0.0, rel=1e-6)
        if t < warmup:  # plain sampling: exactly 1, and the ESS is the batch
            assert step.warmup
            assert torch.equal(step.weights, torch.ones(4, dtype=torch.float64))
            assert log["ess_over_batch"] == 1.0
            assert log["batch_over_ess"] == 1.0
            assert log["weight_min"] == log["weight_max"] == 1.0
            continue
        estimate = estimates[t]
        assert estimate is not None
        assert not step.warmup
        mu, sigma = estimate[0], max(math.sqrt(estimate[1]), SIGMA_FLOOR)
        progress = t / max_steps
        assert step.progress == progress
        expected = importance_weights(
            step.difficulties.float(),
            mu,
            sigma,
            target,
            out_of_support=out_of_support,
            progress=progress if target == "curriculum" else None,
        )
        torch.testing.assert_close(step.weights.float(), expected, rtol=1e-6, atol=0.0)
        assert log["mu"] == pytest.approx(mu, rel=1e-6)
        assert log["sigma"] == pytest.approx(sigma, rel=1e-6)
        assert log["weight_min"] == pytest.approx(float(expected.min()), rel=1e-6)
        assert log["weight_mean"] == pytest.approx(float(expected.mean()), rel=1e-6)
        assert log["weight_max"] == pytest.approx(float(expected.max()), rel=1e-6)
        low, high = mu - 2.58 * sigma, mu + 2.58 * sigma
        outside = sum(not low <= d <= high for d in step.difficulties.tolist()) / 4
        assert log["outside_support"] == pytest.approx(outside)
        if target == "uniform":
            assert log["ess_over_batch"] < 1.0
        if target == "curriculum":
            assert log["mu_t"] == pytest.approx(mu - 2.58 * sigma + 2 * 2.58 * sigma * progress, rel=1e-6)
    final = estimates[-1]
    assert final is not None
    assert callback.state.proposal.estimator.mu == pytest.approx(final[0], rel=1e-12)
    assert callback.state.proposal.estimator.variance == pytest.approx(final[1], rel=1e-12)
    assert callback.state.proposal.estimator.steps == max_steps


class RiggedProtoNet(ProtoNet):
    """Adds a constant to the losses of chosen episodes at chosen steps (a constant: the gradient is unchanged)."""

    def __init__(self, rig: dict[int, torch.Tensor], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rig = rig

    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        out = super().episode_losses(batch)
        offset = self.rig.get(self.trainer.global_step)
        if offset is not None and self.training:  # not in the validation that follows the same step
            out.losses = out.losses + offset.to(out.losses)
        return out


def test_a_batch_with_no_weight_is_a_skipped_step_with_zero_gradient() -> None:
    # after the warm-up, every episode of step 3 is far harder than mu: the easy target (clamped to the
    # end of S, where its density is 0) gives all of them weight 0
    model = RiggedProtoNet({3: torch.full((4,), 100.0)}, image_size=16)
    callback = DifficultyWeightingCallback(target="easy", warmup_steps=2, out_of_support="clamp")
    grads = GradientRecorder()
    _, _, recorder = _fit(callback, model, max_steps=5, extra=[grads])
    assert torch.equal(recorder.steps[3].weights, torch.zeros(4, dtype=torch.float64))
    assert torch.count_nonzero(grads.grads[3]) == 0
    assert all(torch.count_nonzero(grads.grads[t]) > 0 for t in (0, 1, 2, 4))
    assert [log["skipped_steps"] for log in recorder.logged] == [0, 0, 0, 1, 1]
    assert recorder.logged[3]["ess"] == 0.0
    assert recorder.logged[3]["batch_over_ess"] == 0.0
    assert callback.state.skipped_steps == 1


def test_non_finite_episodes_are_masked_counted_and_kept_out_of_the_estimate() -> None:
    nan, inf = float("nan"), float("inf")
    # one NaN episode during the warm-up (weight 1) and one infinite episode afterwards
    model = RiggedProtoNet(
        {1: torch.tensor([0.0, nan, 0.0, 0.0]), 3: torch.tensor([0.0, 0.0, inf, 0.0])}, image_size=16
    )
    callback = DifficultyWeightingCallback(warmup_steps=2)
    grads = GradientRecorder()
    with pytest.warns(UserWarning, match="non-finite loss got weight 0"):
        _, model, recorder = _fit(callback, model, max_steps=5, extra=[grads])
    assert [log["nonfinite_episodes"] for log in recorder.logged] == [0, 1, 1, 2, 2]
    assert recorder.steps[1].weights[1] == 1.0  # warm-up weight; the loss itself is masked
    assert recorder.steps[3].weights[2] == 0.0
    assert callback.state.proposal.estimator.nonfinite == 2
    assert callback.state.proposal.estimator.episodes == 5 * 4 - 2
    assert math.isfinite(callback.state.proposal.estimator.mu)
    assert math.isfinite(callback.state.proposal.estimator.variance)
    assert all(torch.isfinite(g).all() for g in grads.grads.values())
    assert all(torch.isfinite(p).all() for p in model.parameters())


# -- state ----------------------------------------------------------------------------------------------------------


def plain_state(value: object) -> bool:
    """Whether a state holds only what ``torch.load(weights_only=True)`` reads: numbers, strings, CPU tensors."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain_state(v) for k, v in value.items())
    if isinstance(value, torch.Tensor):
        return value.device.type == "cpu"
    return type(value) in (int, float, bool, str)


def same_state(a: object, b: object) -> bool:
    """Exact equality of two states (tensors bit for bit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    return type(a) is type(b) and a == b


def test_state_is_plain_numbers_and_load_is_tolerant() -> None:
    callback = DifficultyWeightingCallback(warmup_steps=2)
    callback.state.proposal.update(torch.tensor([1.0, 2.0]))
    callback.state.proposal.update(torch.tensor([3.0, 4.0]))
    callback.state.skipped_steps, callback.state.nonfinite_episodes = 2, 3
    state = callback.state_dict()
    assert plain_state(state)
    restored = DifficultyWeightingCallback(warmup_steps=2)
    restored.load_state_dict(state)
    assert same_state(restored.state_dict(), state)
    # a checkpoint from an older version without the counters still loads
    old = DifficultyWeightingCallback(warmup_steps=2)
    old.load_state_dict({"estimator": state["estimator"]})
    assert old.state.proposal.estimator.mu == 2.5
    assert old.state.skipped_steps == 0
    DifficultyWeightingCallback().load_state_dict({})


class SubclassedWeighting(DifficultyWeightingCallback):
    """A user's subclass: it must restore the state the base class checkpointed."""

    restored: dict[str, Any] | None = None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.restored = self.state_dict()


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "k", "total"),
    [
        ({"target": "uniform"}, 1, 6),
        ({"target": "curriculum"}, 3, 6),
        # every proposal and normaliser, and the placebo; psis runs until its window (>= 21 weights) smooths
        ({"proposal": "lognormal", "normalization": "running"}, 3, 6),
        ({"proposal": "empirical", "normalization": "psis", "shuffle_weights": True}, 5, 8),
        ({"proposal": "normal", "normalization": "truncated", "shuffle_weights": True}, 3, 6),
        ({"proposal": "empirical", "normalization": "self"}, 4, 6),
    ],
    ids=["uniform", "curriculum", "lognormal-running", "empirical-psis-placebo", "truncated-placebo", "empirical"],
)
def test_crash_and_resume_equals_an_uninterrupted_run(tmp_path: Path, case: dict[str, Any], k: int, total: int) -> None:
    """Stopped after step k (inside the warm-up for k = 1) and resumed: the same weights and parameters, bit for bit."""
    options = {"warmup_steps": 2, "decay": 0.8, "window": 40, **case}
    straight_callback = DifficultyWeightingCallback(**options)
    _, straight, straight_rec = _fit(straight_callback, max_steps=total)

    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=k, save_last=True)
    first = DifficultyWeightingCallback(**options)
    with pytest.raises(RuntimeError, match="CRASH"):
        _fit(first, max_steps=total, extra=[checkpoint, CrashAt(k)], enable_checkpointing=True)
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["global_step"] == k
    assert same_state(saved["callbacks"]["DifficultyWeightingCallback[]"], first.state_dict())

    pl.seed_everything(1)  # a different initialisation: everything must come from the checkpoint
    resumed = SubclassedWeighting(**options)
    recorder = Recorder(resumed)
    again = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=k, save_last=True)  # as a real resume
    trainer = tiny_trainer(
        max_steps=total, limit_val_batches=0, callbacks=[resumed, recorder, again], enable_checkpointing=True
    )
    model = ProtoNet(image_size=16)
    trainer.fit(model, tiny_datamodule(), ckpt_path=tmp_path / "last.ckpt")
    assert same_state(resumed.restored, first.state_dict())

    assert [s.step for s in recorder.steps] == list(range(k, total))
    for ours, theirs in zip(recorder.steps, straight_rec.steps[k:], strict=True):
        assert torch.equal(ours.difficulties, theirs.difficulties)
        assert torch.equal(ours.weights, theirs.weights)
        assert (ours.mu, ours.sigma, ours.progress, ours.support) == (
            theirs.mu,
            theirs.sigma,
            theirs.progress,
            theirs.support,
        )
    assert same_state(resumed.state_dict(), straight_callback.state_dict())
    expected = straight.state_dict()
    for key, value in model.state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_histograms_of_difficulties_and_weights_go_to_tensorboard(tmp_path: Path) -> None:
    from pytorch_lightning.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    callback = DifficultyWeightingCallback(warmup_steps=2, histogram_every_n_steps=2)
    logger = TensorBoardLogger(tmp_path, name="tb")
    trainer = tiny_trainer(max_steps=5, logger=logger, callbacks=[callback])
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule())
    events = EventAccumulator(logger.log_dir, size_guidance={"histograms": 0})
    events.Reload()
    for tag in ("weighting/difficulties", "weighting/weights"):
        histograms = events.Histograms(tag)
        assert [h.step for h in histograms] == [0, 2, 4]
        assert all(h.histogram_value.num == 4 for h in histograms), "one value per episode of the global batch"


class MemoryLogger(Logger):
    """Keeps what the Trainer writes: ``(step, metrics)`` per write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.writes.append((step, dict(metrics)))

    def weighting(self) -> dict[int | None, dict[str, float]]:
        """The ``weighting/*`` values written, by step."""
        return {step: {k: v for k, v in m.items() if k.startswith("weighting/")} for step, m in self.writes}


def test_logs_only_on_the_steps_the_logger_writes_the_same_values() -> None:
    """With log_every_n_steps=3 the callback logs at steps 2 and 5 what it logs there with 1, and keeps its
    estimates up to date every step."""
    runs = {}
    for every in (1, 3):
        logger = MemoryLogger()
        callback = DifficultyWeightingCallback(warmup_steps=2)
        trainer, _, recorder = _fit(callback, max_steps=7, logger=logger, log_every_n_steps=every)
        runs[every] = (logger.weighting(), callback, recorder, trainer)
    dense, sparse = runs[1][0], runs[3][0]
    assert sorted(dense) == list(range(7))
    assert sorted(sparse) == [2, 5]
    assert all(len(values) == 18 for values in dense.values())  # every value, after the warm-up as during it
    assert all(values["weighting/loss_scale"] == 1.0 for step, values in dense.items() if step < 2)  # warm-up: w = 1
    for step, values in sparse.items():
        assert values.keys() == dense[step].keys()
        for key, value in values.items():  # NaN (a diagnostic without enough data yet) equals NaN here
            assert value == dense[step][key] or (math.isnan(value) and math.isnan(dense[step][key])), (step, key)
    # the estimates absorbed every step in both runs; the last logged values are those of step 5, not 6
    assert same_state(runs[3][1].state_dict(), runs[1][1].state_dict())
    assert runs[3][1].state.proposal.estimator.steps == 7
    assert [s.step for s in runs[3][2].steps] == list(range(7))
    assert float(runs[3][3].callback_metrics["weighting/mu"]) == sparse[5]["weighting/mu"]
    assert sparse[5]["weighting/mu"] != dense[6]["weighting/mu"]


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
@pytest.mark.slow
def test_a_checkpoint_of_the_named_form_resumes_with_component_objects(tmp_path: Path) -> None:
    """A run configured the old way (names + the callback's options) resumes with the same parts given as objects:
    the checkpoint's state loads unchanged and the run continues bit for bit."""
    from lightning_episodes.weighting import LogNormalProposal, RunningNormalizer

    named: dict[str, Any] = {"warmup_steps": 2, "decay": 0.8, "window": 40, "proposal": "lognormal",
                             "normalization": "running", "running_decay": 0.5}  # fmt: skip
    straight_callback = DifficultyWeightingCallback(**named)
    _, _, straight = _fit(straight_callback, max_steps=6)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_last=True)
    with pytest.raises(RuntimeError, match="CRASH"):
        _fit(
            DifficultyWeightingCallback(**named), max_steps=6, extra=[checkpoint, CrashAt(3)], enable_checkpointing=True
        )
    objects = {"window": 40, "proposal": LogNormalProposal(decay=0.8, warmup_steps=2),
               "normalization": RunningNormalizer(decay=0.5)}  # fmt: skip
    resumed = DifficultyWeightingCallback(**objects)
    recorder = Recorder(resumed)
    trainer = tiny_trainer(max_steps=6, limit_val_batches=0, callbacks=[resumed, recorder], enable_checkpointing=True)
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule(), ckpt_path=tmp_path / "last.ckpt")
    assert [s.step for s in recorder.steps] == [3, 4, 5]
    for ours, theirs in zip(recorder.steps, straight.steps[3:], strict=True):
        assert torch.equal(ours.weights, theirs.weights)
    assert same_state(resumed.state_dict(), straight_callback.state_dict())

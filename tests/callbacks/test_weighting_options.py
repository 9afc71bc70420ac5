"""DifficultyWeightingCallback's options through the real Trainer: the default path is today's estimator bit for bit,
each normaliser gives the loss of its formula, the placebo permutes, the gradient norm and the diagnostics are
logged, a misfitting proposal is named; and the console script accepts and checks the options."""

from __future__ import annotations

import csv
import dataclasses
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import Callback
from scipy import stats

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.base import EpisodeOutput
from lightning_episodes.callbacks import DifficultyWeightingCallback, WeightingOptions
from lightning_episodes.data import Episode
from lightning_episodes.weighting import (
    DifficultyEstimator,
    available_normalizers,
    available_proposals,
    importance_weights,
    truncate_weights,
    weighted_loss,
)
from tests.callbacks.test_difficulty_weighting import GradientRecorder, RiggedProtoNet, _fit

ROOT = Path(__file__).resolve().parents[2]


class OutputRecorder(Callback):
    """The loss and the per-episode difficulties (= losses for ProtoNet) the module returned at every step."""

    def __init__(self) -> None:
        self.outputs: list[tuple[torch.Tensor, torch.Tensor]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any) -> None:
        self.outputs.append((outputs["loss"].detach().clone(), outputs["difficulties"].clone()))


def test_the_default_path_is_todays_estimator_bit_for_bit() -> None:
    """Default options: the weights and the loss are importance_weights + weighted_loss of the paper's estimator,
    computed here independently of the callback, with exact equality."""
    outputs = OutputRecorder()
    callback = DifficultyWeightingCallback(warmup_steps=3)
    _, _, recorder = _fit(callback, max_steps=8, extra=[outputs])
    estimator = DifficultyEstimator(warmup_steps=3)
    for step, (loss, difficulties) in zip(recorder.steps, outputs.outputs, strict=True):
        if estimator.ready:
            weights = importance_weights(difficulties, estimator.mu, estimator.sigma)
        else:
            weights = torch.ones_like(difficulties)
        assert torch.equal(step.weights, weights.double())
        assert torch.equal(loss, weighted_loss(difficulties, weights).loss)
        estimator.update(difficulties)
    assert callback.state.proposal.state_dict() == estimator.state_dict()


@pytest.mark.parametrize("proposal", available_proposals())
@pytest.mark.parametrize("normalization", available_normalizers())
def test_each_normaliser_gives_the_loss_of_its_formula(proposal: str, normalization: str) -> None:
    outputs = OutputRecorder()
    callback = DifficultyWeightingCallback(
        proposal=proposal, normalization=normalization, warmup_steps=2, running_decay=0.5, window=40
    )
    steps = 14 if normalization == "psis" else 6  # psis smooths once its window holds >= 21 weights
    # heavy-tailed difficulties (constant offsets: the gradient is unchanged), so that large weights come up
    generator = torch.Generator().manual_seed(0)
    rig = {t: torch.exp(torch.randn(4, generator=generator)) for t in range(steps)}
    _, _, recorder = _fit(callback, RiggedProtoNet(rig, image_size=16), max_steps=steps, extra=[outputs])
    average = None
    smoothed = False
    for step, log, (loss, losses) in zip(recorder.steps, recorder.logged, outputs.outputs, strict=True):
        assert step.raw_weights is not None
        raw, w, d = step.raw_weights, step.weights, losses.double()
        assert torch.isfinite(w).all()
        assert (w >= 0).all()
        total = float(raw.sum())
        average = total if average is None else 0.5 * average + 0.5 * total
        # the factor by which the loss exceeds the self-normalised sum w L / sum w of the weights it used
        if normalization == "ess":
            scale = float(w.sum() / ((w.sum() ** 2) / (w * w).sum()))
        elif normalization == "running":
            scale = float(w.sum() / average)
        elif normalization == "scale":
            assert torch.equal(w, torch.ones_like(w))
            scale = float((raw * raw).sum() / raw.sum())  # sum w / ESS of the raw weights: the loss is scale mean(L)
        else:
            scale = 1.0
        expected = scale * float((w * d).sum() / w.sum())
        assert float(loss) == pytest.approx(expected, rel=1e-5), step.step
        assert log["loss_scale"] == pytest.approx(scale, rel=1e-6), step.step
        if normalization == "truncated":
            assert torch.equal(w, truncate_weights(raw.float()).double())  # float32, as the losses
        if normalization in ("ess", "self", "running"):
            assert torch.equal(w, raw)
        smoothed = smoothed or not torch.equal(w, raw)
        for key in ("pareto_k", "sum_w_over_ess", "skewness", "normality_p", "low", "high"):
            assert key in log
        assert log["low"] < log["high"] or step.warmup
    if normalization == "psis":
        assert smoothed, "the largest weights were never smoothed"


def test_the_placebo_permutes_each_steps_weights_deterministically() -> None:
    runs = {}
    for seed in (3, 3, 4):
        callback = DifficultyWeightingCallback(warmup_steps=2, shuffle_weights=True, seed=seed)
        _, _, recorder = _fit(callback, max_steps=6)
        runs.setdefault(seed, []).append(recorder.steps)
    permuted = False
    for step in runs[3][0][2:]:
        assert step.raw_weights is not None
        generator = torch.Generator().manual_seed(int(np.random.SeedSequence([3, step.step]).generate_state(1)[0]))
        expected = step.raw_weights[torch.randperm(4, generator=generator)]
        assert torch.equal(step.weights, expected)
        assert torch.equal(step.weights.sort().values, step.raw_weights.sort().values)  # the same multiset
        permuted = permuted or not torch.equal(step.weights, step.raw_weights)
    assert permuted
    for first, again in zip(runs[3][0], runs[3][1], strict=True):
        assert torch.equal(first.weights, again.weights)
    assert any(not torch.equal(a.weights, b.weights) for a, b in zip(runs[3][0][2:], runs[4][0][2:], strict=True))


def test_the_gradient_norm_is_logged_before_the_optimizer_step() -> None:
    grads = GradientRecorder()
    callback = DifficultyWeightingCallback(warmup_steps=2, log_grad_norm=True)
    _, _, recorder = _fit(callback, max_steps=4, extra=[grads])
    for t, log in enumerate(recorder.logged):
        assert log["grad_norm"] == pytest.approx(float(grads.grads[t].double().norm()), rel=1e-6)
    _, _, without = _fit(DifficultyWeightingCallback(warmup_steps=2), max_steps=2)
    assert "grad_norm" not in without.logged[-1]


class LogNormalDifficulties(ProtoNet):
    """ProtoNet whose episode difficulties are drawn from a log-normal law (its losses are untouched)."""

    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        out = super().episode_losses(batch)
        generator = torch.Generator().manual_seed(self.trainer.global_step)
        draws = torch.exp(torch.randn(len(out.losses), generator=generator, dtype=torch.float64) * 0.8)
        return EpisodeOutput(out.losses, out.accuracies, draws.to(out.losses))


@pytest.mark.parametrize("proposal", ["normal", "lognormal"])
def test_a_misfitting_proposal_is_named_once_at_the_end_of_the_warm_up(proposal: str) -> None:
    callback = DifficultyWeightingCallback(proposal=proposal, warmup_steps=40)  # 160 difficulties
    with pytest.warns() as caught:
        _fit(callback, LogNormalDifficulties(image_size=16), max_steps=41, log_every_n_steps=50)
    misfits = [str(w.message) for w in caught if "misfits" in str(w.message)]
    if proposal == "normal":
        assert len(misfits) == 1
        assert "proposal='normal' misfits the difficulty distribution" in misfits[0]
        assert "proposal='lognormal' fits better" in misfits[0] or "proposal='empirical' fits better" in misfits[0]
    else:
        assert misfits == []


@pytest.mark.parametrize(("mode", "warned"), [("resample", True), ("reweight", False)])
def test_a_pool_too_small_for_the_target_is_named_once_at_the_end_of_the_warm_up(mode: str, warned: bool) -> None:
    """Log-normal difficulties of sigma 0.8 (skewness 3.7) with a fitting proposal: a pool of 2 candidates per
    episode leaves the chosen batches far from the uniform target, and the warning says what a pool of 8 reaches
    (re-weighting has no pool: no such warning)."""
    callback = DifficultyWeightingCallback(mode=mode, pool=2, proposal="lognormal", warmup_steps=40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(callback, LogNormalDifficulties(image_size=16), max_steps=60, log_every_n_steps=50)
    pools = [str(w.message) for w in caught if "pool=" in str(w.message)]
    if not warned:
        assert pools == []
        return
    assert len(pools) == 1
    match = re.search(r"pool=2 would bring .* about (\d\.\d\d) from the target on the warm-up's (\d+) difficulties "
                      r".*; pool=8 would reach about (\d\.\d\d) at 4x the scoring cost", pools[0])  # fmt: skip
    assert match is not None, pools[0]
    distance, sample, reached = float(match[1]), int(match[2]), float(match[3])
    assert distance > 0.1
    assert reached < distance
    assert sample == 39 * 2 * 4  # the pools (plain samples) of the warm-up's steps before the check
    assert "--trainer.callbacks.pool=8" in pools[0]


class FallingDifficulties(ProtoNet):
    """ProtoNet whose episode difficulties fall as a loss does: normal at 1.5 for 10 steps, then log-normal near 0
    (median 0.1, sigma 0.8 in log space: skewness 3.7; its losses are untouched)."""

    def episode_losses(self, batch: Episode) -> EpisodeOutput:
        out = super().episode_losses(batch)
        step = self.trainer.global_step
        z = torch.randn(len(out.losses), generator=torch.Generator().manual_seed(step), dtype=torch.float64)
        draws = 1.5 + 0.1 * z if step < 10 else 0.1 * torch.exp(0.8 * z)
        return EpisodeOutput(out.losses, out.accuracies, draws.to(out.losses))


def test_a_pool_that_stops_reaching_the_target_is_named_when_the_measured_distance_says_so() -> None:
    """The end of the warm-up predicts from difficulties that are about to change: normal ones far from 0, where pool
    2 follows the target (no warning). Once they fall near 0 and skew, the normal's support reaches below 0 and the
    chosen batches cannot follow; the re-check every ``warmup_steps`` steps, once the window of 100 chosen episodes is
    full (after 35 steps), reads the logged distance and says so once (after 40), naming the misfit, not the pool."""
    callback = DifficultyWeightingCallback(mode="resample", pool=2, proposal="normal", warmup_steps=10, window=100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(callback, FallingDifficulties(image_size=16), max_steps=51, log_every_n_steps=50)
    pools = [str(w.message) for w in caught if "pool=" in str(w.message)]
    assert len(pools) == 1, pools
    match = re.search(r"after 40 steps the chosen batches are at a Kolmogorov-Smirnov distance of (\d\.\d\d) .*over "
                      r"the last 100 chosen episodes, above (\d\.\d\d);", pools[0])  # fmt: skip
    assert match is not None, pools[0]
    assert float(match[1]) > float(match[2]) == round(float(stats.kstwo.isf(0.01, 100)), 2)
    assert "a larger pool would not help" in pools[0]
    assert "proposal='normal'" in pools[0]
    assert callback.state.pool_verdict == "off"


def test_the_resampling_placebo_is_never_warned_off_the_target() -> None:
    """The placebo deals the pool's weights at random before choosing: blind to difficulty by design, its batches stay
    at plain batches' distance from the target. Where the same run without shuffling is warned (above), the placebo's
    is not: the warning would be a false alarm with advice to change what the placebo is meant to keep."""
    callback = DifficultyWeightingCallback(
        mode="resample", pool=2, proposal="normal", warmup_steps=10, window=100, shuffle_weights=True
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(callback, FallingDifficulties(image_size=16), max_steps=51, log_every_n_steps=50)
    assert [str(w.message) for w in caught if "pool=" in str(w.message)] == []
    assert callback.state.selection_fit is not None
    assert callback.state.selection_fit.summary()["ks"] > 0.1  # off the target, as a placebo is


def test_plain_sampling_never_warns_of_a_misfit() -> None:
    """The baseline's weights are 1 whatever ``q`` is: advice to change ``proposal`` would change nothing."""
    callback = DifficultyWeightingCallback(target="baseline", proposal="normal", warmup_steps=40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(callback, LogNormalDifficulties(image_size=16), max_steps=81, log_every_n_steps=50)
    assert not [w for w in caught if "misfits" in str(w.message)]
    assert callback.state.verdict == ""


# -- the console script -----------------------------------------------------------------------------------------------


def _console(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    config = yaml.safe_load((ROOT / "configs/quickstart.yaml").read_text())
    config["trainer"]["default_root_dir"] = str(tmp_path)
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path)
    (tmp_path / "quickstart.yaml").write_text(yaml.safe_dump(config))
    command = [
        str(Path(sys.executable).parent / "lightning-episodes"), "fit", "--config", str(tmp_path / "quickstart.yaml"),
        "--config", str(ROOT / "configs/sampling/uniform_online.yaml"), "--data.shots=1", "--data.val_episodes=10",
        "--data.test_episodes=10", "--trainer.max_steps=6", "--trainer.val_check_interval=6",
        "--trainer.log_every_n_steps=1", "--trainer.callbacks.warmup_steps=2", "--trainer.enable_progress_bar=false",
        *extra,
    ]  # fmt: skip
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_console_script_takes_the_new_options(tmp_path: Path) -> None:
    done = _console(
        tmp_path,
        "--trainer.callbacks.proposal", "lognormal",
        "--trainer.callbacks.normalization", "psis",
        "--trainer.callbacks.shuffle_weights", "true",
        "--trainer.callbacks.log_grad_norm", "true",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    saved = yaml.safe_load(next(tmp_path.rglob("config.yaml")).read_text())
    weighting = saved["trainer"]["callbacks"][-1]["init_args"]
    assert (weighting["proposal"], weighting["normalization"], weighting["shuffle_weights"]) == (
        "lognormal",
        "psis",
        True,
    )
    with open(next(tmp_path.rglob("metrics.csv"))) as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("weighting/ess")]
    assert len(rows) == 6
    for key in ("pareto_k", "sum_w_over_ess", "normality_p", "log_normality_p", "grad_norm", "low", "high"):
        assert all(row[f"weighting/{key}"] for row in rows), key
    assert all(math.isfinite(float(row["weighting/grad_norm"])) for row in rows)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("proposal", "online", r"proposal.*'normal', 'lognormal', 'empirical'"),
        ("normalization", "clip", r"normalization.*'ess', 'self', 'truncated', 'psis', 'running', 'scale'"),
        ("window", "3", r"window must be an integer >= 10"),
    ],
)
def test_the_console_script_names_a_bad_option(tmp_path: Path, option: str, value: str, message: str) -> None:
    done = _console(tmp_path, f"--trainer.callbacks.{option}", value)
    assert done.returncode != 0
    assert re.search(message, done.stderr, flags=re.S), done.stderr[-3000:]


def test_options_list_every_constructor_argument_as_plain_values() -> None:
    import inspect

    callback = DifficultyWeightingCallback(proposal="empirical", normalization="psis", reference_checkpoint=Path("r"))
    parameters = set(inspect.signature(DifficultyWeightingCallback.__init__).parameters) - {"self"}
    assert set(callback.options) == parameters
    assert all(value is None or type(value) in (str, int, float, bool) for value in callback.options.values())
    assert (callback.options["proposal"], callback.options["normalization"]) == ("empirical", "psis")
    assert (callback.options["estimate"], callback.options["reference_checkpoint"]) == ("online", "r")


def test_the_options_are_the_constructors_arguments_with_its_defaults() -> None:
    """The constructor's signature declares the options (jsonargparse reads it for the YAML keys and ``--help``, the
    docs for their table); ``WeightingOptions`` holds the same ones, in the same order, with the same defaults."""
    import inspect

    signature = inspect.signature(DifficultyWeightingCallback).parameters.values()
    declared = [(parameter.name, parameter.default) for parameter in signature]
    assert [(field.name, field.default) for field in dataclasses.fields(WeightingOptions)] == declared
    assert dict(WeightingOptions()) == dict(DifficultyWeightingCallback().options) == dict(declared)


class WeightedLossRecorder(Callback):
    """The ``WeightedLoss`` of every step (the statistics its loss was divided by), from the step's outputs."""

    def __init__(self) -> None:
        self.weighted: list[Any] = []

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, idx: int) -> None:
        self.weighted.append(outputs["weighted"])


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_under_bfloat16_the_weights_and_their_statistics_stay_in_full_precision(precision: str) -> None:
    """The convolutions compute in bfloat16, but the difficulties, weights, ESS, the loss's statistics, the estimator
    and every logged ``weighting/*`` value are float64 (float32 losses at worst): bfloat16's 8 significant bits would
    round a weight of 13.4 to 13.375 and an ESS of 3.61 to 3.609."""
    callback, losses = DifficultyWeightingCallback(warmup_steps=2), WeightedLossRecorder()
    _, _, recorder = _fit(callback, max_steps=5, precision=precision, extra=[losses])
    weighted = [step for step in recorder.steps if not step.warmup]
    assert weighted
    for step in recorder.steps:
        for tensor in (step.difficulties, step.weights, step.raw_weights):
            assert tensor is not None
            assert tensor.dtype == torch.float64
    assert any(not torch.equal(step.weights, torch.ones_like(step.weights)) for step in weighted)
    proposal = callback.state.proposal.state_dict()
    assert all(isinstance(value, float | int) for value in proposal.values() if not isinstance(value, torch.Tensor))
    for log in recorder.logged:
        assert all(isinstance(value, float) for value in log.values())
    for loss in losses.weighted:
        for name in ("ess", "sum_weights", "sum_squared_weights", "batch_over_ess"):
            assert getattr(loss, name).dtype == torch.float64, name


def test_a_name_is_shorthand_for_the_object_built_with_the_callbacks_options() -> None:
    from lightning_episodes.weighting import NormalProposal, RunningNormalizer

    named = DifficultyWeightingCallback(proposal="normal", decay=0.8, update="batch", normalization="running",
                                        running_decay=0.5)  # fmt: skip
    assert isinstance(named.state.proposal, NormalProposal)
    assert isinstance(named.state.normalizer, RunningNormalizer)
    assert named.state.proposal.init_args == NormalProposal(decay=0.8, update="batch").init_args
    assert named.state.normalizer.init_args == {"decay": 0.5}
    assert (named.options["proposal"], named.options["normalization"]) == ("normal", "running")  # records as before


def test_a_component_object_keeps_its_arguments_and_a_conflicting_option_is_refused() -> None:
    from lightning_episodes.weighting import ESSNormalizer, NormalProposal, RunningNormalizer

    proposal = NormalProposal(decay=0.8, warmup_steps=7)
    callback = DifficultyWeightingCallback(proposal=proposal, normalization=RunningNormalizer(decay=0.5))
    assert callback.state.proposal is proposal
    assert callback.state.proposal.estimator.decay == 0.8
    assert callback.options.warmup_steps == 7  # the proposal's warm-up is the callback's
    assert callback.options["normalization"] == {
        "class_path": "lightning_episodes.weighting.normalizers.RunningNormalizer",
        "init_args": {"decay": 0.5},
    }
    # the same value given twice is one value; different ones are an error in one line, naming both
    DifficultyWeightingCallback(proposal=NormalProposal(decay=0.8), decay=0.8)
    expected = r"^DifficultyWeightingCallback: decay=0.95 disagrees with the proposal.s own decay=0.8"
    with pytest.raises(ValueError, match=expected + r" \(NormalProposal\): give it once, in the proposal") as error:
        DifficultyWeightingCallback(proposal=NormalProposal(decay=0.8), decay=0.95)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"running_decay=0.9 disagrees with the normalization's own decay=0.5"):
        DifficultyWeightingCallback(normalization=RunningNormalizer(decay=0.5), running_decay=0.9)
    with pytest.raises(ValueError, match=r"normalization=.*RunningNormalizer.* applies to mode='reweight' only"):
        DifficultyWeightingCallback(mode="resample", normalization=RunningNormalizer())
    DifficultyWeightingCallback(mode="resample", normalization=ESSNormalizer())


def test_a_class_path_with_init_args_builds_the_component_and_a_wrong_one_says_so() -> None:
    callback = DifficultyWeightingCallback(
        proposal={"class_path": "lightning_episodes.weighting.EmpiricalProposal", "init_args": {"window": 50}},
        normalization="lightning_episodes.weighting.ParetoSmoothedNormalizer",  # a class path string: built by name
        window=20,
    )
    assert (callback.state.proposal.window, callback.state.normalizer.window) == (50, 20)
    with pytest.raises(ValueError, match=r"proposal: class_path 'lightning_episodes.weighting.UniformTarget' is not a "
                       r"Proposal subclass; a component of your own is found by its class path"):  # fmt: skip
        DifficultyWeightingCallback(proposal={"class_path": "lightning_episodes.weighting.UniformTarget"})

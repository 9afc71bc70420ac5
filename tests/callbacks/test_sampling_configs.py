"""Every sampling scheme of ``configs/sampling/`` trains and tests through the real CLI (in process, tiny data)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.cli import main
from lightning_episodes.weighting import available_targets

TARGETS = available_targets()  # the built-in ones: each has its configs/sampling/<target>_{online,offline}.yaml
SAMPLING = Path("configs/sampling")
WARMUP, STEPS = 2, 4


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The quickstart config with every output under a temporary folder, and tiny-data overrides."""
    folder = tmp_path_factory.mktemp("cli")
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config["trainer"]["default_root_dir"] = str(folder)
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(folder)
    path = folder / "base.yaml"
    path.write_text(yaml.safe_dump(config))
    overrides = [
        "--data.dataset=tiny",
        "--data.image_size=16",
        "--data.shots=2",
        "--data.queries=3",
        "--data.episodes_per_batch=4",
        "--data.val_episodes=4",
        "--data.test_episodes=4",
        f"--trainer.max_steps={STEPS}",
        f"--trainer.val_check_interval={STEPS}",
        "--trainer.num_sanity_val_steps=0",
        "--trainer.log_every_n_steps=1",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ]
    return path, overrides


def _args(base: tuple[Path, list[str]], scheme: str, *extra: str) -> list[str]:
    config, overrides = base
    # the sampling file comes last among the configs (it sets the callbacks list to the weighting callback, after
    # which the CLI puts its default checkpoint); callback arguments after it set the weighting callback
    return ["--config", str(config), "--config", str(SAMPLING / f"{scheme}.yaml"), *overrides, *extra]


@pytest.fixture(scope="module")
def baseline_checkpoint(base: tuple[Path, list[str]]) -> Path:
    """A model trained with plain sampling: the offline schemes' reference."""
    cli = main(["fit", *_args(base, "baseline_online", f"--trainer.callbacks.warmup_steps={WARMUP}")])
    assert cli.trainer.log_dir is not None
    return Path(cli.trainer.log_dir) / "checkpoints" / "last.ckpt"


def _logged(log_dir: str | None) -> list[dict[str, float]]:
    """The per-step ``weighting/*`` rows of the run's metrics.csv, in order."""
    assert log_dir is not None
    with open(Path(log_dir) / "metrics.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("weighting/ess")]
    return [
        {k.removeprefix("weighting/"): float(v) for k, v in r.items() if k.startswith("weighting/") and v} for r in rows
    ]


#: The paper's settings (Sec. 3.2-3.3, Appendix): what every sampling config runs with besides its own options.
PAPER = {"warmup_steps": 100, "decay": 0.9, "update": "episode", "support_sigmas": 2.58, "out_of_support": "zero",
         "normalization": "ess", "offline_episodes": 1000, "proposal": "normal", "shuffle_weights": False}  # fmt: skip
#: What each config states besides its target and estimate (the rest is the callback's defaults).
OWN = {
    "uniform_online_placebo": {"shuffle_weights": True},
    "uniform_online_psis": {"normalization": "psis"},
    "uniform_online_self": {"normalization": "self"},
    "uniform_online_scale": {"normalization": "scale"},
    "uniform_resample": {"mode": "resample"},
    "uniform_resample_placebo": {"mode": "resample", "shuffle_weights": True},
}


@pytest.mark.parametrize("path", sorted(SAMPLING.glob("*.yaml")), ids=lambda p: p.stem)
def test_a_sampling_config_states_only_what_differs_from_the_paper(path: Path) -> None:
    (callback,) = yaml.safe_load(path.read_text())["trainer"]["callbacks"]
    init_args = callback["init_args"]
    target, estimate = path.stem.split("_")[:2]
    estimate = "online" if estimate == "resample" else estimate  # resampling estimates q online
    assert (init_args.pop("target"), init_args.pop("estimate")) == (target, estimate)
    assert init_args == OWN.get(path.stem, {})
    # the rest is the callback's defaults, which are the paper's settings
    built = DifficultyWeightingCallback(target=target, estimate=estimate, reference_checkpoint="x.ckpt", **init_args)
    expected = {**PAPER, **OWN.get(path.stem, {})}
    assert {name: built.options[name] for name in expected} == expected


@pytest.mark.parametrize("scheme", [f"{t}_{p}" for t in TARGETS for p in ("online", "offline")])
def test_sampling_configs_compose_with_any_base(base: tuple[Path, list[str]], scheme: str) -> None:
    extra = ["--trainer.callbacks.reference_checkpoint=x.ckpt"] if scheme.endswith("offline") else []
    cli = main(_args(base, scheme, *extra), run=False)
    weighting = [c for c in cli.trainer.callbacks if isinstance(c, DifficultyWeightingCallback)]
    assert len(weighting) == 1
    target, estimate = scheme.split("_")
    assert tuple(weighting[0].options[k] for k in ("target", "estimate", "proposal")) == (target, estimate, "normal")
    assert any(isinstance(c, ModelCheckpoint) for c in cli.trainer.callbacks)  # not lost by the list replacement
    if estimate == "offline":
        assert weighting[0].options.reference_checkpoint == "x.ckpt"


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("estimate", ["online", "offline"])
def test_every_scheme_trains_and_tests_through_the_cli(
    base: tuple[Path, list[str]], baseline_checkpoint: Path, target: str, estimate: str
) -> None:
    extra = [f"--trainer.callbacks.warmup_steps={WARMUP}", "--test_after_fit=true"]
    if estimate == "offline":
        extra += [
            f"--trainer.callbacks.reference_checkpoint={baseline_checkpoint}",
            "--trainer.callbacks.offline_episodes=8",
        ]
    cli = main(["fit", *_args(base, f"{target}_{estimate}", *extra)])
    metrics = cli.trainer.callback_metrics
    assert metrics["test/episodes"] == 4
    assert 0.0 <= float(metrics["test/acc"]) <= 1.0
    logged = _logged(cli.trainer.log_dir)
    assert len(logged) == STEPS
    for row in logged:
        assert row["weight_min"] >= 0.0
        assert 0.0 <= row["ess_over_batch"] <= 1.0
        assert row["skipped_steps"] in range(STEPS + 1)  # a batch wholly outside S after a big drift can be skipped
        assert row["nonfinite_episodes"] == 0.0
        assert ("mu_t" in row) == (target == "curriculum")
    if estimate == "offline":
        assert len({row["mu"] for row in logged}) == 1  # fixed before training
    if target == "baseline" or (estimate == "online" and target != "curriculum"):
        # plain sampling during the warm-up (and always for the baseline): ESS / |B| is exactly 1
        warm = logged if target == "baseline" else logged[:WARMUP]
        assert all(row["ess_over_batch"] == 1.0 for row in warm)
    if estimate == "online" and target == "uniform":
        assert all(row["ess_over_batch"] < 1.0 for row in logged[WARMUP:])


def test_offline_scheme_without_reference_fails_with_instructions(base: tuple[Path, list[str]]) -> None:
    with pytest.raises(ValueError, match=r"--trainer.callbacks.reference_checkpoint=PATH"):
        main(["fit", *_args(base, "uniform_offline")])


def test_the_placebo_config_trains_with_permuted_uniform_weights(base: tuple[Path, list[str]]) -> None:
    extra = [f"--trainer.callbacks.warmup_steps={WARMUP}"]
    cli = main(["fit", *_args(base, "uniform_online_placebo", *extra)])
    weighting = next(c for c in cli.trainer.callbacks if isinstance(c, DifficultyWeightingCallback))
    assert (weighting.options.target, weighting.options.estimate, weighting.options.shuffle_weights) == (
        "uniform",
        "online",
        True,
    )
    step = weighting.last_step
    assert step is not None
    assert step.raw_weights is not None
    assert not step.warmup
    # the loss used a permutation of the step's uniform weights: the same multiset
    assert torch.equal(step.weights.sort().values, step.raw_weights.sort().values)
    assert len(_logged(cli.trainer.log_dir)) == STEPS
    # the run's config.yaml is the configuration as it ran: the CLI's default checkpoint, then the weighting
    assert cli.trainer.log_dir is not None
    saved = yaml.safe_load((Path(cli.trainer.log_dir) / "config.yaml").read_text())["trainer"]["callbacks"]
    assert [c["class_path"].rsplit(".", 1)[-1] for c in saved] == ["ResumableCheckpoint", "DifficultyWeightingCallback"]
    assert list(Path(cli.trainer.log_dir, "checkpoints").glob("best-*.ckpt"))


@pytest.mark.parametrize("scheme", ["uniform_resample", "uniform_resample_placebo"])
def test_the_resample_configs_train_on_chosen_episodes_with_weight_one(
    base: tuple[Path, list[str]], scheme: str
) -> None:
    extra = [f"--trainer.callbacks.warmup_steps={WARMUP}", "--trainer.callbacks.pool=3"]
    cli = main(["fit", *_args(base, scheme, *extra)])
    weighting = next(c for c in cli.trainer.callbacks if isinstance(c, DifficultyWeightingCallback))
    options = weighting.options
    assert (options.mode, options.pool, options.shuffle_weights) == (
        "resample",
        3,
        scheme.endswith("placebo"),
    )
    logged = _logged(cli.trainer.log_dir)
    assert len(logged) == STEPS
    assert all(row["ess_over_batch"] == 1.0 for row in logged)  # every trained episode has weight 1
    for row in logged[WARMUP:]:  # the chosen episodes' goodness of fit, the pool's ESS, its unchosen share
        assert 0.0 <= row["ks"] <= 1.0
        assert 0.0 < row["pool_ess"] <= 12.0
        assert 2 / 3 <= row["unselected"] < 1.0
        assert row["score_ms"] > 0.0
    selection = weighting.last_selection
    assert selection is not None
    assert selection.difficulties.numel() == 12

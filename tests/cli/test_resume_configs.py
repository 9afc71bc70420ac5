"""Every shipped config writes last.ckpt as the last state and resumes with one command: ``fit ... --ckpt_path last``
(the README's resume command), in the same run folder. The checkpoint callback is the quickstart's own, or the CLI's
default one (:data:`~lightning_episodes.cli.DEFAULT_CHECKPOINT`) in front of a sampling config's weighting callback."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lightning_episodes.callbacks import DifficultyWeightingCallback, NonFiniteGuard, ResumableCheckpoint
from lightning_episodes.cli import DEFAULT_CHECKPOINT, main
from tests.helpers import tiny_cli_options

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: the files that set trainer.callbacks: the quickstart, and each sampling scheme composed after it
WITH_CALLBACKS = [
    p
    for p in sorted(CONFIGS.rglob("*.yaml"))
    if "callbacks" in (yaml.safe_load(p.read_text()) or {}).get("trainer", {})
]
SAMPLING = sorted(CONFIGS.glob("sampling/*.yaml"))


def _name(path: Path) -> str:
    return str(path.relative_to(CONFIGS))


def test_the_callback_files_are_the_quickstart_and_the_sampling_schemes() -> None:
    assert set(WITH_CALLBACKS) == {CONFIGS / "quickstart.yaml", *SAMPLING}


@pytest.mark.parametrize(
    "checkpoint",
    [yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())["trainer"]["callbacks"][0], DEFAULT_CHECKPOINT],
    ids=["quickstart", "default"],
)
def test_the_checkpoint_callback_writes_last_every_n_steps(checkpoint: dict[str, Any]) -> None:
    assert checkpoint["class_path"] == "lightning_episodes.callbacks.ResumableCheckpoint"
    assert checkpoint["init_args"]["save_last"] is True
    assert checkpoint["init_args"]["last_every_n_steps"] >= 1
    assert checkpoint["init_args"]["monitor"] == "val/acc"
    assert checkpoint["init_args"]["filename"] == "best-{step}-{val/acc:.4f}"  # what `compare` looks for


@pytest.mark.parametrize("path", SAMPLING, ids=_name)
def test_a_sampling_config_lists_the_weighting_callback_alone(path: Path) -> None:
    (callback,) = yaml.safe_load(path.read_text())["trainer"]["callbacks"]
    assert callback["class_path"] == "lightning_episodes.callbacks.DifficultyWeightingCallback"


def _callbacks(*args: str) -> list[Any]:
    """The callbacks a `fit` with ``args`` builds, in the order of its configuration (LightningCLI's own left out;
    the Trainer itself moves checkpoint callbacks to the end of its list)."""
    cli = main([*args, "--trainer.logger=false"], run=False)
    configured = [entry.class_path.rsplit(".", 1)[-1] for entry in cli.config.trainer.callbacks]
    built = {type(c).__name__: c for c in cli.trainer.callbacks}
    return [built[name] for name in configured]


DATA_MODEL = ["--config", str(CONFIGS / "data/glyphs_5w1s.yaml")]
DATA_MODEL += ["--config", str(CONFIGS / "models/protonet_euclidean_conv4.yaml")]
UNIFORM = ["--config", str(CONFIGS / "sampling/uniform_online.yaml")]
QUICKSTART = ["--config", str(CONFIGS / "quickstart.yaml")]


def test_the_default_checkpoint_comes_first_unless_a_checkpoint_is_listed() -> None:
    # no callbacks at all, and a sampling config: the default checkpoint in <log dir>/checkpoints, weighting last
    (checkpoint,) = _callbacks(*DATA_MODEL)
    assert isinstance(checkpoint, ResumableCheckpoint)
    assert (checkpoint.dirpath, checkpoint.monitor, checkpoint.mode) == (None, "val/acc", "max")
    assert (checkpoint.last_every_n_steps, checkpoint.filename) == (100, "best-{step}-{val/acc:.4f}")
    checkpoint, weighting = _callbacks(*DATA_MODEL, *UNIFORM, "--trainer.callbacks.warmup_steps=7")
    assert isinstance(checkpoint, ResumableCheckpoint)
    assert isinstance(weighting, DifficultyWeightingCallback)
    assert weighting.options.warmup_steps == 7  # `--trainer.callbacks.<argument>` still sets the weighting callback
    # the quickstart's own checkpoint (writing into the run's version folder) stays; a sampling config after it
    # replaces it by the default
    (own,) = _callbacks(*QUICKSTART)
    assert isinstance(own, ResumableCheckpoint)
    assert (own.dirpath, own.last_every_n_steps) == (None, 50)
    checkpoint, _ = _callbacks(*QUICKSTART, *UNIFORM)
    assert isinstance(checkpoint, ResumableCheckpoint)
    assert checkpoint.dirpath is None
    # a list without a checkpoint gets one; with checkpointing turned off, none
    guard = "--trainer.callbacks+=lightning_episodes.callbacks.NonFiniteGuard"
    assert [type(c) for c in _callbacks(*DATA_MODEL, guard)] == [ResumableCheckpoint, NonFiniteGuard]
    (weighting,) = _callbacks(*DATA_MODEL, *UNIFORM, "--trainer.enable_checkpointing=false")
    assert isinstance(weighting, DifficultyWeightingCallback)


def test_print_config_shows_the_default_checkpoint(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["fit", *DATA_MODEL, *UNIFORM, "--print_config"])
    callbacks = yaml.safe_load(capsys.readouterr().out)["trainer"]["callbacks"]
    weighting = "lightning_episodes.callbacks.DifficultyWeightingCallback"
    assert [c["class_path"] for c in callbacks] == [DEFAULT_CHECKPOINT["class_path"], weighting]
    assert callbacks[0]["init_args"] == DEFAULT_CHECKPOINT["init_args"]


def _args(tmp_path: Path, sampling: Path | None, reference: Path | None) -> list[str]:
    args = ["--config", str(CONFIGS / "quickstart.yaml")]
    if sampling is not None:
        args += ["--config", str(sampling)]
        if "offline" in sampling.stem:
            args += [f"--trainer.callbacks.reference_checkpoint={reference}", "--trainer.callbacks.offline_episodes=8"]
    else:
        args += [f"--trainer.callbacks.dirpath={tmp_path / 'checkpoints'}"]
    return [
        *args,
        *tiny_cli_options(tmp_path, **{"trainer.val_check_interval": 2, "model.backbone_options": "{hidden: 8}"}),
    ]


def _step(path: Path) -> int:
    checkpoint: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return int(checkpoint["global_step"])


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [None, *SAMPLING], ids=lambda p: "quickstart" if p is None else p.stem)
def test_fit_then_resume_with_ckpt_path_last(tmp_path: Path, sampling: Path | None) -> None:
    reference = tmp_path / "reference.ckpt"
    if sampling is not None and "offline" in sampling.stem:
        main(["fit", *_args(tmp_path / "reference", None, None), "--trainer.max_steps=2"])
        (tmp_path / "reference" / "checkpoints" / "last.ckpt").rename(reference)
    run = tmp_path / "run"
    main(["fit", *_args(run, sampling, reference), "--trainer.max_steps=3"])
    last = run / "checkpoints" / "last.ckpt" if sampling is None else run / "logs/version_0/checkpoints/last.ckpt"
    assert _step(last) == 3  # the end of fit, between validations (at 2 and 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = main(["fit", *_args(run, sampling, reference), "--trainer.max_steps=5", "--ckpt_path=last"])
    assert cli.trainer.ckpt_path == str(last)  # resumed, not started over
    # the folder holds the checkpoints it continues from: nothing to warn about
    assert not [w for w in caught if "exists and is not empty" in str(w.message)]
    assert _step(last) == 5  # continued from step 3 in the same file
    if sampling is not None:  # and in the same run folder
        assert [p.name for p in (run / "logs").iterdir()] == ["version_0"]

"""Every shipped config that sets the callbacks writes last.ckpt as the last state and resumes with one command:
``fit ... --ckpt_path last`` (the README's resume command), in the same run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lightning_episodes.cli import main

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


@pytest.mark.parametrize("path", WITH_CALLBACKS, ids=_name)
def test_the_checkpoint_callback_writes_last_every_n_steps(path: Path) -> None:
    callbacks = yaml.safe_load(path.read_text())["trainer"]["callbacks"]
    checkpoint = callbacks[0]
    assert checkpoint["class_path"] == "lightning_episodes.callbacks.ResumableCheckpoint"
    assert checkpoint["init_args"]["save_last"] is True
    assert checkpoint["init_args"]["last_every_n_steps"] >= 1
    assert checkpoint["init_args"]["monitor"] == "val/acc"


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
        f"--trainer.default_root_dir={tmp_path}",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--data.dataset=tiny",
        "--data.image_size=16",
        "--data.shots=2",
        "--data.queries=3",
        "--data.episodes_per_batch=4",
        "--data.val_episodes=8",
        "--data.test_episodes=8",
        "--trainer.val_check_interval=2",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--model.backbone_options={hidden: 8}",
    ]


def _step(path: Path) -> int:
    checkpoint: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return int(checkpoint["global_step"])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
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
    cli = main(["fit", *_args(run, sampling, reference), "--trainer.max_steps=5", "--ckpt_path=last"])
    assert cli.trainer.ckpt_path == str(last)  # resumed, not started over
    assert _step(last) == 5  # continued from step 3 in the same file
    if sampling is not None:  # and in the same run folder
        assert [p.name for p in (run / "logs").iterdir()] == ["version_0"]

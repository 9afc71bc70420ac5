"""ResumableCheckpoint: last.ckpt is the last state (at a step interval and at the end of fit) while the best
checkpoint by the monitor is kept; find_last_checkpoint finds a run's last.ckpt."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from lightning_episodes import ProtoNet
from lightning_episodes.callbacks import ResumableCheckpoint
from lightning_episodes.callbacks.checkpointing import find_last_checkpoint
from tests.callbacks.helpers import CrashAt, CrashInValidationAt
from tests.helpers import tiny_datamodule, tiny_trainer

#: the monitored score at the validations of steps 2, 4, 6: best at step 2, as when validation peaks early
SCORES = [3.0, 2.0, 1.0]


class FixedScore(Callback):
    """Logs ``val/score`` = SCORES[i] at the i-th validation of the fit (the sanity check does not count)."""

    def __init__(self) -> None:
        self.seen = 0

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        pl_module.log("val/score", SCORES[self.seen])
        self.seen += 1

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}


def _fit(checkpoint: ModelCheckpoint, max_steps: int = 7, extra: list[Callback] | None = None) -> None:
    pl.seed_everything(0)
    trainer = tiny_trainer(
        max_steps=max_steps,
        val_check_interval=2,
        limit_val_batches=1,
        enable_checkpointing=True,
        callbacks=[FixedScore(), *(extra or []), checkpoint],
    )
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule())


def _load(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def _best_in(checkpoint: dict[str, Any]) -> str:
    return next(s["best_model_path"] for k, s in checkpoint["callbacks"].items() if "Checkpoint" in k)


def _options(tmp_path: Path) -> dict[str, Any]:
    return {
        "dirpath": tmp_path,
        "monitor": "val/score",
        "mode": "max",
        "filename": "best-{step}",
        "auto_insert_metric_name": False,
    }


def test_lightning_model_checkpoint_leaves_last_at_the_best_step(tmp_path: Path) -> None:
    """The issue, as Lightning behaves (why ResumableCheckpoint exists): last.ckpt stays at the best step."""
    _fit(ModelCheckpoint(save_last=True, **_options(tmp_path)))
    assert _load(tmp_path / "last.ckpt")["global_step"] == 2


def test_last_is_the_state_at_the_end_of_fit_and_best_is_kept(tmp_path: Path) -> None:
    _fit(ResumableCheckpoint(last_every_n_steps=3, **_options(tmp_path)))
    last = _load(tmp_path / "last.ckpt")
    assert last["global_step"] == 7  # max_steps, between validations and off the interval
    best = Path(_best_in(last))
    assert best.name == "best-2.ckpt"  # the highest score, at the first validation
    assert _load(best)["global_step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best-2.ckpt", "last.ckpt"]


def test_a_killed_run_loses_at_most_the_interval(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="CRASH"):
        _fit(ResumableCheckpoint(last_every_n_steps=3, **_options(tmp_path)), extra=[CrashAt(5)])
    last = _load(tmp_path / "last.ckpt")
    assert last["global_step"] == 3
    assert Path(_best_in(last)).name == "best-2.ckpt"


def test_last_at_a_validation_step_records_the_validation(tmp_path: Path) -> None:
    """Written at step 4 before its validation, last.ckpt is written again after it (the best path, the
    validation's progress): resuming from it does not depend on which of the two it was."""
    with pytest.raises(RuntimeError, match="CRASH"):
        _fit(ResumableCheckpoint(last_every_n_steps=2, **_options(tmp_path)), extra=[CrashAt(5)])
    last = _load(tmp_path / "last.ckpt")
    assert last["global_step"] == 4
    assert last["callbacks"]["FixedScore"] == {"seen": 2}  # after the validations of steps 2 and 4


def test_a_run_killed_in_a_validation_at_a_due_step_keeps_the_previous_last(tmp_path: Path) -> None:
    """Step 4 is due for last.ckpt and validated: killed inside that validation, last.ckpt is still the state of
    step 2 (after its validation), so the resumed run repeats steps 3-4 and the validation of step 4 (Lightning
    does not repeat a validation due at the step it resumes from)."""
    with pytest.raises(RuntimeError, match="CRASH"):
        _fit(ResumableCheckpoint(last_every_n_steps=2, **_options(tmp_path)), extra=[CrashInValidationAt(4)])
    last = _load(tmp_path / "last.ckpt")
    assert last["global_step"] == 2
    assert last["callbacks"]["FixedScore"] == {"seen": 1}


def test_a_validation_expected_but_not_run_does_not_lose_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the loop was to validate after step 2 but ran no validation (an empty validation loader), last.ckpt,
    which waited for it, is written at the next batch (step 3) instead of not at all."""
    monkeypatch.setattr(ResumableCheckpoint, "_validation_follows", staticmethod(lambda trainer: True))
    pl.seed_everything(0)
    checkpoint = ResumableCheckpoint(dirpath=tmp_path, last_every_n_steps=2)
    trainer = tiny_trainer(
        max_steps=7, limit_val_batches=0, enable_checkpointing=True, callbacks=[CrashAt(4), checkpoint]
    )
    with pytest.raises(RuntimeError, match="CRASH"):
        trainer.fit(ProtoNet(image_size=16), tiny_datamodule())
    assert _load(tmp_path / "last.ckpt")["global_step"] == 3


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"last_every_n_steps": -1}, "last_every_n_steps must be an integer >= 0, got -1"),
        ({"last_every_n_steps": 2.5}, "last_every_n_steps must be an integer >= 0, got 2.5"),
        ({"save_last": False}, "save_last must be true, got False"),
        ({"save_last": "link"}, "save_last must be true, got 'link'"),
    ],
)
def test_bad_options_are_named(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ResumableCheckpoint(**options)


def test_find_last_checkpoint_takes_the_newest_run_folder_of_the_logger(tmp_path: Path) -> None:
    def trainer() -> pl.Trainer:
        return pl.Trainer(
            logger=CSVLogger(tmp_path, name="logs"), callbacks=[ResumableCheckpoint()], default_root_dir=tmp_path
        )

    with pytest.raises(FileNotFoundError, match=r"no last.ckpt in .*logs/<version>/checkpoints/last.ckpt"):
        find_last_checkpoint(trainer())
    for version, mtime in (("version_0", 100), ("version_1", 300), ("version_2", 200)):
        path = tmp_path / "logs" / version / "checkpoints" / "last.ckpt"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x")
        os.utime(path, (mtime, mtime))
    assert find_last_checkpoint(trainer()) == tmp_path / "logs" / "version_1" / "checkpoints" / "last.ckpt"


def test_find_last_checkpoint_needs_a_callback_that_writes_last() -> None:
    trainer = pl.Trainer(logger=False, callbacks=[ModelCheckpoint(save_last=False)])
    with pytest.raises(FileNotFoundError, match="no checkpoint callback that writes last.ckpt"):
        find_last_checkpoint(trainer)

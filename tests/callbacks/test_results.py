"""A test run writes ``test_episodes.csv`` beside ``test_results.json``: each fixed test episode's identity (what
scoring the same data module names) and the difficulty and accuracy the test computed, whose mean is the recorded
accuracy; a test of anything else leaves no table (an earlier test's is removed, not left to be mistaken for it); the
record names the options and the defaults of the weighting callback that ran."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from pytorch_lightning.loggers import CSVLogger

from lightning_episodes import ProtoNet
from lightning_episodes.analysis.report import scheme_of
from lightning_episodes.callbacks import DifficultyWeightingCallback, TestResultsWriter
from lightning_episodes.evaluation import (
    RESULTS_FILE,
    SCORES_FILE,
    DifficultyTable,
    score_episodes,
    scoring_identities,
)
from tests.analysis.helpers import DEFAULTS
from tests.helpers import tiny_cli_options, tiny_datamodule, tiny_trainer


class Batches:
    """A loader of ready episodes (a bare list would be taken for several loaders)."""

    def __init__(self, batches: list[object]) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[object]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _tested(tmp_path: Path, **trainer_options: object) -> tuple[ProtoNet, Path]:
    torch.manual_seed(0)
    model = ProtoNet(in_channels=1, image_size=16, backbone_options={"hidden": 8})
    datamodule = tiny_datamodule(eval_episodes_per_batch=7)  # 30 test episodes: 4 full batches and one of 2
    trainer = tiny_trainer(
        max_steps=3, logger=CSVLogger(tmp_path), limit_val_batches=0, callbacks=[TestResultsWriter()], **trainer_options
    )
    trainer.fit(model, datamodule=datamodule)
    trainer.test(model, datamodule=datamodule)
    return model, Path(trainer.log_dir or "")


def test_the_test_writes_each_episodes_identity_and_scores(tmp_path: Path) -> None:
    model, folder = _tested(tmp_path)
    record = json.loads((folder / RESULTS_FILE).read_text())
    table = DifficultyTable.read(folder / SCORES_FILE)
    assert table.episode_ids.tolist() == list(range(30)) == list(range(record["episodes"]))
    assert table.accuracy.mean() == pytest.approx(record["accuracy"], abs=1e-12)
    # the identities are the data module's fixed test episodes, and the scores what scoring them gives
    datamodule = tiny_datamodule(eval_episodes_per_batch=7)
    datamodule.setup("test")
    identity = scoring_identities(datamodule, "test", 30)
    assert [list(r.classes) for r in table] == identity.classes.tolist()
    scored = score_episodes(model, datamodule, 30, batch_size=7)
    assert all(a.same_episode(b) for a, b in zip(table, scored, strict=True))
    assert table.accuracy.tolist() == scored.accuracy.tolist()
    assert table.difficulty.tolist() == scored.difficulty.tolist()  # the same batches, the same float32 losses


def test_a_partial_test_writes_the_episodes_it_scored(tmp_path: Path) -> None:
    _, folder = _tested(tmp_path, limit_test_batches=2)
    record = json.loads((folder / RESULTS_FILE).read_text())
    table = DifficultyTable.read(folder / SCORES_FILE)
    assert record["episodes"] == 14
    assert table.episode_ids.tolist() == list(range(14))
    assert table.accuracy.mean() == pytest.approx(record["accuracy"], abs=1e-12)


@pytest.mark.filterwarnings("ignore:Experiment logs directory")  # the same folder, on purpose
def test_a_test_on_other_loaders_leaves_no_table(tmp_path: Path) -> None:
    model, folder = _tested(tmp_path)
    assert (folder / SCORES_FILE).is_file()
    datamodule = tiny_datamodule(eval_episodes_per_batch=7)
    datamodule.setup("test")
    trainer = tiny_trainer(logger=CSVLogger(tmp_path, version=folder.name), callbacks=[TestResultsWriter()])
    episodes = [datamodule.assemble(batch, dtype=torch.float32) for batch in datamodule.test_dataloader()]
    trainer.test(model, dataloaders=Batches(episodes))  # no data module: which episodes these are is unknown
    assert (folder / RESULTS_FILE).is_file()
    assert not (folder / SCORES_FILE).exists()


@pytest.mark.slow
def test_the_record_keeps_the_whole_validation_curve(tmp_path: Path) -> None:
    """Validations at steps 2, 4 and 6; the test of the best checkpoint (restored with the writer's state as of its
    step) still records all three, each equal to the logged val/acc; a standalone test of last.ckpt too."""
    from lightning_episodes.cli import main

    options = tiny_cli_options(tmp_path, **{"trainer.max_steps": 6, "trainer.val_check_interval": 2})
    main(["fit", "--config", "configs/quickstart.yaml", *options, f"--trainer.callbacks.dirpath={tmp_path}/ckpt",
          "--test_after_fit=true", "--trainer.log_every_n_steps=1"])  # fmt: skip
    (record_path,) = tmp_path.rglob("test_results.json")
    record = json.loads(record_path.read_text())
    with (record_path.parent / "metrics.csv").open(newline="") as handle:
        logged = [[int(r["step"]) + 1, float(r["val/acc"])] for r in csv.DictReader(handle) if r.get("val/acc")]
    assert [step for step, _ in record["validation"]] == [2, 4, 6]
    assert [step for step, _ in logged] == [2, 4, 6]
    assert [accuracy for _, accuracy in record["validation"]] == pytest.approx([accuracy for _, accuracy in logged])
    state = torch.load(tmp_path / "ckpt/last.ckpt", weights_only=True)["callbacks"]["TestResultsWriter"]
    assert state["validation"] == record["validation"]


def test_the_writer_records_the_defaults_of_the_callback_that_ran() -> None:
    from types import SimpleNamespace

    from lightning_episodes.callbacks.results import sampling_defaults, sampling_record

    class Slow(DifficultyWeightingCallback):
        def __init__(self, decay: float = 0.5, **kwargs: Any) -> None:
            super().__init__(decay=decay, **kwargs)

    trainer: Any = SimpleNamespace(callbacks=[Slow(warmup_steps=50)])
    defaults = sampling_defaults(trainer)
    assert defaults == {**DEFAULTS, "decay": 0.5}
    record = sampling_record(trainer)
    assert record is not None
    assert defaults is not None
    assert scheme_of(record, defaults) == ("uniform", "online", (("warmup_steps", "50"),))  # decay is at its default
    assert sampling_defaults(SimpleNamespace(callbacks=[])) is None  # type: ignore[arg-type]

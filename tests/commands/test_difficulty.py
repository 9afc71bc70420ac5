"""`lightning-episodes difficulty`: the CSV and JSON it writes are score_episodes' table of the checkpoint's fixed
episodes, with the data settings of the checkpoint, then the configs' data sections, then --data.KEY options; user
errors are one line through the console script."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import yaml

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.loading import load_episodic_module
from lightning_episodes.analysis import DifficultyTable
from lightning_episodes.cli import entry, run_tool
from lightning_episodes.commands.difficulty import main
from lightning_episodes.evaluation.scoring import score_episodes
from tests.helpers import tiny_datamodule, tiny_trainer


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pl.seed_everything(0)
    trainer = tiny_trainer(max_steps=2, limit_val_batches=0)
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule(eval_episodes_per_batch=3))
    path = tmp_path_factory.mktemp("scoring") / "protonet.ckpt"
    trainer.save_checkpoint(path)
    return path


def test_command_scores_with_the_checkpoints_data_settings(checkpoint: Path, tmp_path: Path) -> None:
    output = tmp_path / "out" / "scores.csv"
    assert run_tool(["difficulty", "--ckpt_path", str(checkpoint), "--output", str(output), "--episodes", "9"]) == 0
    expected = score_episodes(load_episodic_module(checkpoint), tiny_datamodule(), count=9)
    table = DifficultyTable.read(output)
    assert [r.same_episode(e) for r, e in zip(table, expected, strict=True)] == [True] * 9
    np.testing.assert_allclose(table.difficulty, expected.difficulty, rtol=1e-6)
    record = json.loads(output.with_suffix(".json").read_text())
    assert record["algorithm"] == "ProtoNet"
    assert record["eval_batch_norm"] == "running"
    assert record["episodes"] == 9
    assert record["data"]["dataset"] == "tiny"


def test_command_reads_checkpoints_written_under_the_cli(checkpoint: Path, tmp_path: Path) -> None:
    # LightningCLI saves its bookkeeping beside the data module's arguments; it is not an argument
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    saved["datamodule_hyper_parameters"] |= {
        "_class_path": "lightning_episodes.data.EpisodicDataModule",
        "_instantiator": "lightning.pytorch.cli.instantiate_module",
    }
    torch.save(saved, tmp_path / "cli.ckpt")
    output = tmp_path / "scores.csv"
    assert main(["--ckpt_path", str(tmp_path / "cli.ckpt"), "--output", str(output), "--episodes", "3"]) == 0
    expected = score_episodes(load_episodic_module(checkpoint), tiny_datamodule(), count=3)
    assert DifficultyTable.read(output).records == expected.records


def test_config_files_then_data_options_override_the_saved_settings(checkpoint: Path, tmp_path: Path) -> None:
    config = tmp_path / "fit.yaml"
    data = {"class_path": "lightning_episodes.data.EpisodicDataModule", "init_args": {"seed": 3, "eval_ways": 3}}
    config.write_text(yaml.safe_dump({"trainer": {"max_steps": 5}, "data": data}))
    output = tmp_path / "scores.csv"
    argv = ["--ckpt_path", str(checkpoint), "--output", str(output), "--config", str(config)]
    main([*argv, "--episodes", "4", "--split", "validation", "--data.eval_queries=1", "--data.seed", "4"])
    expected = score_episodes(
        load_episodic_module(checkpoint), tiny_datamodule(seed=4, eval_ways=3, eval_queries=1), 4, "validation"
    )
    assert DifficultyTable.read(output).records == expected.records


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--output", "x.csv"], "required: ckpt_path"),
        (["--ckpt_path", "missing.ckpt", "--output", "x.csv"], "does not exist"),
        (["--ckpt_path", "CKPT", "--output", "x.csv", "--data.nope", "1"], "nope"),
        (["--ckpt_path", "CKPT", "--output", "x.csv", "--episodes", "0"], "--episodes"),
        (["--ckpt_path", "CKPT", "--output", "x.csv", "--bogus"], "--bogus"),
        (["--ckpt_path", "CKPT", "--output", "x.csv", "--device", "gpu0"], "--device 'gpu0' is not a device"),
    ],
)
def test_command_errors_name_the_argument(
    argv: list[str], message: str, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert entry(["difficulty", *(str(checkpoint) if a == "CKPT" else a for a in argv)]) == 2
    error = capsys.readouterr().err
    (line,) = [line for line in error.splitlines() if "error:" in line]  # one line, through the console script
    assert line.startswith("lightning-episodes difficulty: error: ")
    assert message in line


@pytest.mark.parametrize("broken", ["parameter", "buffer"])
def test_a_checkpoint_with_nonfinite_weights_is_refused_in_one_line(
    broken: str, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The users' report: NaN weights scored every episode with difficulty nan and accuracy 1/ways, exit 0. The
    evaluation's check refuses the model, as `test` does, before any episode is scored."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    name = "backbone.blocks.0.conv.weight" if broken == "parameter" else "backbone.blocks.1.norm.running_var"
    saved["state_dict"][name].view(-1)[0] = float("nan") if broken == "parameter" else float("inf")
    damaged = tmp_path / "damaged.ckpt"
    torch.save(saved, damaged)
    output = tmp_path / "scores.csv"
    assert entry(["difficulty", "--ckpt_path", str(damaged), "--output", str(output), "--episodes", "3"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    kind = "parameters" if broken == "parameter" else "buffers"
    assert line.startswith(
        f"lightning-episodes difficulty: error: checkpoint {damaged}: refusing to evaluate a model with non-finite "
        f"{kind} ({name})"
    ), line
    assert not output.exists()
    assert not output.with_suffix(".json").exists()

"""The LightningCLI in process: parsing, linking, fit + test, and `--ckpt_path best` in a new run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms import load_episodic_module
from lightning_episodes.cli import main


def _config(tmp_path: Path) -> Path:
    """The quickstart config with every output under ``tmp_path``."""
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    trainer = config["trainer"]
    trainer["default_root_dir"] = str(tmp_path)
    trainer["logger"]["init_args"]["save_dir"] = str(tmp_path)
    trainer["callbacks"][0]["init_args"]["dirpath"] = str(tmp_path / "checkpoints")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


#: Data sizes that make a fit take seconds on the tiny registered dataset (tests/conftest.py).
TINY_DATA = [
    "--data.dataset=tiny",
    "--data.image_size=16",
    "--data.shots=2",
    "--data.queries=3",
    "--data.episodes_per_batch=4",
    "--data.val_episodes=12",
    "--data.test_episodes=12",
]


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--config",
        str(_config(tmp_path)),
        *TINY_DATA,
        "--trainer.max_steps=4",
        "--trainer.val_check_interval=2",
        "--trainer.enable_progress_bar=false",
        *extra,
    ]


def test_parse_without_running(tmp_path: Path) -> None:
    cli = main([*_args(tmp_path), "--data.ways=7", "--model.distance=cosine", "--data.channels=3"], run=False)
    assert isinstance(cli.model, ProtoNet)
    assert cli.model.distance == "cosine"
    assert cli.datamodule.ways == 7
    assert cli.model.hparams.in_channels == 3
    assert cli.model.hparams.image_size == 16


@pytest.mark.slow
def test_fit_then_test_best_in_a_new_run(tmp_path: Path) -> None:
    main(["fit", *_args(tmp_path)])
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert "last.ckpt" in checkpoints
    assert any(name.startswith("best-") for name in checkpoints)
    cli = main(["test", *_args(tmp_path), "--ckpt_path=best"])
    metrics = cli.trainer.callback_metrics
    assert metrics["test/episodes"] == 12
    assert 0.0 <= float(metrics["test/acc"]) <= 1.0
    record = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert record["episodes"] == 12
    assert record["algorithm"] == "ProtoNet"
    assert record["eval_batch_norm"] == "running"
    assert record["accuracy"] == pytest.approx(float(metrics["test/acc"]))
    assert record["sampling"] is None
    assert record["seed"] == 0
    assert len(record["config_hash"]) == 16
    assert record["trained_on"] == {"dataset": "tiny", "ways": 5, "shots": 2, "queries": 3}
    assert record["ckpt_path"].endswith(".ckpt")
    assert "best-" in record["ckpt_path"]
    # the best checkpoint reloads through the concrete class with nothing passed again
    best = next((tmp_path / "checkpoints").glob("best-*.ckpt"))
    model = ProtoNet.load_from_checkpoint(best)
    assert model.hparams.image_size == 16
    # and through the generic loader, which reads the class from the checkpoint
    generic = load_episodic_module(best)
    assert type(generic) is ProtoNet
    assert generic.trained_on == record["trained_on"]


def test_best_without_a_fit_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["test", *_args(tmp_path), "--ckpt_path=best"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --ckpt_path best: no last.ckpt in {tmp_path / 'checkpoints'}: "
        "has a fit with this configuration saved one?"
    )

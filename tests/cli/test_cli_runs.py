"""One run, one place: ``--ckpt_path best|last`` takes a run of the command's own config, a fresh fit never writes over
another config's checkpoints, and a checkpoint of another model is one line (lightning_episodes/cli_runs.py)."""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lightning_episodes.cli import DEFAULT_CHECKPOINT, main
from lightning_episodes.cli_runs import CONFIG_NAME, check_dirpath_free, pick_run, run_config, run_settings
from lightning_episodes.console import TOOLS
from lightning_episodes.console import run as console_run
from tests.helpers import tiny_cli_options

QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")
WEIGHTING = "lightning_episodes.callbacks.DifficultyWeightingCallback"

#: a run's config.yaml, as LightningCLI saves it (the parts that matter here)
CONFIG: dict[str, Any] = {
    "seed_everything": 0,
    "ckpt_path": None,
    "trainer": {
        "max_steps": 100,
        "devices": 1,
        "accelerator": "auto",
        "default_root_dir": "runs/a",
        "accumulate_grad_batches": 1,
        "callbacks": [
            {"class_path": DEFAULT_CHECKPOINT["class_path"], "init_args": {"dirpath": None, "monitor": "val/acc"}},
            {"class_path": WEIGHTING, "init_args": {"target": "uniform", "seed": 0}},
            {"class_path": "pytorch_lightning.callbacks.LearningRateMonitor", "init_args": {}},
        ],
    },
    "model": {
        "class_path": "lightning_episodes.algorithms.ProtoNet",
        "init_args": {"distance": "euclidean", "backbone_options": {"hidden": 32}, "channels_last": False},
    },
    "data": {
        "class_path": "lightning_episodes.data.EpisodicDataModule",
        "init_args": {
            "dataset": "glyphs",
            "ways": 5,
            "shots": 5,
            "seed": 0,
            "test_episodes": 1000,
            "task_sampler": None,
        },
    },
}


def _changed(setting: str, value: Any) -> dict[str, Any]:
    """:data:`CONFIG` with ``setting`` (``data.ways``, ``trainer.callbacks.1.target``) set to ``value``."""
    config = copy.deepcopy(CONFIG)
    *path, last = setting.split(".")
    node: Any = config
    for key in path:
        node = node[int(key)] if isinstance(node, list) else node[key]
        node = node.get("init_args", node) if isinstance(node, dict) and "class_path" in node else node
    node[last] = value
    return config


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("trainer.max_steps", 5000),
        ("trainer.devices", 2),
        ("trainer.default_root_dir", "elsewhere"),
        ("trainer.callbacks.0.dirpath", "elsewhere/checkpoints"),
        ("trainer.callbacks.1.seed", 3),
        ("seed_everything", 7),
        ("ckpt_path", "last"),
        ("data.seed", 4),
        ("data.test_episodes", 20),
        ("model.channels_last", True),
    ],
)
def test_outputs_seeds_length_devices_and_the_evaluation_are_not_the_runs_config(setting: str, value: Any) -> None:
    assert run_settings(_changed(setting, value)) == run_settings(CONFIG)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("model.distance", "cosine"),
        ("model.backbone_options.hidden", 64),
        ("data.ways", 20),
        ("data.dataset", "glyphs-100"),
        ("data.task_sampler", {"class_path": "lightning_episodes.data.HardTaskMining", "init_args": {}}),
        ("trainer.callbacks.1.target", "hard"),
        ("trainer.accumulate_grad_batches", 2),
    ],
)
def test_the_model_the_data_and_the_training_callbacks_are(setting: str, value: Any) -> None:
    assert run_settings(_changed(setting, value)) != run_settings(CONFIG)


def test_a_run_without_the_weighting_callback_is_another_config() -> None:
    plain = copy.deepcopy(CONFIG)
    del plain["trainer"]["callbacks"][1]
    assert run_settings(plain) != run_settings(CONFIG)
    assert "trainer.callbacks.0" not in run_settings(plain)  # the checkpoint and the monitor are not part of it


def _run(root: Path, version: int, config: dict[str, Any]) -> Path:
    """A run folder ``<root>/version_<n>`` with its config.yaml and a ``checkpoints/last.ckpt`` (not a real one)."""
    folder = root / f"version_{version}"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / CONFIG_NAME).write_text(yaml.safe_dump(config))
    last = folder / "checkpoints" / "last.ckpt"
    last.write_bytes(b"")
    os.utime(last, (version, version))  # newer versions are newer files
    return last


def test_pick_run_takes_the_newest_run_of_the_same_config(tmp_path: Path) -> None:
    cosine = _changed("model.distance", "cosine")
    runs = [_run(tmp_path, 0, CONFIG), _run(tmp_path, 1, cosine), _run(tmp_path, 2, CONFIG), _run(tmp_path, 3, cosine)]
    newest_first = runs[::-1]
    assert pick_run(newest_first, CONFIG) == runs[2]
    assert pick_run(newest_first, cosine) == runs[3]
    assert pick_run(newest_first, _changed("trainer.max_steps", 9)) == runs[2]  # a longer resume: the same run


def test_no_run_of_the_config_names_the_nearest_and_how_they_differ(tmp_path: Path) -> None:
    far = _changed("model.distance", "cosine")
    far["data"]["init_args"]["ways"] = 20
    runs = [_run(tmp_path, 0, _changed("model.distance", "cosine")), _run(tmp_path, 1, far)]
    with pytest.raises(FileNotFoundError) as error:
        pick_run(runs[::-1], CONFIG)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("none of the 2 runs with a last.ckpt was made with this config; the nearest, ")
    nearest = message.index(f"{tmp_path / 'version_0'}: model.distance=cosine (this config: euclidean)")
    assert nearest < message.index(f"{tmp_path / 'version_1'}: data.ways=20 (this config: 5), model.distance=cosine")


def test_a_class_that_differs_is_named_without_its_arguments(tmp_path: Path) -> None:
    mining = {"class_path": "lightning_episodes.data.HardTaskMining", "init_args": {"hard_fraction": 0.5}}
    last = _run(tmp_path, 0, _changed("data.task_sampler", mining))
    with pytest.raises(
        FileNotFoundError, match=r"version_0: data.task_sampler=HardTaskMining\(\) \(this config: none\) "
    ):
        pick_run([last], CONFIG)


def _checkpoint(path: Path, log_dir: Path | None = None, hparams: dict[str, Any] | None = None) -> Path:
    state = {"ResumableCheckpoint{'monitor': 'val/acc'}": {"log_dir": str(log_dir) if log_dir else None}}
    torch.save({"state_dict": {}, "callbacks": state, **({"hyper_parameters": hparams} if hparams else {})}, path)
    return path


def test_a_dirpath_of_its_own_finds_the_config_in_the_log_folder_its_checkpoint_records(tmp_path: Path) -> None:
    logs, dirpath = tmp_path / "logs" / "version_0", tmp_path / "checkpoints"
    logs.mkdir(parents=True)
    dirpath.mkdir()
    (logs / CONFIG_NAME).write_text(yaml.safe_dump(CONFIG))
    _checkpoint(dirpath / "last.ckpt", log_dir=logs)
    (tmp_path / CONFIG_NAME).write_text("trainer: {max_steps: 8}\n")  # a user's config beside the folder: not the run's
    assert run_config(dirpath / "last.ckpt") == (CONFIG, True)
    check_dirpath_free(dirpath, _changed("trainer.max_steps", 5))  # the same config: its own folder
    with pytest.raises(ValueError, match="holds the checkpoints of a run of another config") as error:
        check_dirpath_free(dirpath, _changed("data.ways", 20))
    assert str(error.value).startswith(
        f"checkpoint dirpath {dirpath} holds the checkpoints of a run of another config (data.ways=5 (this config: "
        "20)), which this fit would replace: leave dirpath out of the checkpoint callback"
    )


def test_without_a_config_yaml_the_checkpoints_hyperparameters_tell_the_model_and_data(tmp_path: Path) -> None:
    hparams = {"_class_path": "lightning_episodes.algorithms.ProtoNet", "distance": "cosine", "ways": 5}
    last = _checkpoint(tmp_path / "last.ckpt", hparams=hparams)
    config, whole = run_config(last)
    assert not whole
    assert config == {"model": {"class_path": hparams["_class_path"], "init_args": {"distance": "cosine", "ways": 5}}}
    # only this config's model and data settings are compared: not the callbacks it does not record
    with pytest.raises(FileNotFoundError, match=r"model.distance=cosine \(this config: euclidean\)\W"):
        pick_run([last], CONFIG)
    assert pick_run([last], _changed("model.distance", "cosine")) == last


# -- through the command line ----------------------------------------------------------------------------------------
def _fit(folder: Path, *args: str) -> list[str]:
    """A few steps of the quickstart on the tiny data, every output under ``folder``."""
    small = {"trainer.max_steps": 2, "trainer.val_check_interval": 2, "model.backbone_options": "{hidden: 8}"}
    return ["--config", QUICKSTART, *tiny_cli_options(folder, **small), *args]


@pytest.mark.slow
def test_validate_best_takes_the_run_of_its_own_config_not_the_newest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's sequence that ended in `Unexpected key(s) in state_dict: "scale"`: fit, fit another config, then
    validate the first config's best; then the second's; and a third config is one line naming the nearest runs."""
    main(["fit", *_fit(tmp_path)])
    main(["fit", *_fit(tmp_path, "--data.ways=4", "--model.distance=cosine")])
    logs = tmp_path / "logs"
    assert sorted(p.parent.parent.name for p in logs.glob("*/checkpoints/last.ckpt")) == ["version_0", "version_1"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = main(["validate", *_fit(tmp_path), "--ckpt_path=best"])
    assert Path(cli.trainer.ckpt_path).parent == logs / "version_0" / "checkpoints"
    assert not [w for w in caught if "dirpath has changed" in str(w.message)]  # a validation's folder is its own
    cli = main(["test", *_fit(tmp_path, "--data.ways=4", "--model.distance=cosine"), "--ckpt_path=best"])
    assert Path(cli.trainer.ckpt_path).parent == logs / "version_1" / "checkpoints"

    capsys.readouterr()
    assert console_run(["test", *_fit(tmp_path, "--model.distance=cosine"), "--ckpt_path=last"], main, TOOLS) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "none of the 2 runs with a last.ckpt was made with this config; the nearest, " in line
    assert f"{logs / 'version_0'}: model.distance=euclidean (this config: cosine)" in line


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
def test_a_fresh_fit_into_a_dirpath_of_another_config_is_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirpath = f"--trainer.callbacks.dirpath={tmp_path / 'checkpoints'}"
    main(["fit", *_fit(tmp_path, dirpath)])
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    capsys.readouterr()
    assert console_run(["fit", *_fit(tmp_path, dirpath, "--model.distance=cosine")], main, TOOLS) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert line.startswith(
        f"lightning-episodes fit: error: trainer.callbacks: checkpoint dirpath {tmp_path / 'checkpoints'} holds the "
        "checkpoints of a run of another config (model.distance=euclidean (this config: cosine)), which this fit "
        "would replace: leave dirpath out"
    )
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before  # nothing written, no version
    main(["fit", *_fit(tmp_path, dirpath, "--trainer.max_steps=3")])  # the same config may start again there


@pytest.mark.slow
def test_a_checkpoint_file_of_another_model_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["fit", *_fit(tmp_path, "--model.distance=cosine")])
    checkpoint = torch.load(tmp_path / "logs/version_0/checkpoints/last.ckpt", weights_only=True)
    del checkpoint["hyper_parameters"]  # saved without them (from Python): the config's model is built
    path = tmp_path / "cosine.ckpt"
    torch.save(checkpoint, path)
    capsys.readouterr()
    assert console_run(["validate", *_fit(tmp_path), f"--ckpt_path={path}"], main, TOOLS) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert line == (
        f"lightning-episodes validate: error: --ckpt_path {path}: checkpoint {path} does not fit the model of this "
        'config (ProtoNet: unexpected key(s) in state_dict: "scale"): was it trained with another config? name a '
        "checkpoint of this config, or use the config of its run"
    )

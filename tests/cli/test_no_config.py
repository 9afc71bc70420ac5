"""A run without any ``--config``: it says which sizes it trains with and where it writes, and writes under
``runs/<model>`` rather than ``./lightning_logs``; a config or ``--trainer.default_root_dir`` keeps its own folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonargparse import Namespace

from lightning_episodes.cli import main, no_config_defaults
from tests.cli.test_cli import TINY_DATA

#: Sizes that make a fit take seconds on the tiny registered dataset (tests/conftest.py).
TINY = [
    *TINY_DATA,
    "--trainer.max_steps=2",
    "--trainer.val_check_interval=2",
    "--trainer.check_val_every_n_epoch=null",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--model.backbone_options={hidden: 8}",
]


def parsed(**trainer: object) -> Namespace:
    """A parsed ``fit`` configuration without ``--config``, with the data module's and the model's defaults."""
    return Namespace(
        config=None,
        trainer=Namespace(**{"default_root_dir": None, "max_steps": -1, **trainer}),
        model=Namespace(class_path="lightning_episodes.algorithms.ProtoNet", init_args=Namespace(backbone="conv4")),
        data=Namespace(
            class_path="lightning_episodes.data.EpisodicDataModule",
            init_args=Namespace(dataset="glyphs", ways=5, shots=5, queries=15, episodes_per_batch=16),
        ),
    )


def test_the_defaults_of_a_run_without_config() -> None:
    config = parsed()
    assert no_config_defaults(config, "fit", Namespace(config=None)) == (
        "fit without --config: ProtoNet conv4, glyphs 5-way 5-shot, 16 episodes x 15 queries a step, no max_steps; "
        "writing under runs/protonet (--config quickstart is sized for a CPU)"
    )
    assert config.trainer.default_root_dir == "runs/protonet"
    config = parsed(max_steps=30)
    assert ", max_steps 30;" in str(no_config_defaults(config, "fit", None))
    # test and validate write beside fit's run (so `--ckpt_path best|last` finds it), and say nothing
    for subcommand in ("test", "validate"):
        config = parsed()
        assert no_config_defaults(config, subcommand, None) is None
        assert config.trainer.default_root_dir == "runs/protonet"


@pytest.mark.parametrize(
    "given",
    [
        {"config": [Path("run.yaml")]},
        {"top": [Path("run.yaml")]},
        {"default_root_dir": "elsewhere"},
        {"subcommand": None},  # main(..., run=False): objects built in Python, as a pl.Trainer is
    ],
)
def test_a_config_or_an_output_folder_keeps_its_own(given: dict) -> None:
    config = parsed(default_root_dir=given.get("default_root_dir"))
    config["config"] = given.get("config")
    subcommand = given.get("subcommand", "fit")
    assert no_config_defaults(config, subcommand, Namespace(config=given.get("top"))) is None
    assert config.trainer.default_root_dir == given.get("default_root_dir")


@pytest.mark.slow
def test_fit_and_test_without_config_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    main(["fit", "--model=ProtoNet", *TINY])
    notes = [line for line in capsys.readouterr().err.splitlines() if "without --config" in line]
    assert notes == [
        "fit without --config: ProtoNet conv4, tiny 5-way 2-shot, 4 episodes x 3 queries a step, max_steps 2; "
        "writing under runs/protonet (--config quickstart is sized for a CPU)"
    ]
    run = tmp_path / "runs" / "protonet" / "lightning_logs"
    assert (run / "version_0" / "checkpoints" / "last.ckpt").is_file()
    main(["test", "--model=ProtoNet", *TINY, "--ckpt_path=best"])  # finds the run's best checkpoint
    assert "without --config" not in capsys.readouterr().err
    assert (run / "version_1" / "test_results.json").is_file()
    assert not (tmp_path / "lightning_logs").exists()

    # --trainer.default_root_dir, or any config, keeps its folder (a config without one: Lightning's default) quietly
    main(["fit", "--model=ProtoNet", *TINY, "--trainer.default_root_dir=elsewhere"])
    assert (tmp_path / "elsewhere" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    (tmp_path / "mine.yaml").write_text("model: ProtoNet\ntrainer:\n  max_steps: 2\n")
    main(["fit", "--config=mine.yaml", *TINY])
    assert (tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert "without --config" not in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["protonet"]

"""The shipped configs: their folder in the package, ``--config NAME`` through the real LightningCLI (a file on disk
always wins), and ``lightning-episodes configs``, which lists and copies them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from lightning_episodes.cli import main as cli_main
from lightning_episodes.commands.configs import CONFIGS_DIR, main, shipped_config, shipped_configs
from lightning_episodes.console import TOOLS, run

ROOT = Path(__file__).resolve().parents[2]


def printed_config(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    """The configuration that ``fit <args> --print_config`` prints, parsed."""
    with pytest.raises(SystemExit) as stopped:
        cli_main(["fit", *args, "--print_config"])
    assert stopped.value.code == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_the_repositorys_configs_are_the_packages() -> None:
    """One copy: ``configs/`` of a checkout is the package's folder, which a wheel ships."""
    assert (ROOT / "configs").resolve() == CONFIGS_DIR
    assert CONFIGS_DIR.parent == ROOT / "lightning_episodes"
    names = shipped_configs()
    assert next(iter(names)) == "quickstart"  # top-level files first
    assert {"quickstart", "sampling/uniform_online", "data/glyphs_5w5s", "models/protonet_euclidean_conv4"} <= set(
        names
    )
    assert len(names) == len(list((ROOT / "configs").rglob("*.yaml")))
    assert "lightning_episodes = configs/**/*.yaml" in (ROOT / "setup.cfg").read_text()  # the wheel's package data


def test_a_name_finds_a_shipped_config_only_where_no_file_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    quickstart = CONFIGS_DIR / "quickstart.yaml"
    for value in ("quickstart", "quickstart.yaml", "configs/quickstart.yaml", "./configs/quickstart.yaml"):
        assert shipped_config(value) == quickstart, value
    assert shipped_config("sampling/uniform_online") == CONFIGS_DIR / "sampling" / "uniform_online.yaml"
    for value in ("quickstartt", "uniform_online", "../cli", "configs", "sampling", ""):
        assert shipped_config(value) is None, value
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "quickstart.yaml").write_text("trainer: {max_steps: 7}\n")
    (tmp_path / "quickstart").write_text("trainer: {max_steps: 8}\n")
    assert shipped_config("configs/quickstart.yaml") is None
    assert shipped_config("quickstart") is None
    assert shipped_config("quickstart.yaml") == quickstart  # no file of that name here


def test_config_names_through_the_cli(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)  # an empty folder
    config = printed_config(["--config", "quickstart", "--config", "sampling/uniform_online"], capsys)
    assert config["trainer"]["max_steps"] == 100
    assert config["trainer"]["default_root_dir"] == "runs/quickstart"  # the quickstart's relative paths: here
    assert config["trainer"]["callbacks"][-1]["class_path"].endswith("DifficultyWeightingCallback")
    # the documentation's spelling finds the shipped file too, and says so
    with caplog.at_level(logging.INFO):
        assert printed_config(["--config", "configs/quickstart.yaml"], capsys)["trainer"]["max_steps"] == 100
    assert f"--config configs/quickstart.yaml: no such file here; using the shipped {CONFIGS_DIR}" in caplog.text
    # a file on disk wins over the name
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "quickstart.yaml").write_text("trainer: {max_steps: 7}\nmodel: ProtoNet\n")
    assert printed_config(["--config", "configs/quickstart.yaml"], capsys)["trainer"]["max_steps"] == 7
    (tmp_path / "quickstart").write_text("trainer: {max_steps: 8}\nmodel: ProtoNet\n")
    assert printed_config(["--config", "quickstart"], capsys)["trainer"]["max_steps"] == 8
    # the configuration given as a YAML string still works, and an unknown name is one line
    assert printed_config(["--model", "ProtoNet", "--config", "trainer: {max_steps: 9}"], capsys)["trainer"][
        "max_steps"
    ]
    assert run(["fit", "--config", "quickstartt"], cli_main, TOOLS) == 2
    error = capsys.readouterr().err
    assert "--config quickstartt: no such file here, nor a shipped config of that name" in error
    assert "Traceback" not in error


def test_the_command_lists_every_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(shipped_configs())
    assert lines[0].split(maxsplit=1)[1].startswith("ProtoNet (conv4, Euclidean) 5-way 5-shot")
    assert max(map(len, lines)) <= 120


def test_the_command_copies_configs_to_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(["configs", "quickstart", "configs/sampling/uniform_online.yaml"], cli_main, TOOLS) == 0
    copied = [Path("configs/quickstart.yaml"), Path("configs/sampling/uniform_online.yaml")]
    assert capsys.readouterr().out.splitlines() == list(map(str, copied))
    assert copied[0].read_text() == (CONFIGS_DIR / "quickstart.yaml").read_text()
    # the copy is a file on disk: the documentation's --config configs/... reads it now
    copied[0].write_text(copied[0].read_text().replace("max_steps: 100", "max_steps: 3"))
    assert printed_config(["--config", "configs/quickstart.yaml"], capsys)["trainer"]["max_steps"] == 3
    # refused: overwriting (nothing is copied), names with --all, an unknown name
    assert run(["configs", "quickstart", "data/glyphs_5w5s"], cli_main, TOOLS) == 2
    assert "configs/quickstart.yaml exists already (--force overwrites)" in capsys.readouterr().err
    assert not Path("configs/data").exists()
    assert run(["configs", "--all", "quickstart"], cli_main, TOOLS) == 2
    assert run(["configs", "nope"], cli_main, TOOLS) == 2
    assert "no shipped config 'nope'" in capsys.readouterr().err
    assert main(["quickstart", "--force"]) == 0
    assert "max_steps: 100" in copied[0].read_text()
    assert main(["--all", "--to", "mine", "--force"]) == 0
    assert sorted(p.relative_to("mine").with_suffix("").as_posix() for p in Path("mine").rglob("*.yaml")) == sorted(
        shipped_configs()
    )


def test_the_difficulty_command_reads_a_shipped_configs_data_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_episodes.commands.difficulty import data_section

    monkeypatch.chdir(tmp_path)
    expected = yaml.safe_load((CONFIGS_DIR / "quickstart.yaml").read_text())["data"]["init_args"]
    assert data_section("quickstart") == data_section("configs/quickstart.yaml") == expected
    Path("quickstart").write_text("data: {ways: 3}\n")
    assert data_section("quickstart") == {"ways": 3}

"""The environment is the locked one: every package of requirements/constraints.txt is installed at its version (the
set-up installs with ``-c`` that file), and every requirement of requirements/*.txt is locked there, so a study's
records are made, and the suite runs, with the same numpy, pillow and torch on every machine; and each test record
keeps the versions and the processor it was made with."""

from __future__ import annotations

import json
import platform
import re
from importlib import metadata
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.loggers import CSVLogger

from lightning_episodes import ProtoNet
from lightning_episodes.callbacks import TestResultsWriter
from lightning_episodes.evaluation import RESULTS_FILE
from tests.helpers import tiny_datamodule, tiny_trainer

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "constraints.txt"


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _locked() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[_name(name)] = version
    return pins


def test_every_locked_package_is_installed_at_its_version() -> None:
    locked = _locked()
    assert len(locked) > 50  # the whole environment, not the direct requirements alone
    wrong = {}
    for name, version in locked.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != version:
            wrong[name] = f"{installed} (locked {version})"
    assert not wrong, f"installed packages differ from requirements/constraints.txt: {wrong}"


def test_every_requirement_is_locked() -> None:
    locked = _locked()
    for requirements in sorted((ROOT / "requirements").glob("*.txt")):
        if requirements == LOCK:
            continue
        for line in requirements.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-r"):
                continue
            name = _name(re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0])
            assert name in locked, f"{requirements.name}: {name} is not in requirements/constraints.txt"


def test_a_test_record_keeps_the_versions_and_the_processor(tmp_path: Path) -> None:
    pl.seed_everything(0)
    trainer = tiny_trainer(
        max_steps=1, logger=CSVLogger(tmp_path, name="", version=""), callbacks=[TestResultsWriter()]
    )
    model, data = ProtoNet(image_size=16, backbone_options={"hidden": 4}), tiny_datamodule()
    trainer.fit(model, data)
    trainer.test(model, data, verbose=False)
    made = json.loads((tmp_path / RESULTS_FILE).read_text())["environment"]
    for package in ("torch", "pytorch-lightning", "numpy", "pillow"):
        assert made[package] == metadata.version(package) == _locked()[package]
    assert made["python"] == platform.python_version()
    assert made["cpu"]
    assert "device" not in made  # a CPU run

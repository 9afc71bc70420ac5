"""The environment is the locked one: every package of requirements/constraints.txt is installed at its version (the
set-up installs with ``-c`` that file), and every requirement of requirements/*.txt is locked there, so a study's
records are made, and the suite runs, with the same numpy, pillow and torch on every machine; and each test record
keeps the versions and the processor it was made with."""

from __future__ import annotations

import platform
import re
from importlib import metadata
from pathlib import Path

from tests.helpers import fit_and_test_record

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
    made = fit_and_test_record(tmp_path, [], max_steps=1)["environment"]
    for package in ("torch", "pytorch-lightning", "numpy", "pillow"):
        assert made[package] == metadata.version(package) == _locked()[package]
    assert made["python"] == platform.python_version()
    assert made["cpu"]
    assert "device" not in made  # a CPU run

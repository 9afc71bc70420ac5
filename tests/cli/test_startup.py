"""The command line answers ``--help``, ``--version`` and a wrong command without importing PyTorch, Lightning or
jsonargparse (they take seconds to import): behavioural, in a fresh interpreter, through the console script's entry
point as ``setup.cfg`` declares it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from setuptools.config.setupcfg import read_configuration

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "pytorch_lightning", "lightning_fabric", "jsonargparse", "numpy", "scipy")
#: runs the console script's entry point on argv[1:] and writes the heavy modules it imported to stderr's last line
PROBE = """
import json, sys
module, _, function = sys.argv[1].partition(":")
entry = getattr(__import__(module, fromlist=[function]), function)
status = entry(sys.argv[2:])
sys.stderr.write("\\n" + json.dumps([status, [m for m in {heavy} if m in sys.modules]]) + "\\n")
"""


def _entry_point() -> str:
    scripts = read_configuration(ROOT / "setup.cfg")["options"]["entry_points"]["console_scripts"]
    (line,) = [s for s in scripts if s.startswith("lightning-episodes")]
    return line.split("=", 1)[1].strip()


def _probe(*args: str) -> tuple[int, list[str], subprocess.CompletedProcess[str]]:
    code = PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", code, _entry_point(), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    status, imported = json.loads(done.stderr.strip().splitlines()[-1])
    return status, imported, done


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--version"], ["frobnicate"], []])
def test_the_quick_answers_import_nothing_heavy(args: list[str]) -> None:
    status, imported, done = _probe(*args)
    assert imported == []
    assert status == (2 if args in ([], ["frobnicate"]) else 0)
    if args == ["frobnicate"]:
        assert "lightning-episodes: error: unknown command 'frobnicate' (choose from fit, validate, test, predict" in (
            done.stderr
        )
    elif args == ["--version"]:
        assert done.stdout.startswith("lightning-episodes 0.")
    else:
        assert "  fit " in (done.stdout or done.stderr)


def test_importing_the_package_imports_nothing_heavy_until_a_name_is_used() -> None:
    code = (
        "import sys, lightning_episodes as le\n"
        f"before = [m for m in {HEAVY} if m in sys.modules]\n"
        "from lightning_episodes import EpisodicModule, ProtoNet, predict\n"
        "assert issubclass(ProtoNet, EpisodicModule) and callable(predict)\n"
        "assert le.callbacks.NonFiniteGuard.__name__ == 'NonFiniteGuard'\n"
        "print(before, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[] True"


def test_every_public_name_resolves() -> None:
    import lightning_episodes

    for name in lightning_episodes.__all__:
        assert getattr(lightning_episodes, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        lightning_episodes.nope  # noqa: B018

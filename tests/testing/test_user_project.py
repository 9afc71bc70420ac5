"""The harnesses are quiet in a user's project: a pytest run of a contract check, with Python's default warning filters
and none of this repository's settings, shows no warning raised from the library's own code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: a user's test file, as docs/guides/testing.md writes them: a spec, its check (the cheapest of the algorithm checks
#: that goes through the command line: the CLI is built, nothing is trained)
USER_TEST = """\
from lightning_episodes.algorithms import ProtoNet
from lightning_episodes.testing import AlgorithmSpec, check_algorithm


def test_protonet_keeps_the_algorithm_contract():
    check_algorithm(AlgorithmSpec(ProtoNet), checks=["builds_by_class_path"])
"""

#: where a line of pytest's warnings summary says a warning was raised: `  /path/to/file.py:123: message`
WARNED_AT = re.compile(r"^\s*(\S+\.py):\d+: ", flags=re.MULTILINE)


@pytest.mark.slow
def test_a_harness_raises_no_warning_from_the_library_in_a_users_project(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the user's project: its own (empty) settings, not ours
    (tmp_path / "test_protonet.py").write_text(USER_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTEST_ADDOPTS")}
    env["JSONARGPARSE_DEPRECATION_WARNINGS"] = "all"  # each deprecated call, not only the first of each kind
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-W", "default", "-p", "no:cacheprovider", "test_protonet.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
    ours = [path for path in WARNED_AT.findall(done.stdout) if re.search(r"[/\\]lightning_episodes[/\\]", path)]
    assert not ours, f"warnings raised in the library's own code:\n{done.stdout[-3000:]}"
    # nor jsonargparse's deprecations of what LightningCLI calls (lightning_episodes.cli.quiet_lightning)
    assert "JsonargparseDeprecationWarning" not in done.stdout
    assert "was deprecated in v" not in done.stdout, done.stdout[-3000:]

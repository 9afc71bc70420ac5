"""Package hygiene: the licence file, one version number, and every imported package declared."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

from setuptools.config.setupcfg import read_configuration

import lightning_episodes

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lightning_episodes"


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement line (PEP 503)."""
    name = re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_top_level_modules() -> dict[str, Path]:
    """Every top-level module that the package imports (absolute imports), with one file importing it."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], path)
    return found


def test_license_is_the_apache_2_text_that_setup_cfg_declares() -> None:
    metadata = read_configuration(ROOT / "setup.cfg")["metadata"]
    assert metadata["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it
    assert "LICENSE" in metadata["license_files"]


def test_the_version_has_one_source() -> None:
    config = (ROOT / "setup.cfg").read_text()
    assert re.search(r"^version = attr: lightning_episodes\.__version__$", config, flags=re.MULTILINE)
    assert read_configuration(ROOT / "setup.cfg")["metadata"]["version"] == lightning_episodes.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", lightning_episodes.__version__)
    assert f"## {lightning_episodes.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_every_imported_third_party_package_is_declared() -> None:
    options = read_configuration(ROOT / "setup.cfg")["options"]
    declared = {_name(r) for r in options["install_requires"]}
    declared |= {_name(r) for extra in options.get("extras_require", {}).values() for r in extra}
    # installed by the set-up: the runtime's requirements, and the test requirements, which hold the extras' packages
    # that a contributor's environment needs (pytest, for lightning_episodes.testing's `testing` extra)
    requirements = {
        _name(line)
        for file in ("base.txt", "test.txt")
        for line in (ROOT / "requirements" / file).read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-r"))
    }
    # learn2learn: built from its sdist there (its published sdist does not build on Python 3.11, so no extra holds it)
    built_by_setup = (ROOT / "scripts/install_learn2learn.sh").read_text()
    providers = importlib.metadata.packages_distributions()
    missing, unlisted = [], []
    for module, path in _imported_top_level_modules().items():
        if module in sys.stdlib_module_names or module in ("lightning_episodes", "__future__"):
            continue
        assert module in providers, f"{module} (imported by {path.name}) is not installed"
        names = {_name(dist) for dist in providers[module]}
        if not names & declared and not any(name in built_by_setup for name in names):
            missing.append(f"{module} ({'/'.join(sorted(names))}, imported by {path.relative_to(ROOT)})")
        if not names & requirements and not any(name in built_by_setup for name in names):
            unlisted.append(module)
    assert not missing, f"imported but not declared in setup.cfg: {missing}"
    assert not unlisted, (
        f"imported but in neither requirements/base.txt, test.txt nor scripts/install_learn2learn.sh: {unlisted}"
    )

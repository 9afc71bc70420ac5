"""The documentation site builds with warnings as errors, has a page per public package with its docstrings and the
CLI's help, and its Python examples run."""

from __future__ import annotations

import ast
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lightning_episodes"
BIN = Path(sys.executable).parent
README = (ROOT / "README.md").read_text()
#: The guides' complete examples: the files that the contract tests import, shown as they are.
GUIDE_EXAMPLES = {
    "docs/guides/own-algorithm.md": "tests/algorithms/example_algorithm.py",
    "docs/guides/own-dataset.md": "tests/data/example_dataset.py",
}

#: A sentence of a docstring documented on each page (a class's or function's, not the module's own).
KNOWN_SENTENCES = {
    "lightning_episodes": "Classify the images of query_dir among the classes of support_dir",
    "lightning_episodes.algorithms": "Prototypical Networks (Snell et al., NeurIPS 2017).",
    "lightning_episodes.callbacks": "whose last.ckpt is the latest training state.",
    "lightning_episodes.data": "Batches of few-shot episodes: a step-indexed training stream",
    "lightning_episodes.models": "The conv4 backbone of Vinyals et al. (2016) and Snell et al. (2017)",
    "lightning_episodes.weighting": "A target distribution p over standardised difficulty z on",
    "lightning_episodes.algorithms.functional": "Class means [B, ways, D] of class-major support features",
}


def _text(page: Path) -> str:
    """A built page's visible text, whitespace collapsed."""
    source = page.read_text()
    body = source[source.index("<article") : source.index("</article>")]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def _public_packages() -> list[str]:
    return sorted(
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in PACKAGE.rglob("__init__.py")
        if not any(part.startswith("_") for part in init.parent.relative_to(ROOT).parts)
    )


def _api_page(site: Path, module: str) -> Path:
    return site / "reference" / "api" / Path(*module.split(".")) / "index.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once from the working tree with ``mkdocs build --strict`` (as ``make docs`` does)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-5000:]}"
    return out


def test_make_docs_builds_strictly() -> None:
    recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    assert recipe, "Makefile has no docs target"
    assert "mkdocs build --strict" in recipe.group(1)


def test_every_public_package_has_an_api_page_with_its_docstring(site: Path) -> None:
    packages = _public_packages()
    assert {"lightning_episodes", "lightning_episodes.algorithms", "lightning_episodes.weighting"} <= set(packages)
    for package in packages:
        page = _api_page(site, package)
        assert page.is_file(), f"no API page for {package}"
        docstring = ast.get_docstring(
            ast.parse((PACKAGE.parent / Path(*package.split(".")) / "__init__.py").read_text())
        )
        assert docstring, f"{package} has no docstring"
        # the docstring's opening words, up to its first markup (code, a role)
        opening = " ".join(re.split(r"[`:*(]", docstring)[0].split())
        assert opening, f"{package}'s docstring opens with markup"
        assert opening in _text(page), f"{package}'s page lacks its docstring's {opening!r}"


@pytest.mark.parametrize("module", sorted(KNOWN_SENTENCES))
def test_api_pages_render_the_docstrings_of_their_exports(site: Path, module: str) -> None:
    assert KNOWN_SENTENCES[module] in _text(_api_page(site, module))


def test_api_pages_link_the_docstrings_cross_references(site: Path) -> None:
    """``:class:`EpisodicModule``` in a docstring becomes a link to where the class is documented."""
    page = (_api_page(site, "lightning_episodes.algorithms")).read_text()
    assert re.search(r'<a class="autorefs autorefs-internal"[^>]*href="[^"]*#lightning_episodes\.algorithms\.', page)
    assert ":class:`" not in page


def test_cli_reference_has_every_commands_help(site: Path) -> None:
    text = _text(site / "reference" / "cli" / "index.html")
    assert "usage: lightning-episodes <command> [options]" in text
    console = (PACKAGE / "console.py").read_text() + (PACKAGE / "cli.py").read_text()
    commands = ["fit", "validate", "test", "predict", "difficulty", "report", "compare"]
    for command in commands:
        assert f'"{command}"' in console, f"{command} is no longer a command: update this test"
        assert (
            f"usage: lightning-episodes {command}" in text or f"usage: lightning-episodes [options] {command}" in text
        )
    assert "--data.ways" in text
    assert "--ckpt_path" in text


@pytest.mark.parametrize(("page", "example"), sorted(GUIDE_EXAMPLES.items()))
def test_guides_show_the_tested_example_files_as_they_are(page: str, example: str) -> None:
    """The complete examples of the guides are the files that the contract tests import and run."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.DOTALL)
    assert (ROOT / example).read_text() in blocks


def _examples() -> list[tuple[str, str]]:
    """``(page, code)`` for each Python block of the site's pages that the README does not hold (those run in
    tests/test_readme.py) and that is not a whole example file (the contract tests import those)."""
    examples = {(ROOT / path).read_text() for path in GUIDE_EXAMPLES.values()}
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for code in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL):
            if code not in README and code not in examples:
                found.append((str(page.relative_to(ROOT)), code))
    return found


@pytest.mark.slow
@pytest.mark.parametrize(("page", "code"), _examples(), ids=[page for page, _ in _examples()])
def test_python_examples_run(page: str, code: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{page}:\n{done.stderr[-3000:]}"

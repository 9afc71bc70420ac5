"""The documentation site builds with warnings as errors, has a page per public package with its docstrings and the
CLI's help, rendered maths and figures drawn at build time, links that all reach their targets, and its Python examples
run; it needs no network to be read."""

from __future__ import annotations

import ast
import html
import importlib.util
import inspect
import math
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from scipy import stats

from tests.test_links import links

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


@dataclass(frozen=True)
class Build:
    """The site built from the working tree, and what the build printed (its log, on standard error)."""

    site: Path
    log: str


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
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
    return Build(out, done.stderr)


@pytest.fixture(scope="module")
def site(build: Build) -> Path:
    return build.site


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


def test_the_api_index_shows_no_raw_markup(site: Path) -> None:
    """The index's summaries (the modules' first sentences) render their Sphinx roles as code, linked where the site
    documents the object."""
    page = site / "reference" / "api" / "index.html"
    text = _text(page)
    assert not re.search(r":(?:class|func|meth|attr|mod|data|obj|exc):", text), "raw Sphinx roles in the API index"
    assert re.search(r'<a class="autorefs autorefs-internal"[^>]*><code>EpisodicModule</code></a>', page.read_text())


def _signatures(page: Path) -> list[str]:
    """The signatures of a page's functions and classes (not its attributes' values), as shown."""
    signatures = []
    for kind, part in re.findall(
        r'<div class="doc doc-object doc-(\w+)">(.*?)(?=<div class="doc doc-object |\Z)',
        page.read_text(),
        flags=re.DOTALL,
    ):
        shown = re.search(r'<div class="doc-signature[^"]*">(.*?)</div>', part, flags=re.DOTALL)
        if kind in ("function", "class") and shown:
            signatures.append(html.unescape(re.sub(r"<[^>]+>", "", shown.group(1))).rstrip("\n"))
    return signatures


def test_api_signatures_are_formatted_to_fit_their_boxes(build: Build) -> None:
    """mkdocstrings-python formats each signature (``separate_signature``) at 60 columns with ruff or black, which the
    docs' requirements install; without either it says so in the build's log and shows each signature on one line,
    wider than its box."""
    assert re.search(r"^(?:ruff|black)==", (ROOT / "requirements" / "docs.txt").read_text(), flags=re.MULTILINE), (
        "requirements/docs.txt installs no formatter for the API reference's signatures"
    )
    assert "Formatting signatures requires" not in build.log
    signatures = [s for page in sorted((build.site / "reference" / "api").rglob("*.html")) for s in _signatures(page)]
    assert len(signatures) > 100
    assert any("\n" in signature for signature in signatures)  # a long one is laid out over several lines
    wide = [line for signature in signatures for line in signature.splitlines() if len(line) > 60]
    assert not wide, f"{len(wide)} signature lines wider than 60 columns: {wide[:3]}"


def test_api_pages_show_no_rest_markup(site: Path) -> None:
    """The docstrings' reST literal blocks are code blocks (docs/hooks/sphinx_roles.py): no page shows a paragraph's
    ``::`` (``Example::``, ``Layout::``), and the examples are highlighted doctests, not ``>>>`` that Markdown read as
    nested quotes."""
    for page in sorted((site / "reference" / "api").rglob("*.html")):
        source = page.read_text()
        name = page.relative_to(site)
        assert "::</p>" not in source, f"{name} shows a literal block's '::'"
        assert not re.search(r"\bExamples?::", _text(page)), f"{name} shows 'Example::'"
        assert not re.search(r"(?:<blockquote>\s*){2}", source), f"{name} shows a doctest as nested quotes"
    page = _api_page(site, "lightning_episodes.evaluation").read_text()  # DifficultyTable's `Example::`
    assert re.search(r'doc-section-title">Examples:</span>.*?<span class="gp">&gt;&gt;&gt; </span>', page, re.DOTALL)
    layout = _text(_api_page(site, "lightning_episodes.data.datasets.folder"))
    assert "Layout (the layout of Omniglot- or Mini-ImageNet-style exports): ROOT/train/" in layout


def test_code_breaks_only_where_text_breaks() -> None:
    """A config path or an option in code breaks at a space, after a ``/`` or a ``-``, never inside a name: the
    stylesheet undoes Material's ``word-break: break-word`` for code (which cut ``configs/models/...`` mid-word in a
    table's narrow column), and nothing in it lets text break anywhere."""
    css = re.sub(r"/\*.*?\*/", "", (ROOT / "docs" / "stylesheets" / "extra.css").read_text(), flags=re.DOTALL)
    rules = {selector.strip(): body for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", css)}
    code = rules.get(".md-typeset code", "")
    assert re.search(r"word-break:\s*normal", code), code
    assert re.search(r"overflow-wrap:\s*normal", code), code
    assert not re.search(
        r"(?:overflow-wrap|word-wrap):\s*(?:anywhere|break-word)|word-break:\s*break-(?:all|word)", css
    )


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


def test_cli_reference_is_no_wider_than_the_page(site: Path) -> None:
    """The helps are wrapped at the hook's 100 columns (and the stylesheet wraps them on a narrower page)."""
    page = (site / "reference" / "cli" / "index.html").read_text()
    blocks = re.findall(r"<pre[^>]*>(.*?)</pre>", page, flags=re.DOTALL)
    assert len(blocks) >= 8
    for block in blocks:
        for line in html.unescape(re.sub(r"<[^>]+>", "", block)).splitlines():
            assert len(line) <= 100, f"a CLI help line of {len(line)} columns: {line!r}"
    assert '<div class="cli-help">' in page


#: the pages that must show a figure drawn at build time: every concept page, the method and the front page
FIGURE_PAGES = sorted([*(f"concepts/{path.stem}" for path in (ROOT / "docs" / "concepts").glob("*.md")), "method", "."])


@pytest.mark.parametrize("page", FIGURE_PAGES)
def test_pages_show_figures_drawn_at_build_time(site: Path, page: str) -> None:
    built = site / page / "index.html"
    figures = re.findall(r'<figure class="generated">\s*<img alt="([^"]+)" src="([^"]+)"', built.read_text())
    assert figures, f"{page}: no generated figure"
    for alt, source in figures:
        image = (built.parent / source).resolve()
        assert image.parent == (site / "figures").resolve(), source
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", source
        assert image.stat().st_size > 10_000, source
        assert alt
    assert not (ROOT / "docs" / "figures").exists(), "the figures are drawn at build time, never committed"


def test_the_method_renders_its_maths(site: Path) -> None:
    """The weight, the ESS normalisation and the proposals are LaTeX typeset by MathJax in the reader's browser, from
    the site's own copy."""
    page = (site / "method" / "index.html").read_text()
    maths = " ".join(re.findall(r'class="arithmatex">(.*?)</(?:span|div)>', page, flags=re.DOTALL))
    for formula in (
        r"w(\tau) = \frac{p\bigl(\Omega(\tau)\bigr)}{q_S\bigl(\Omega(\tau)\bigr)}",  # the weight
        r"\mathrm{ESS} = \frac{\left(\sum_{i \in B} w_i\right)^2}{\sum_{i \in B} w_i^2}",  # the normalisation
        r"\varphi\!\left(\dfrac{\Omega - \mu}{\sigma}\right)",  # the normal proposal
        r"\varphi\!\left(\dfrac{\ln \Omega - m}{s}\right)",  # the log-normal
        r"\sum_{i=1}^{n} \varphi\!\left(\dfrac{\Omega - \Omega_i}{h}\right)",  # the empirical
    ):
        assert html.escape(formula, quote=False) in maths, formula
    (mathjax,) = re.findall(r'<script src="([^"]*tex-mml-chtml\.js)">', page)
    assert (site / "method" / mathjax).resolve() == (site / "javascripts" / "mathjax" / "tex-mml-chtml.js").resolve()


#: an element that loads a resource into a page (a script, a stylesheet, a font, a picture) from another host
REMOTE = re.compile(
    r"<(?:script|link|img|iframe|source|audio|video)\b[^>]*\s(?:src|href)=\"(?:[a-z]+:)?//[^\"]*\"", re.I
)


def test_the_site_needs_no_network(site: Path) -> None:
    """On a machine without network every page shows as it should: it loads no script, stylesheet or font from
    another host (MathJax, which renders the maths, is served by the site: docs/hooks/mathjax.py; the text is in the
    reader's system fonts)."""
    remote = [
        f"{page.relative_to(site)}: {match.group(0)}"
        for page in sorted(site.rglob("*.html"))
        for match in REMOTE.finditer(page.read_text())
    ]
    assert not remote, "\n".join(remote[:20])
    mathjax = site / "javascripts" / "mathjax"
    assert 'VERSION="3.2.2"' in (mathjax / "tex-mml-chtml.js").read_text()
    assert list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))  # what it typesets with
    assert (mathjax / "input" / "tex" / "extensions" / "ams.js").is_file()  # what it loads on first use


def test_no_page_shows_unrendered_maths(site: Path) -> None:
    """A ``$`` left in a page's text (outside code) is maths that arithmatex did not take (a space after the opening
    ``$``, say): GitHub would render it, the site would not."""
    for page in sorted(site.rglob("*.html")):
        source = page.read_text()
        if "<article" not in source:
            continue
        body = source[source.index("<article") : source.index("</article>")]
        body = re.sub(r"<(pre|code|script)[^>]*>.*?</\1>", "", body, flags=re.DOTALL)
        text = html.unescape(re.sub(r"<[^>]+>", "", body))
        assert "$" not in text, (
            f"{page.relative_to(site)}: {text[max(0, text.index('$') - 80) : text.index('$') + 80]!r}"
        )


def test_the_front_page_has_a_runnable_example_and_a_picture(site: Path) -> None:
    """Its example is the README's, which tests/test_readme.py runs."""
    source = (ROOT / "docs" / "index.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", source, flags=re.DOTALL)
    assert example in README
    assert '<figure class="generated">' in (site / "index.html").read_text()


def _hook(name: str) -> Any:
    """A module of docs/hooks/, imported from its file (MkDocs loads them so)."""
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", ROOT / "docs" / "hooks" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dataset_figure_draws_without_a_rendered_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine that never rendered the embedded datasets the figure renders a few classes of each (seconds),
    not the datasets (minutes), and writes nothing into the cache."""
    monkeypatch.setenv("LIGHTNING_EPISODES_CACHE", str(tmp_path))
    figure = _hook("make_figures").datasets(ROOT)
    assert [ax.get_title().split(" (")[0] for ax in figure.axes] == ["glyphs", "glyphs-hard", "glyphs-100"]
    assert all("a few classes" in ax.get_title() for ax in figure.axes)
    assert not list(tmp_path.iterdir())


def test_rest_literal_blocks_become_markdown_code_blocks() -> None:
    """docs/hooks/sphinx_roles.py: a paragraph's ``::`` and the indented block after it become the paragraph's ``:``
    and a fenced code block, an ``Example::`` or ``Example:`` griffe's ``Examples:`` section; fenced code, and a
    ``::`` with no block after it, are left alone."""
    blocks = _hook("sphinx_roles").literal_blocks
    assert blocks("Layout::\n\n    ROOT/train/<class>\n    ROOT/test/<class>\n\nNext.") == (
        "Layout:\n\n```text\nROOT/train/<class>\nROOT/test/<class>\n```\n\nNext."
    )
    assert blocks("Cut ::\n\n    a\n\n::\n\n    >>> b") == "Cut\n\n```text\na\n```\n\n```pycon\n>>> b\n```"
    assert blocks("Raises:\n    ValueError: no.\n\nExample::\n\n    >>> 1 + 1\n    2") == (
        "Raises:\n    ValueError: no.\n\nExamples:\n    >>> 1 + 1\n    2"
    )
    assert blocks("Example:\n    >>> 1\n    1\n") == "Examples:\n    >>> 1\n    1\n"
    unchanged = "```rst\nLayout::\n\n    ROOT\n```\n\nNothing follows::"
    assert blocks(unchanged) == unchanged


def test_links_to_the_source_become_cross_references() -> None:
    """docs/hooks/source_links.py: a link to a Python file of the package names its module, the fragment its object;
    other links (pages, code blocks, other files) are left alone."""
    hook = _hook("source_links")
    markdown = (
        "[`Target`](../../lightning_episodes/weighting/targets.py#Target), "
        "[the package](../../lightning_episodes/evaluation/__init__.py), [a page](../method.md#targets), "
        "[a script](../../scripts/setup.py)\n\n```md\n[`Target`](../../lightning_episodes/weighting/targets.py)\n```\n"
    )
    assert hook.rewrite(markdown, "guides/own-target.md", str(ROOT / "docs"), ROOT) == (
        "[`Target`][lightning_episodes.weighting.targets.Target], [the package][lightning_episodes.evaluation], "
        "[a page](../method.md#targets), [a script](../../scripts/setup.py)\n\n"
        "```md\n[`Target`](../../lightning_episodes/weighting/targets.py)\n```\n"
    )


def _site_target(site: Path, page: Path, href: str) -> tuple[Path, str]:
    """The file of the site that ``href`` on ``page`` reaches, and its fragment."""
    parts = urlsplit(href)
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    return (target / "index.html" if target.is_dir() else target), parts.fragment


def _ids(page: Path) -> set[str]:
    return {html.unescape(value) for value in re.findall(r'\sid="([^"]*)"', page.read_text())}


def test_every_link_of_the_site_reaches_a_page_and_an_anchor(site: Path) -> None:
    """Every relative ``href`` and ``src`` of every built page reaches a file of the site, and its fragment an element
    of that page (the generated pages included: API and CLI references, figures)."""
    broken: list[str] = []
    ids: dict[Path, set[str]] = {}
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":
            continue  # served from any folder: its links are absolute from the site's root
        for href in re.findall(r'\s(?:href|src)="([^"]*)"', page.read_text()):
            href = html.unescape(href)
            if urlsplit(href).scheme or href.startswith(("//", "mailto:")):
                continue
            target, fragment = _site_target(site, page, href)
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {href} (no such file)")
            elif fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = _ids(target)
                if unquote(fragment) not in ids[target]:
                    broken.append(f"{page.relative_to(site)}: {href} (no such anchor)")
    assert not broken, "\n".join(broken[:30])


def test_the_readmes_links_into_the_docs_resolve_on_the_site(site: Path) -> None:
    """The README's links to ``docs/PAGE.md#anchor`` are the site's ``PAGE/#anchor``, its images of ``docs/`` the
    site's files."""
    into_docs = [link for link in links(README) if link.startswith("docs/")]
    assert into_docs
    for link in into_docs:
        path, _, fragment = link.partition("#")
        if not path.endswith(".md"):
            assert (site / Path(path).relative_to("docs")).is_file(), f"README shows {link!r}: the site has no copy"
            continue
        page = Path(path).relative_to("docs").with_suffix("")  # docs/a/b.md -> a/b/index.html, a/index.md -> a/
        built = site / (page.parent if page.name == "index" else page) / "index.html"
        assert built.is_file(), f"README links {link!r}: the site has no {built.relative_to(site)}"
        if fragment:
            assert fragment in _ids(built), f"README links {link!r}: the site's page has no such anchor"


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


def test_a_study_table_is_generated_from_the_records(tmp_path: Path) -> None:
    """docs/hooks/study_tables.py: a page's ``<!-- table study-answers -->`` becomes a row per arm that has records,
    with the mean of its seed pairs' differences and their t interval (two seeds: t(0.975, 1) × sd / √2, by scipy
    here); a row of one seed says that its interval covers test episodes only; arms without records are left out."""
    tables = _hook("study_tables")
    cell = tmp_path / "studies" / tables.SCARCE5.format("cosine")
    # two seeds of 4 episodes: uniform − baseline is +0.25 at seed 0 and +0.50 at seed 1
    for seed, (base, uniform) in enumerate([([1, 0, 0, 0], [1, 1, 0, 0]), ([0, 0, 0, 0], [1, 1, 0, 0])]):
        for arm, scores in (("baseline_online", base), ("uniform_online", uniform)):
            _record(cell / f"seed{seed}" / arm, [float(score) for score in scores], arm)
    _record(cell / "seed0" / "uniform_offline", [1.0, 1.0, 1.0, 0.0], "uniform_offline")
    page = tables.on_page_markdown("Before\n\n<!-- table study-answers -->\n\nAfter", _page(), _config(tmp_path), None)
    rows = [line for line in page.splitlines() if line.startswith("| uniform")]
    half = stats.t.ppf(0.975, 1) * statistics.stdev([25.0, 50.0]) / math.sqrt(2)  # 158.83
    assert rows[0].startswith(
        f"| uniform over difficulty, online (the paper) | {tables.COSINE} | 2 | +37.50 ± {half:.2f} |"
    )
    assert rows[0].endswith("| trainings (95% t interval over the seed pairs) |")
    assert rows[1].startswith(f"| uniform, offline estimate | {tables.COSINE} | 1 | +50.00 ± ")
    assert rows[1].endswith("| one training's test episodes only |")
    assert len(rows) == 2
    assert page.startswith("Before\n\n| arm |")
    assert page.endswith("\n\nAfter")
    with pytest.raises(ValueError, match="asks for table 'nope'"):
        tables.on_page_markdown("<!-- table nope -->", _page(), _config(tmp_path), None)


def test_the_weighting_options_table_is_generated_from_the_callbacks_signature(tmp_path: Path) -> None:
    """docs/hooks/study_tables.py: the guide's ``<!-- table weighting-options -->`` becomes a row per argument of the
    callback's constructor, in its order, with its default (read back as YAML) and its docstring's text; those are
    the options and defaults ``WeightingOptions`` holds. A docstring that misses an argument fails the build."""
    from lightning_episodes.callbacks import DifficultyWeightingCallback, WeightingOptions

    tables = _hook("study_tables")
    guide = (ROOT / "docs" / "guides" / "weighting.md").read_text()
    assert "<!-- table weighting-options -->" in guide
    assert not re.search(r"^\| `(proposal|normalization|window)` \|", guide, flags=re.MULTILINE)  # no copy by hand
    page = tables.on_page_markdown(
        "Before\n\n<!-- table weighting-options -->\n\nAfter", _page(), _config(tmp_path), None
    )
    assert page.startswith("Before\n\n| option | default | what it does |\n|---|---|---|\n")
    assert page.endswith("|\n\nAfter")
    rows = [re.fullmatch(r"\| `(\w+)` \| `(.*?)` \| (.*) \|", line) for line in page.splitlines()[4:-2]]
    shown = [(row[1], yaml.safe_load(row[2])) for row in rows if row]
    assert len(shown) == len(rows)
    declared = [(name, p.default) for name, p in inspect.signature(DifficultyWeightingCallback).parameters.items()]
    assert shown == declared
    assert shown == [(field.name, field.default) for field in fields(WeightingOptions)]
    text = {row[1]: row[3] for row in rows if row}
    assert text["decay"] == "`lambda` in `[0, 1)`, the weight of the old value in the online moving average."
    target = '<autoref identifier="lightning_episodes.weighting.Target" optional><code>Target</code></autoref>'
    assert text["target"].startswith(f"the target `p`: a {target} (in YAML `class_path` +")
    assert "capped at `mean(w) sqrt(|B|)`, then self" in text["normalization"]  # a pipe in code stays


def test_an_arguments_table_escapes_pipes_and_refuses_an_undocumented_argument() -> None:
    tables = _hook("study_tables")

    class Scaled:
        """Scales.

        Args:
            factor: multiplies x by |factor|, see :func:`math.fsum`.
            shift: added after ``|x|``
                is taken.

        Raises:
            ValueError: never.
        """

        def __init__(self, factor: float = 2.0, shift: float | None = None) -> None:
            pass

    fsum = '<autoref identifier="math.fsum" optional><code>math.fsum</code></autoref>'
    assert tables.arguments_table(Scaled).splitlines()[2:] == [
        f"| `factor` | `2.0` | multiplies x by \\|factor\\|, see {fsum}. |",
        "| `shift` | `null` | added after `|x|` is taken. |",
    ]

    class Undocumented(Scaled):  # its docstring is Scaled's
        def __init__(self, factor: float = 2.0, shift: float | None = None, name: str = "") -> None:
            pass

    with pytest.raises(
        ValueError, match=r"\['factor', 'shift', 'name'\] and the docstring's Args: \['factor', 'shift'\]"
    ):
        tables.arguments_table(Undocumented)


def _record(run: Path, accuracies: list[float], arm: str) -> None:
    """A test record and its per-episode scores, by hand (2-way 1-shot episodes), as tests/commands/test_compare.py
    writes them."""
    from tests.commands.test_compare import _hand_run

    _hand_run(run, accuracies, {"baseline_online": "baseline"}.get(arm, "uniform"))


def _page() -> Any:
    return type("Page", (), {"file": type("File", (), {"src_uri": "guides/choosing-episodes.md"})()})()


def _config(root: Path) -> Any:
    return type("Config", (), {"config_file_path": str(root / "mkdocs.yml")})()

"""The README's and the documentation's links work where they are read: on the repository's file view (GitHub), where a
link is a path relative to the Markdown file and an anchor is GitHub's slug of a heading, and on the built site.

A page names a class or function by a link to the source file that defines it, the object's name as the fragment
(``../../lightning_episodes/weighting/targets.py#Target``): on GitHub it opens the source, on the site
``docs/hooks/source_links.py`` makes it a link into the API reference. The site's side is in ``tests/test_docs.py``
(which builds the site): ``mkdocs build --strict`` fails on a broken Markdown link or cross-reference, and a test
follows every link of the built HTML.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *(path for path in DOCS.rglob("*.md"))])


def _prose(markdown: str) -> str:
    """``markdown`` without its fenced and indented code blocks and inline code spans (links there are text)."""
    text = re.sub(r"^[ \t]*(```|~~~).*?^[ \t]*\1", "", markdown, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"(?:^(?: {4}|\t).*\n)+", "", text, flags=re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "code", text)


def links(markdown: str) -> list[str]:
    """The targets of a page's inline links and images, ``[text](target)``."""
    text = re.sub(r"`[^`\n]*`", "code", _prose(markdown))
    return re.findall(r"\]\(([^()\s]+)\)", text)


def github_slug(heading: str) -> str:
    """A heading's anchor on GitHub (and on the site: mkdocs.yml's ``toc`` uses the same rule): the text as shown,
    lower case, without characters other than letters, digits, ``_``, ``-`` and spaces, each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>|[`*]", "", text)
    text = unicodedata.normalize("NFC", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings on GitHub (a repeated heading's get ``-1``, ``-2``, ...)."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+?)#*\s*$", _prose(markdown), flags=re.MULTILINE):
        slug, count = github_slug(heading), 0
        while (slug if count == 0 else f"{slug}-{count}") in found:
            count += 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def python_names(source: str) -> set[str]:
    """What a fragment of a link to a Python file may name: its top-level classes, functions and assignments, and
    ``Class.member`` for their members."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{member.name}")
                elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    names.add(f"{node.name}.{member.target.id}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def test_the_slug_is_githubs() -> None:
    assert github_slug("The paper's 5-shot cell, at its protocol, on one GPU") == (
        "the-papers-5-shot-cell-at-its-protocol-on-one-gpu"
    )
    assert github_slug("Before the first study: baseline vs uniform on glyphs, 1- and 5-shot (Table 2's analogue)") == (
        "before-the-first-study-baseline-vs-uniform-on-glyphs-1--and-5-shot-table-2s-analogue"
    )
    assert github_slug("`lightning-episodes fit`") == "lightning-episodes-fit"
    assert anchors("# A\n\n## Usage\n\n```bash\n# not a heading\n```\n\n## Usage\n") == {"a", "usage", "usage-1"}


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_links_resolve_on_the_repositorys_file_view(page: Path) -> None:
    """Every relative link reaches a file of the repository, and its fragment a heading of a Markdown file (by
    GitHub's slug) or an object of a Python file."""
    for link in links(page.read_text()):
        if urlsplit(link).scheme in ("http", "https", "mailto"):
            continue
        path, _, fragment = link.partition("#")
        target = (page.parent / unquote(path)).resolve() if path else page
        where = f"{page.relative_to(ROOT)} links {link!r}"
        assert target.exists(), f"{where}: no such file"
        assert target.is_relative_to(ROOT), f"{where}: outside the repository"
        if not fragment:
            continue
        if target.suffix == ".md":
            assert fragment in anchors(target.read_text()), f"{where}: no heading with that anchor on GitHub"
        elif target.suffix == ".py":
            assert fragment in python_names(target.read_text()), f"{where}: the file defines no {fragment}"


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_no_reference_style_links_that_the_file_view_shows_raw(page: Path) -> None:
    """``[Name][lightning_episodes.X]`` (an autorefs cross-reference) resolves on the site only: GitHub shows it as
    written. A reference-style link is fine where the file defines its ``[label]: url``."""
    text = _prose(page.read_text())
    defined = {label.lower() for label in re.findall(r"^ {0,3}\[([^\]]+)\]:", text, flags=re.MULTILINE)}
    for label, reference in re.findall(r"\[([^\[\]]+)\]\[([^\[\]]*)\]", text):
        assert (reference or label).lower() in defined, f"{page.relative_to(ROOT)}: [{label}][{reference}]"

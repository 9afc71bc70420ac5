"""MkDocs hook: a page's links to the package's source become links to the API reference.

The pages are read in two places, the site and the repository's file view (GitHub), and a link must work in both. So
a page names a class, function or module by a plain relative link to the file that defines it, with the object's name
as the fragment::

    [`EpisodicModule`](../../lightning_episodes/algorithms/base.py#EpisodicModule)
    [`Proposal.from_options`](../../lightning_episodes/weighting/proposals.py#Proposal.from_options)
    [`lightning_episodes.evaluation`](../../lightning_episodes/evaluation/__init__.py)

On the file view the link opens the source (the fragment is ignored there); on the site this hook rewrites it into the
cross-reference ``[text][lightning_episodes.algorithms.base.EpisodicModule]``, which mkdocstrings resolves to the
object's entry in the API reference (where the object is documented under the package that exports it). A link to a
module without a fragment goes to the module's documentation. A name the API reference does not document fails the
strict build, as any broken link does. ``tests/test_links.py`` checks that each fragment names an object of its file.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

PACKAGE = "lightning_episodes"

#: an inline link ``[text](target)`` (the text may hold code spans, not brackets)
LINK = re.compile(r"\[(?P<text>[^\[\]]*)\]\((?P<target>[^()\s]+)\)")
#: fenced code blocks, where a link is text
CODE = re.compile(r"^[ \t]*(?P<fence>```|~~~).*?^[ \t]*(?P=fence)", re.MULTILINE | re.DOTALL)


def identifier(target: str, page_uri: str, docs_dir: str, root: Path) -> str | None:
    """The dotted path that a link from the page ``page_uri`` (relative to ``docs_dir``) to ``target`` names, or
    ``None`` when ``target`` is no Python file of the package."""
    path, _, fragment = target.partition("#")
    if "://" in path or not path.endswith(".py"):
        return None
    page_dir = posixpath.dirname(posixpath.join(Path(docs_dir).relative_to(root).as_posix(), page_uri))
    file = posixpath.normpath(posixpath.join(page_dir, path))
    parts = file.removesuffix(".py").split("/")
    if parts[0] != PACKAGE:
        return None
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts + ([fragment] if fragment else []))


def rewrite(markdown: str, page_uri: str, docs_dir: str, root: Path) -> str:
    """``markdown`` with its links to the package's source turned into cross-references (code blocks left as they
    are)."""

    def link(match: re.Match[str]) -> str:
        name = identifier(match["target"], page_uri, docs_dir, root)
        return match[0] if name is None else f"[{match['text']}][{name}]"

    pieces, start = [], 0
    for code in CODE.finditer(markdown):
        pieces += [LINK.sub(link, markdown[start : code.start()]), code[0]]
        start = code.end()
    return "".join([*pieces, LINK.sub(link, markdown[start:])])


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any) -> str:
    return rewrite(markdown, page.file.src_uri, config.docs_dir, Path(config.config_file_path).parent)

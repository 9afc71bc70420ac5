"""MkDocs hook: figures drawn at build time from the library itself, where a page asks for one.

A page asks for a figure with an HTML comment, from the start of a line::

    <!-- figure weighting: The caption, in Markdown (maths and links included), on one or more lines. -->

``weighting`` is a figure of ``docs/hooks/make_figures.py`` (its ``FIGURES``). On the site the comment becomes the
image with its caption; on the repository's file view it shows nothing. No figure of the site is committed: each is
drawn from the package, its configs and the study's records at every build, so none can go stale. (The README's copy of
the forest plot, ``docs/img/scarce-forest.png``, is the one committed figure, for the repository's front page; it keeps
the rows it drew in a PNG text field, and a test fails when the records give others.) One child process draws the
figures that the pages ask for while the pages are built (as the CLI reference's helps are printed); they are added to
the site as ``figures/NAME.png``.
A figure that fails to draw fails the build.
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import make_figures  # the figures' names (docs/hooks/ is on the path while MkDocs loads a hook)
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

FOLDER = "figures"
MARKER = re.compile(r"^<!-- figure (?P<name>[\w-]+): (?P<caption>.*?) ?-->[ \t]*$", re.MULTILINE | re.DOTALL)

_child: subprocess.Popen[str] | None = None
_out: tempfile.TemporaryDirectory[str] | None = None


def asked_for(markdown: str) -> list[str]:
    """The figures a page's Markdown asks for, in order."""
    return [match["name"] for match in MARKER.finditer(markdown)]


def _alt(caption: str) -> str:
    """The image's ``alt``: the caption's opening words, up to its first colon, parenthesis or full stop, as plain text
    (links' text kept, Markdown's marks dropped)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", caption)
    text = re.split(r"[:(]|\.\s", text)[0]
    return " ".join(re.sub(r"[`*_$\\\[\]\"]", "", text).split())


def place(markdown: str, page_uri: str) -> str:
    """``markdown`` with each figure comment replaced by the figure (an image linked relative to the page)."""

    def figure(match: re.Match[str]) -> str:
        source = posixpath.relpath(f"{FOLDER}/{match['name']}.png", posixpath.dirname(page_uri) or ".")
        caption = " ".join(match["caption"].split())
        return (
            f'<figure class="generated" markdown="span">\n![{_alt(caption)}]({source})\n'
            f'<figcaption markdown="span">{caption}</figcaption>\n</figure>'
        )

    return MARKER.sub(figure, markdown)


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    """Start drawing the figures the pages ask for, and add them to the site's files."""
    global _child, _out
    names: list[str] = []
    for file in files.documentation_pages():
        if file.abs_src_path is not None:
            names += [name for name in asked_for(Path(file.abs_src_path).read_text()) if name not in names]
    unknown = sorted(set(names) - set(make_figures.FIGURES))
    if unknown:
        raise ValueError(
            f"the pages ask for figures {unknown}; docs/hooks/make_figures.py has {sorted(make_figures.FIGURES)}"
        )
    _out = tempfile.TemporaryDirectory(prefix="lightning-episodes-figures-")
    root = Path(config.config_file_path).parent
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    _child = subprocess.Popen(
        [sys.executable, make_figures.__file__, _out.name, *names],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for name in names:
        files.append(
            File.generated(config, f"{FOLDER}/{name}.png", abs_src_path=os.path.join(_out.name, f"{name}.png"))
        )
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any) -> str:
    return place(markdown, page.file.src_uri)


def on_env(env: Any, config: MkDocsConfig, files: Files, **kwargs: Any) -> Any:
    """Wait for the figures (before MkDocs copies the site's files)."""
    global _child
    if _child is not None:
        child, _child = _child, None
        _, stderr = child.communicate(timeout=900)
        if child.returncode != 0:
            raise RuntimeError(f"drawing the site's figures failed:\n{stderr[-3000:]}")
    return env


def _remove_drawings() -> None:
    global _out
    if _out is not None:
        _out.cleanup()
        _out = None


def on_post_build(config: MkDocsConfig, **kwargs: Any) -> None:
    """Remove the drawings' temporary folder (MkDocs has copied them into the site)."""
    _remove_drawings()


def on_shutdown(**kwargs: Any) -> None:
    """Stop a child process that no page waited for (a build that failed early)."""
    if _child is not None and _child.poll() is None:
        _child.kill()
        _child.wait()
    _remove_drawings()

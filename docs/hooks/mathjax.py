"""MkDocs hook: MathJax, the maths renderer, served by the site itself, so that its formulas render with no network.

The files come from the Python package ``django-static-mathjax`` (MathJax 3.2.2 as published, pinned in
requirements/docs.txt; it needs no Django). The component that mkdocs.yml loads, ``tex-mml-chtml.js``, is copied into
the site's ``javascripts/mathjax/`` with the folders it loads from when a page needs them: its fonts, the TeX
extensions it loads on first use and the menu's renderers and accessibility tools. docs/javascripts/mathjax.js
configures it.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

DISTRIBUTION = "django-static-mathjax"
#: MathJax's ES5 build, in the installed distribution
SOURCE = "mathjax/static/mathjax/es5"
#: where the site serves it (mkdocs.yml's extra_javascript loads FOLDER/COMPONENT)
FOLDER = "javascripts/mathjax"
COMPONENT = "tex-mml-chtml.js"
#: what the component loads from its own folder as a page needs it (the other combined components are not used)
LOADED = ("a11y", "adaptors", "input", "output", "sre", "ui")


def mathjax_folder() -> Path:
    """MathJax's ES5 build in the installed ``django-static-mathjax``."""
    try:
        distribution = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise RuntimeError(f"the docs need {DISTRIBUTION}: pip install -r requirements/docs.txt") from None
    folder = Path(str(distribution.locate_file(SOURCE)))
    if not (folder / COMPONENT).is_file():
        raise RuntimeError(f"{DISTRIBUTION} {distribution.version} has no {SOURCE}/{COMPONENT}")
    return folder


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    """Add MathJax's files to the site, under :data:`FOLDER`."""
    source = mathjax_folder()
    paths = [source / COMPONENT, *(path for name in LOADED for path in sorted((source / name).rglob("*")))]
    for path in paths:
        if path.is_file():
            uri = f"{FOLDER}/{path.relative_to(source).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files

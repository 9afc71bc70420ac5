"""MkDocs hook: the API reference, a page per public package and module, generated at build time.

Every public object gets one home, so that each has one anchor to link to:

- a package documents what its ``__all__`` exports (``lightning_episodes.algorithms`` documents ``ProtoNet``);
- an object that several packages export lives in the deepest package on its own import path (an object exported by
  ``callbacks`` and ``weighting`` lives in ``weighting``); the others list it with a link;
- a public module (no ``_`` in its path) gets a page when it has public objects that no package exports
  (``lightning_episodes.algorithms.functional``); a module whose objects all live in its package gets none.

A module added to the package appears on the next build, with no list to update. The package is read with griffe,
statically (nothing is imported), as mkdocstrings reads it. The index, ``docs/reference/api/index.md``, is a committed
page: its table of modules replaces the placeholder that the repository's file view shows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

PACKAGE = "lightning_episodes"
FOLDER = "reference/api"
INDEX = f"{FOLDER}/index.md"
NAV_TITLE = "API reference"
#: the placeholder of the index page that the table of modules replaces
GENERATED = re.compile(r"<!-- generated: .*?-->.*?<!-- end generated -->", re.DOTALL)

#: module path -> (names documented on its page, names exported there but documented elsewhere -> their home)
Plan = dict[str, tuple[list[str], dict[str, str]]]
_plan: Plan = {}
_summaries: dict[str, str] = {}
_packages: set[str] = set()


def _public_modules(module: griffe.Module) -> list[griffe.Module]:
    """``module`` and its public submodules, depth first, in name order."""
    found = [module]
    for name, member in sorted(module.members.items()):
        if not member.is_alias and member.is_module and not name.startswith("_"):
            found.extend(_public_modules(member))  # type: ignore[arg-type]
    return found


def _exported(module: griffe.Module) -> list[str]:
    """What a module offers: its ``__all__``, or else the public objects it defines (not its imports)."""
    if module.exports is not None:
        return [str(name) for name in module.exports]
    return [
        name
        for name, member in module.members.items()
        if not name.startswith("_") and not member.is_alias and not member.is_module
    ]


def _target(member: griffe.Object | griffe.Alias) -> str:
    """The path where an exported object is defined (an import's target), or its own path."""
    if member.is_alias:
        try:
            return member.final_target.path  # type: ignore[union-attr]
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return member.target_path  # type: ignore[union-attr]
    return member.path


def make_plan(root: griffe.Module) -> Plan:
    """Which page documents each public object, and which pages only link to it."""
    modules = _public_modules(root)
    exporters: dict[str, list[tuple[griffe.Module, str]]] = {}
    for module in modules:
        for name in _exported(module):
            member = module.members.get(name)
            if member is None or (not member.is_alias and member.is_module):
                continue
            exporters.setdefault(_target(member), []).append((module, name))

    plan: Plan = {module.path: ([], {}) for module in modules}
    for target, candidates in exporters.items():
        # the deepest package on the object's import path; else a module on it; else the deepest exporter
        home, home_name = max(
            candidates,
            key=lambda c: (target.startswith(c[0].path + "."), c[0].is_init_module, c[0].path.count(".")),
        )
        plan[home.path][0].append(home_name)
        for module, name in candidates:
            if module is not home:
                plan[module.path][1][name] = f"{home.path}.{home_name}"
    packages = {module.path for module in modules if module.is_init_module}
    return {path: entry for path, entry in plan.items() if path in packages or entry[0]}


def _page(path: str, documented: list[str], linked: dict[str, str]) -> str:
    """A module's docstring, the table of what it exports from elsewhere, then each object it documents."""
    lines = [f"::: {path}", "    options:", "      members: []", ""]
    if linked:
        lines += [
            "## Also exported here",
            "",
            f"`from {path} import <name>` works for these too; each is documented where it is defined:",
            "",
            "| name | documented at |",
            "|---|---|",
            *(f"| `{name}` | [`{home}`][{home}] |" for name, home in sorted(linked.items())),
            "",
        ]
    for name in documented:
        lines += [
            f"::: {path}.{name}",
            "    options:",
            "      heading_level: 2",
            "      show_root_full_path: false",
            "",
        ]
    return "\n".join(lines)


def page_file(path: str) -> str:
    """Where a module's page is: ``lightning_episodes.algorithms`` -> ``reference/api/lightning_episodes/algorithms/``
    (its ``index.md``), ``lightning_episodes.algorithms.functional`` -> ``.../algorithms/functional.md``."""
    parts = path.split(".")
    return f"{FOLDER}/{'/'.join(parts)}/index.md" if path in _packages else f"{FOLDER}/{'/'.join(parts)}.md"


def _index(plan: Plan) -> str:
    """The table of the index page: each page's module and the first sentence of its docstring."""
    lines = ["| module | what it holds |", "|---|---|"]
    here = INDEX.rsplit("/", 1)[0]
    lines += [
        f"| [`{path}`]({Path(page_file(path)).relative_to(here).as_posix()}) | {_summaries.get(path, '')} |"
        for path in plan
    ]
    return "\n".join(lines) + "\n"


def _nav(plan: Plan, package: str) -> list[Any]:
    """The nav below ``package``: its own page, then its modules' pages and its subpackages' sections."""
    entries: list[Any] = [page_file(package)]
    for path in plan:
        if path.rpartition(".")[0] != package:
            continue
        name = path.rpartition(".")[2]
        entries.append({name: _nav(plan, path)} if path in _packages else {name: page_file(path)})
    return entries


def _summary(module: griffe.Module) -> str:
    """The first sentence of a module's docstring, on one line, for the index's table."""
    if module.docstring is None:
        return ""
    first = module.docstring.value.strip().split("\n\n")[0].replace("\n", " ")
    return first.replace("|", "\\|")


def on_config(config: MkDocsConfig, **kwargs: Any) -> MkDocsConfig:
    """Plan the pages and put them in the nav, after the entry ``API reference: reference/api/index.md``."""
    root_dir = Path(config.config_file_path).parent
    # the docstrings' Sphinx roles become cross-references here too, as on the API pages (the index's summaries)
    roles = griffe.load_extensions(str(root_dir / "docs/hooks/sphinx_roles.py"))
    root = griffe.load(PACKAGE, search_paths=[str(root_dir)], docstring_parser="google", extensions=roles)
    assert isinstance(root, griffe.Module)
    _plan.clear()
    _plan.update(make_plan(root))
    _summaries.clear()
    _summaries.update({path: _summary(root.modules_collection[path]) for path in _plan})
    _packages.clear()
    _packages.update(path for path in _plan if root.modules_collection[path].is_init_module)
    pages: list[Any] = [{"Overview": INDEX}, {PACKAGE: _nav(_plan, PACKAGE)}]
    nav = config.nav or []
    for index, entry in enumerate(nav):
        if isinstance(entry, dict) and NAV_TITLE in entry:  # `mkdocs serve` may hand back the expanded nav
            nav[index] = {NAV_TITLE: pages}
            break
    else:
        raise ValueError(f"mkdocs.yml: the nav needs the entry `{NAV_TITLE}: {INDEX}` for the API pages")
    return config


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    """Add the generated pages (they exist only in the built site; the index, docs/reference/api/index.md, is
    committed and filled in by :func:`on_page_markdown`)."""
    for path, (documented, linked) in _plan.items():
        files.append(File.generated(config, page_file(path), content=_page(path, documented, linked)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any) -> str:
    """The index page with the table of modules in place of its placeholder (what the repository's file view shows)."""
    if page.file.src_uri != INDEX:
        return markdown
    filled, count = GENERATED.subn(lambda _: _index(_plan), markdown)
    if count != 1:
        raise ValueError(f"{INDEX} needs one <!-- generated: ... --> ... <!-- end generated --> placeholder")
    return filled

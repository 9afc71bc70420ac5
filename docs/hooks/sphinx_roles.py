"""Griffe extension: the docstrings' Sphinx roles (``:class:`EpisodicModule```) become links in the API reference.

The package's docstrings are Google style with Sphinx cross-reference roles, which jsonargparse shows as they are
in ``--help``. mkdocstrings does not read the roles, so this rewrites each one into an optional cross-reference:
the name is resolved in the scope of the object whose docstring it is (its class, module, then packages; a leading
``.`` is relative to the module), and becomes a link where the site documents that object, plain code otherwise
(``optional``: an object the site does not document, such as a private helper or ``torch.Tensor``, is no error).
``~a.b.C`` shows ``C``, as in Sphinx.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|obj|exc|const):`(~?)([\w.]+)`")


def _final(obj: griffe.Object | griffe.Alias) -> griffe.Object | griffe.Alias:
    """What an import points at (itself if it is no import, or if its target is outside the package)."""
    try:
        return obj.final_target if obj.is_alias else obj  # type: ignore[union-attr]
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return obj


def _descend(obj: griffe.Object | griffe.Alias, parts: list[str]) -> str:
    """The path of ``obj.<parts>``, following imports; unresolved tails are appended as written."""
    obj = _final(obj)
    for index, part in enumerate(parts):
        if part not in obj.members:
            return ".".join([obj.path, *parts[index:]])
        obj = _final(obj.members[part])
    return obj.path


def _resolve(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` as seen from ``obj``'s docstring, or ``name`` when it cannot be resolved."""
    if name.startswith("."):
        base: griffe.Object | None = obj if obj.is_module else obj.module
        if base is not None and not base.is_init_module:
            base = base.parent
        for _ in range(len(name) - len(name.lstrip(".")) - 1):
            base = base.parent if base is not None else None
        return _descend(base, name.lstrip(".").split(".")) if base is not None else name
    first, *rest = name.split(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        if first in scope.members:
            return _descend(scope.members[first], rest)
        if scope.name == first and scope.parent is None:
            return _descend(scope, rest)
        scope = scope.parent
    return name


def rewrite(obj: griffe.Object, text: str) -> str:
    """``text`` with every Sphinx role replaced by an optional cross-reference to what it names."""

    def link(match: re.Match[str]) -> str:
        tilde, name = match.groups()
        shown = name.rsplit(".", 1)[-1] if tilde else name.lstrip(".")
        identifier = html.escape(_resolve(obj, name), quote=True)
        return f'<autoref identifier="{identifier}" optional><code>{html.escape(shown)}</code></autoref>'

    return ROLE.sub(link, text)


def _walk(obj: griffe.Object, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is not None:
        obj.docstring.value = rewrite(obj, obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            _walk(member, seen)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        _walk(pkg, set())

"""Griffe extension: the docstrings' Sphinx roles (``:class:`EpisodicModule```) become links in the API reference, and
their reST literal blocks (``Layout::``, ``Example::``) code blocks.

The package's docstrings are Google style with Sphinx cross-reference roles, which jsonargparse shows as they are
in ``--help``. mkdocstrings does not read the roles, so this rewrites each one into an optional cross-reference:
the name is resolved in the scope of the object whose docstring it is (its class, module, then packages; a leading
``.`` is relative to the module), and becomes a link where the site documents that object, plain code otherwise
(``optional``: an object the site does not document, such as a private helper or ``torch.Tensor``, is no error).
``~a.b.C`` shows ``C``, as in Sphinx.

Nor does it read reST's literal blocks, a paragraph ending in ``::`` and the indented block after it: the page
showed the ``::`` and the block as Markdown read it. Each becomes the paragraph ending in ``:`` and a fenced code
block; an ``Example::`` (or ``Example:``, Google style's singular, which griffe takes for an admonition and whose
``>>>`` lines Markdown showed as nested quotes) becomes griffe's ``Examples:`` section, highlighted as Python.
"""

from __future__ import annotations

import html
import re
import textwrap
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|obj|exc|const):`(~?)([\w.]+)`")
#: a docstring's examples heading: Google style's ``Example:``/``Examples:``, or reST's ``Example::``
EXAMPLES = re.compile(r" *Examples?::?")


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
        if obj.is_alias:  # an import from outside the package (``torch``): griffe has not loaded its members
            return ".".join([obj.target_path, *parts[index:]])  # type: ignore[union-attr]
        if part not in obj.members:
            return ".".join([obj.path, *parts[index:]])
        obj = _final(obj.members[part])
    return obj.target_path if obj.is_alias else obj.path  # type: ignore[union-attr]


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


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def literal_blocks(text: str) -> str:
    """``text`` with each reST literal block as Markdown: ``Paragraph::`` then an indented block becomes
    ``Paragraph:`` and a fenced code block (``pycon`` for a doctest, ``text`` otherwise; a ``::`` alone, or after a
    space, goes), and an examples heading (:data:`EXAMPLES`) with its indented block griffe's ``Examples:`` section.
    Fenced code is left as it is."""
    lines = text.split("\n")
    out: list[str] = []
    fenced = False
    at = 0
    while at < len(lines):
        line = lines[at].rstrip()
        at += 1
        if line.lstrip().startswith("```"):
            fenced = not fenced
        examples = not fenced and EXAMPLES.fullmatch(line) is not None
        if fenced or not (examples or line.endswith("::")):
            out.append(lines[at - 1])
            continue
        # the block: after blank lines, the lines indented deeper than the paragraph (blank ones among them)
        indent, start = _indent(line), at
        while start < len(lines) and not lines[start].strip():
            start += 1
        end = start
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
            end += 1
        while end > start and not lines[end - 1].strip():
            end -= 1
        if end == start:  # no indented block: a paragraph that happens to end in "::"
            out.append(lines[at - 1])
            continue
        block, pad = lines[start:end], " " * indent
        if examples:  # the section's title right above its block, as griffe reads a section
            out += [f"{pad}Examples:", *block]
        else:
            lead = line[:-2]
            if lead.strip():
                out += [lead.rstrip() if lead.endswith(" ") else f"{lead}:", ""]
            language = "pycon" if block[0].lstrip().startswith(">>>") else "text"
            code = textwrap.dedent("\n".join(block)).split("\n")
            out += [f"{pad}```{language}", *(pad + row if row.strip() else "" for row in code), f"{pad}```"]
        at = end
    return "\n".join(out)


def _walk(obj: griffe.Object, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is not None:
        obj.docstring.value = rewrite(obj, literal_blocks(obj.docstring.value))
    for member in obj.members.values():
        if not member.is_alias:
            _walk(member, seen)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Rewrites the roles and literal blocks of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        _walk(pkg, set())

"""Names imported on first use: the ``__getattr__`` and ``__dir__`` of a package whose exports are lazy (PEP 562), so
that importing it does not import what it exports (PyTorch, Lightning, the command line) until a name is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str], submodules: Collection[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``(__getattr__, __dir__)`` of ``package``: a name of ``exports`` (name -> defining module) is imported from
    its module on first use and kept in ``namespace`` (the package's ``globals()``), so later look-ups are plain
    attribute reads; a name of ``submodules`` is the subpackage ``package.<name>``."""

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__

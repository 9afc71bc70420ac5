"""The package's import graph, read from the source with ``ast``: no circle of files, no import from a lower layer to
a higher one (``docs/concepts/architecture.md``).

Every ``import`` and ``from ... import`` counts, at module level or inside a function (a lazy import is still a
dependency). Those under ``if TYPE_CHECKING:``, which never run, count for circles but not for layers: a type-only
import back is still a circle of files a reader has to hold at once (the package's ``__init__`` names its lazy exports
for type checkers from every layer, and nothing imports it back). An import names the module file it loads:
``from lightning_episodes.callbacks import reference`` is ``lightning_episodes.callbacks.reference``,
``from lightning_episodes.callbacks import NonFiniteGuard`` is the package ``lightning_episodes.callbacks``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lightning_episodes"

#: The layers, lowest first: a module may import its own layer and the layers before it. The names are the first
#: component under ``lightning_episodes`` (a subpackage or a top-level module); ``""`` is the package itself.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the package's own __init__ (its version; its exports are imported lazily, by name, through _lazy), the files and
    # locks of a run's output folders, and what the package reads of Lightning's private state: none imports anything
    # of the package beyond this layer
    ("", "run_folder", "_lightning", "_lazy", "_arguments"),
    ("data",),
    ("models",),
    ("weighting",),
    ("algorithms",),
    ("evaluation",),  # episode scoring, the per-episode table, the run record
    ("analysis", "inference"),  # statistics and reports on records; predictions with a trained model
    ("callbacks",),
    # the console script's front door (help, errors in one line) runs the commands and the LightningCLI by module
    # name, imported when one runs: it imports neither, and the LightningCLI uses its tables
    ("commands", "console"),
    ("cli", "cli_checks", "cli_imports", "cli_runs", "__main__"),
    # the contract harnesses a user's tests import: they check a part through everything below, the command line
    # (an algorithm's --model.help) and the callbacks (the name a results record gives a target) included
    ("testing",),
)

Graph = Mapping[str, set[str]]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST, type_checking: bool = False) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import node of ``tree``; those of ``if TYPE_CHECKING:`` blocks only with ``type_checking`` (their
    ``else`` branches always)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                yield from _import_nodes(ast.Module(body=[child], type_ignores=[]))
        else:
            yield from _import_nodes(node, type_checking)


def module_imports(
    source: str, module: str, is_package: bool, modules: set[str], type_checking: bool = False
) -> set[str]:
    """The modules of ``modules`` that ``source`` (the file of ``module``) imports at run time, and with
    ``type_checking`` for a type checker too (under ``if TYPE_CHECKING:``)."""
    found: set[str] = set()
    for node in _import_nodes(ast.parse(source), type_checking):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, *([base] if base else [])])
            # `from pkg import name`: the submodule pkg.name where there is one, else pkg itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a module file a.b
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def import_graph(root: Path = ROOT / PACKAGE, type_checking: bool = False) -> dict[str, set[str]]:
    """Module name -> the package's modules it imports (with ``type_checking``: under ``if TYPE_CHECKING:`` too),
    for every ``.py`` file under ``root``."""
    paths = {_module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    modules = set(paths)
    return {
        name: module_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", modules, type_checking)
        for name, path in paths.items()
    }


def find_cycles(graph: Graph) -> list[list[str]]:
    """The circles of ``graph``: each strongly connected component of more than one module, sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def layer_of(module: str, layers: Iterable[Iterable[str]] = LAYERS) -> int:
    """The position in ``layers`` of ``module`` (a dotted name under the package)."""
    parts = module.split(".")
    first = parts[1] if len(parts) > 1 else ""
    for position, names in enumerate(layers):
        if first in names:
            return position
    raise KeyError(f"{module} belongs to no layer: add {first!r} to LAYERS in tests/test_layering.py")


def upward_imports(graph: Graph, layers: Iterable[Iterable[str]] = LAYERS) -> list[str]:
    """``"a -> b"`` for every import of a module ``b`` of a higher layer than ``a``'s."""
    layers = [tuple(names) for names in layers]
    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if layer_of(target, layers) > layer_of(source, layers)
    )


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_package_has_no_circle_of_files(graph: dict[str, set[str]]) -> None:
    assert find_cycles(graph) == []


def test_the_package_has_no_circle_of_files_through_type_only_imports() -> None:
    # e.g. a helper of EpisodicModule typing its argument as the module, under `if TYPE_CHECKING:`, while base.py
    # imports the helper: the helper should take what it uses (a Protocol, the parts, plain values)
    assert find_cycles(import_graph(type_checking=True)) == []


def test_no_module_imports_a_higher_layer(graph: dict[str, set[str]]) -> None:
    assert upward_imports(graph) == []


def test_every_module_belongs_to_a_layer(graph: dict[str, set[str]]) -> None:
    for module in graph:
        layer_of(module)


def test_the_graph_sees_lazy_relative_and_submodule_imports() -> None:
    modules = {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"  # a submodule, relatively
        "if TYPE_CHECKING:\n    from pkg.sub import c\n"  # never runs: no edge
        "def f():\n    import pkg.sub.c.attribute\n"  # lazy, and a dotted name past the file
    )
    assert module_imports(source, "pkg.a", False, modules) == {"pkg.b", "pkg.sub.c"}
    # for a type checker the TYPE_CHECKING block's imports count too; its else branch counts either way
    guarded = "import typing\nif typing.TYPE_CHECKING:\n    import pkg.b\nelse:\n    import pkg.sub\n"
    assert module_imports(guarded, "pkg.a", False, modules) == {"pkg.sub"}
    assert module_imports(guarded, "pkg.a", False, modules, type_checking=True) == {"pkg.b", "pkg.sub"}
    assert module_imports("from .c import x\nfrom .. import a\n", "pkg.sub", True, modules) == {"pkg.sub.c", "pkg.a"}
    assert module_imports("from pkg.sub import name\n", "pkg.a", False, modules) == {"pkg.sub"}


def test_the_checks_report_a_circle_and_an_upward_import() -> None:
    # a three-file circle (through a lazy import), a two-file one, and a file outside both
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.e", "p.a"}, "p.e": {"p.d"}, "p.f": set()}
    assert find_cycles(graph) == [["p.a", "p.b", "p.c"], ["p.d", "p.e"]]
    assert find_cycles({"p.a": {"p.b"}, "p.b": set()}) == []
    layers = [("a", "b", "c"), ("d", "e", "f")]
    assert upward_imports(graph, layers) == []
    assert upward_imports({"p.a": {"p.f"}, "p.f": {"p.a"}}, layers) == ["p.a -> p.f"]
    with pytest.raises(KeyError, match="'z' to LAYERS"):
        layer_of("p.z", layers)


def _copy_of_the_package(folder: Path) -> Path:
    """The package's source as it is, copied under ``folder``."""
    package = folder / PACKAGE
    for path in (ROOT / PACKAGE).rglob("*.py"):
        copy = package / path.relative_to(ROOT / PACKAGE)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return package


def test_the_real_source_fails_the_checks_when_a_circle_is_added(tmp_path: Path) -> None:
    # the package as it is, plus an algorithm module that imports a callback: a circle through the callbacks that
    # import algorithms, and an upward import
    package = _copy_of_the_package(tmp_path)
    (package / "algorithms" / "base.py").write_text(
        (ROOT / PACKAGE / "algorithms" / "base.py").read_text(encoding="utf-8")
        + "\n\ndef _added():\n    from lightning_episodes.callbacks.reference import load_reference\n",
        encoding="utf-8",
    )
    graph = import_graph(package)
    assert any("lightning_episodes.algorithms.base" in cycle for cycle in find_cycles(graph))
    assert "lightning_episodes.algorithms.base -> lightning_episodes.callbacks.reference" in upward_imports(graph)


def test_the_real_source_fails_the_check_when_a_type_only_circle_is_added(tmp_path: Path) -> None:
    # the package as it is, plus the type-only import back that made base.py's helpers one circle of files
    package = _copy_of_the_package(tmp_path)
    interface = package / "algorithms" / "interface.py"
    interface.write_text(
        interface.read_text(encoding="utf-8")
        + "\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        + "    from lightning_episodes.algorithms.base import EpisodicModule\n",
        encoding="utf-8",
    )
    assert find_cycles(import_graph(package)) == []  # nothing runs it
    cycles = find_cycles(import_graph(package, type_checking=True))
    circle = {"lightning_episodes.algorithms.base", "lightning_episodes.algorithms.interface"}
    assert any(circle <= set(cycle) for cycle in cycles)

"""Components (a target, a proposal, a normaliser) as objects, and a registry of named ones for configs.

:class:`Component` is the base of :class:`~lightning_episodes.weighting.Target`,
:class:`~lightning_episodes.weighting.Proposal` and :class:`~lightning_episodes.weighting.Normalizer`: its options are
its constructor's arguments, declared once, and it remembers them (:attr:`Component.init_args`), so that a record
names it as ``class_path`` + ``init_args``, the form a LightningCLI config writes it in.

:func:`~lightning_episodes.weighting.register_target`, :func:`~lightning_episodes.weighting.register_proposal` and
:func:`~lightning_episodes.weighting.register_normalizer` are built on :class:`Registry`: built-in names come first
in the order the registry declares (:attr:`Registry.order`, not the order in which modules happen to be imported)
and cannot be replaced; registered ones follow in registration order. Built-in names never contain a dot, so a
dotted name (``"mylab.triangular"``) is one the library will never take. :meth:`Registry.resolve` turns what a config
or a caller gives (a name, a class path, a class, an instance) into an instance; a name it does not know is looked
for in the module it names (``mylab.triangular``: module ``mylab``) and in the modules of the
:data:`ENTRY_POINT_GROUP` entry points of installed packages.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, ClassVar, Final, Generic, TypeVar

from lightning_episodes._arguments import RemembersArguments, class_path, init_parameters

__all__ = [
    "ENTRY_POINT_GROUP",
    "Component",
    "Registry",
    "accepted_options",
    "import_object",
    "load_entry_points",
    "subclass_of",
]

V = TypeVar("V")

#: The entry-point group whose entries (modules, or objects in them) are imported before a name is called unknown:
#: a package of yours lists the modules that register its components there (see ``docs/guides/own-target.md``).
ENTRY_POINT_GROUP: Final[str] = "lightning_episodes.components"
#: How to make a component of one's own found, the end of every "unknown name" error.
FOUND_HOW: Final[str] = (
    "a component of your own is found by its class path (`{kind}: mylab.MyClass`, or `class_path: mylab.MyClass` with "
    "`init_args`; the module on PYTHONPATH), or by the name it registers once its module is imported "
    "(`--import mylab` on the command line, or an entry point of your package in the group "
    f"'{ENTRY_POINT_GROUP}')"
)


def accepted_options(cls: type, options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``options`` that ``cls``'s constructor names (every one if it takes ``**kwargs``): what a registered
    class's default ``from_options`` passes on."""
    parameters = init_parameters(cls)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(options)
    return {name: value for name, value in options.items() if name in parameters}


class Component(RemembersArguments):
    """A part of the weighting built from its constructor's arguments, which it remembers.

    A subclass declares its options once, as typed ``__init__`` arguments with Google-style ``Args:`` (jsonargparse
    reads both: a config writes ``class_path`` + ``init_args``); the arguments it was built with, defaults applied,
    are :attr:`init_args`, whatever the subclass stores. :meth:`from_options` builds it from the weighting callback's
    options when a config names it.
    """

    #: Where a constructor argument takes the weighting callback's option of another name when the component is named
    #: (``RunningNormalizer``: ``{"decay": "running_decay"}``); the others take the option of their own name.
    callback_options: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def class_path(cls) -> str:
        """``module.QualifiedName``: what a config's ``class_path`` names."""
        return class_path(cls)

    def config(self) -> dict[str, Any]:
        """``{"class_path": ..., "init_args": ...}``: this instance as a LightningCLI config writes it (and a record
        stores it); a component among the arguments is written the same way."""
        init_args = {k: v.config() if isinstance(v, Component) else v for k, v in self.init_args.items()}
        return {"class_path": self.class_path(), "init_args": init_args}

    @classmethod
    def from_options(cls, **options: Any) -> Any:
        """An instance built from the weighting callback's options (``support_sigmas``, ``decay``, ``warmup_steps``,
        ``update``, ``window``, ``running_decay``) when a config names the class: each constructor argument takes the
        option of its name, or the one :attr:`callback_options` maps it to (every option if the constructor takes
        ``**kwargs``); the others keep their defaults. Override it to build the class otherwise."""
        parameters = init_parameters(cls)
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return cls(**options)
        sources = {name: cls.callback_options.get(name, name) for name in parameters}
        return cls(**{name: options[source] for name, source in sources.items() if source in options})

    def __repr__(self) -> str:
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.init_args.items())
        return f"{type(self).__name__}({arguments})"


def import_object(path: str) -> Any:
    """The object a dotted ``path`` names (``mylab.StudentT``: ``StudentT`` of module ``mylab``), importing the
    longest prefix of ``path`` that is a module; ``None`` where no prefix is an importable module or the module has
    no such attribute. An error raised while importing a module that exists propagates."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        try:
            value: Any = importlib.import_module(name)
        except ModuleNotFoundError as error:  # this prefix is not a module (but a missing import inside one is raised)
            if error.name is not None and (name == error.name or name.startswith(f"{error.name}.")):
                continue
            raise
        for attribute in parts[end:]:
            value = getattr(value, attribute, None)
        return value
    return None


_loaded_entry_points = False


def load_entry_points() -> None:
    """Imports, once per process, what the installed packages list in the :data:`ENTRY_POINT_GROUP` entry-point
    group (each entry's module, or the object it names): the modules that register their components."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        entry.load()


def subclass_of(kind: str, base: type) -> Callable[[Any], Any]:
    """A ``convert`` for :class:`Registry` that accepts subclasses of ``base`` only."""

    def convert(value: Any) -> Any:
        if isinstance(value, type) and issubclass(value, base):
            return value
        raise TypeError(f"{kind} must be a {base.__name__} subclass, got {value!r}")

    return convert


class Registry(Generic[V]):
    """Entries by name, and the resolution of a config's or a caller's value into a component.

    Args:
        kind: the option that names an entry (``"proposal"``, ``"normalization"``), used in error messages.
        base: the class every component of the registry derives from.
        convert: turns what is registered into the stored entry, raising ``TypeError`` for what it does not accept.
        order: the built-in names, in the order :meth:`names` lists them (the documented order).
    """

    def __init__(self, kind: str, base: type, convert: Callable[[Any], V], order: tuple[str, ...]) -> None:
        if any("." in name for name in order):
            raise ValueError(f"built-in {kind} names contain no dot (dotted names are the users'), got {order}")
        self.kind, self.base, self.convert, self.order = kind, base, convert, order
        self._entries: dict[str, V] = {}

    def builtin(self, name: str, value: V) -> V:
        """Registers the built-in entry ``name``, one of :attr:`order` (users cannot replace it)."""
        if name not in self.order:
            raise ValueError(f"{name!r} is not among the built-in {self.kind} names {list(self.order)}")
        self._entries[name] = value
        return value

    def register(self, name: str, value: Any, overwrite: bool = False) -> V:
        """Registers ``convert(value)`` under ``name`` and returns it.

        Raises:
            ValueError: if ``name`` is empty, built-in, or taken and ``overwrite`` is false.
            TypeError: if ``convert`` refuses ``value``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if name in self.order:
            raise ValueError(
                f"name {name!r} is a built-in {self.kind} and cannot be replaced: register yours under a name of your "
                f"own, e.g. 'mylab.{name}' (built-in names never contain a dot, so a dotted name never collides with "
                "one the library adds later)"
            )
        if name in self._entries and not overwrite:
            raise ValueError(f"name {name!r} is already registered; pass overwrite=True to replace it")
        self._entries[name] = entry = self.convert(value)
        return entry

    def register_or_decorate(self, name: str, value: Any | None, overwrite: bool) -> Any:
        """:meth:`register` ``value`` and return it unchanged, or (``value`` is ``None``) a class decorator that does.

        The ``register_*`` functions' common form: ``register_x("name", cls)`` or ``@register_x("name")``.
        """
        if value is None:
            return lambda cls: self.register_or_decorate(name, cls, overwrite)
        self.register(name, value, overwrite)
        return value

    def build(self, name: str, **options: Any) -> Any:
        """The entry ``name`` built with ``from_options(**options)`` (entries that are classes with that method)."""
        return self[name].from_options(**options)  # type: ignore[attr-defined]

    def resolve(self, value: Any, options: Mapping[str, Any] | None = None) -> Any:
        """The component ``value`` gives: an instance of :attr:`base` as it is; a name (registered, or found as
        :meth:`__getitem__` finds it), a class path string, a subclass, or a mapping with ``class_path`` (and
        ``init_args``, which the instance is built with). A class is built with
        :meth:`Component.from_options` of ``options`` (the weighting callback's, for a component it names).

        Raises:
            ValueError: for a name or class path that names no :attr:`base` (listing the known names and how to make a
                component of one's own found), or a value of another type.
        """
        if isinstance(value, self.base):
            return value
        if isinstance(value, Mapping) and isinstance(value.get("class_path"), str):
            cls = self._class(value["class_path"])
            return cls(**dict(value.get("init_args") or {}))
        entry: Any = self[value] if isinstance(value, str) else value
        if isinstance(entry, self.base):
            return entry
        if isinstance(entry, type) and issubclass(entry, self.base):
            return entry.from_options(**(options or {}))  # type: ignore[attr-defined]
        raise ValueError(
            f"{self.kind} must be a name, a class path or a {self.base.__name__} instance or subclass, got {value!r}"
        )

    def name_of(self, component: Any) -> str | None:
        """The name ``component``'s class (or, for a registered instance, the instance) is registered under."""
        for name, entry in self._entries.items():
            if entry is component or entry is type(component):
                return name
        return None

    def _class(self, path: str) -> type:
        cls = import_object(path) if "." in path else None
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise ValueError(
                f"{self.kind}: class_path {path!r} is not a {self.base.__name__} subclass; "
                + FOUND_HOW.format(kind=self.kind)
            )
        return cls

    def find(self, name: str) -> Any:
        """The entry registered as ``name``, else what the dotted ``name`` imports (a module that registers
        ``name``, or a :attr:`base` subclass or instance at that class path), else the entry once the
        :data:`ENTRY_POINT_GROUP` entry points are loaded; ``None`` where nothing is found."""
        if name in self._entries:
            return self._entries[name]
        found = import_object(name) if "." in name else None
        if name in self._entries:
            return self._entries[name]
        if isinstance(found, self.base) or (isinstance(found, type) and issubclass(found, self.base)):
            return found
        load_entry_points()
        return self._entries.get(name)

    def names(self) -> tuple[str, ...]:
        """The names: the built-in ones in :attr:`order`, then the registered ones in registration order."""
        builtin = tuple(name for name in self.order if name in self._entries)
        return builtin + tuple(name for name in self._entries if name not in self.order)

    def __getitem__(self, name: str) -> V:
        """The entry ``name`` (see :meth:`find`).

        Raises:
            ValueError: naming the known names and how to make a component of one's own found.
        """
        found = self.find(name) if isinstance(name, str) and name else None
        if found is not None:
            return found
        raise ValueError(
            f"{self.kind} must be one of {list(self.names())}, got {name!r}; {FOUND_HOW.format(kind=self.kind)}"
        )

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

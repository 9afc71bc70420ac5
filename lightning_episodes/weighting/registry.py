"""A registry of named entries, so that configs can name a target, a proposal or a normaliser by a string.

:func:`~lightning_episodes.weighting.register_target`, :func:`~lightning_episodes.weighting.register_proposal` and
:func:`~lightning_episodes.weighting.register_normalizer` are built on :class:`Registry`: built-in names come first
in the order the registry declares (:attr:`Registry.order`, not the order in which modules happen to be imported)
and cannot be replaced; registered ones follow in registration order. Built-in names never contain a dot, so a
dotted name (``"mylab.triangular"``) is one the library will never take.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "accepted_options", "subclass_of"]

V = TypeVar("V")


def accepted_options(cls: type, options: dict[str, Any]) -> dict[str, Any]:
    """The ``options`` that ``cls``'s constructor names (every one if it takes ``**kwargs``): what a registered
    class's default ``from_options`` passes on."""
    parameters = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(options)
    return {name: value for name, value in options.items() if name in parameters}


def subclass_of(kind: str, base: type) -> Callable[[Any], Any]:
    """A ``convert`` for :class:`Registry` that accepts subclasses of ``base`` only."""

    def convert(value: Any) -> Any:
        if isinstance(value, type) and issubclass(value, base):
            return value
        raise TypeError(f"{kind} must be a {base.__name__} subclass, got {value!r}")

    return convert


class Registry(Generic[V]):
    """Entries by name.

    Args:
        kind: the option that names an entry (``"proposal"``, ``"normalization"``), used in error messages.
        convert: turns what is registered into the stored entry, raising ``TypeError`` for what it does not accept.
        order: the built-in names, in the order :meth:`names` lists them (the documented order).
    """

    def __init__(self, kind: str, convert: Callable[[Any], V], order: tuple[str, ...]) -> None:
        if any("." in name for name in order):
            raise ValueError(f"built-in {kind} names contain no dot (dotted names are the users'), got {order}")
        self.kind, self.convert, self.order = kind, convert, order
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

    def names(self) -> tuple[str, ...]:
        """The names: the built-in ones in :attr:`order`, then the registered ones in registration order."""
        builtin = tuple(name for name in self.order if name in self._entries)
        return builtin + tuple(name for name in self._entries if name not in self.order)

    def __getitem__(self, name: str) -> V:
        if isinstance(name, str) and name in self._entries:
            return self._entries[name]
        raise ValueError(f"{self.kind} must be one of {list(self.names())}, got {name!r}")

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

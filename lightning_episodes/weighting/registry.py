"""A registry of named classes, so that configs can name a proposal or a normaliser by a string.

:func:`~lightning_episodes.weighting.register_proposal` and
:func:`~lightning_episodes.weighting.register_normalizer` are built on :class:`Registry`: built-in names come
first and cannot be replaced, registered ones follow in registration order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Subclasses of ``base`` by name.

    Args:
        kind: the option that names an entry (``"proposal"``, ``"normalization"``), used in error messages.
        base: the class every entry must subclass.
    """

    def __init__(self, kind: str, base: type[T]) -> None:
        self.kind, self.base = kind, base
        self._entries: dict[str, type[T]] = {}
        self._builtin: set[str] = set()

    def builtin(self, name: str) -> Callable[[type[T]], type[T]]:
        """A class decorator that registers a built-in entry (which users cannot replace)."""

        def decorator(cls: type[T]) -> type[T]:
            self._entries[name] = cls
            self._builtin.add(name)
            return cls

        return decorator

    def register(self, name: str, cls: type[T], overwrite: bool = False) -> type[T]:
        """Registers ``cls`` under ``name``.

        Raises:
            ValueError: if ``name`` is empty, built-in, or taken and ``overwrite`` is false.
            TypeError: if ``cls`` is not a subclass of ``base``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if name in self._builtin:
            raise ValueError(f"name {name!r} is a built-in {self.kind} and cannot be replaced")
        if name in self._entries and not overwrite:
            raise ValueError(f"name {name!r} is already registered; pass overwrite=True to replace it")
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"{self.kind} must be a {self.base.__name__} subclass, got {cls!r}")
        self._entries[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Removes a registered (not built-in) entry; nothing if ``name`` is not registered."""
        if name in self._builtin:
            raise ValueError(f"name {name!r} is a built-in {self.kind} and cannot be removed")
        self._entries.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """The names, built-in ones first."""
        return tuple(self._entries)

    def __getitem__(self, name: str) -> type[T]:
        if isinstance(name, str) and name in self._entries:
            return self._entries[name]
        raise ValueError(f"{self.kind} must be one of {list(self._entries)}, got {name!r}")

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

"""The arguments an object was built with, as its constructor saw them (defaults applied): what a record writes as
the object's ``init_args`` beside its ``class_path``, the form a LightningCLI config gives it in. Shared by the
weighting's components and the data module's task samplers."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["RemembersArguments", "bound_arguments", "class_path", "init_parameters"]


def init_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The parameters of ``cls.__init__`` after ``self``."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]  # type: ignore[misc]
    return {p.name: p for p in parameters}


def bound_arguments(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``cls(*args, **kwargs)``'s constructor arguments by name, defaults applied, ``**kwargs`` spread and
    ``*args`` left out; ``{}`` where they do not bind (unpickling calls ``__new__`` alone, then restores the
    object's ``__dict__``).

    Example:
        >>> class Scaled:
        ...     def __init__(self, factor: float = 2.0, shift: float = 0.0) -> None: ...
        >>> bound_arguments(Scaled, (3.0,), {})
        {'factor': 3.0, 'shift': 0.0}
    """
    try:
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)  # type: ignore[misc]
    except TypeError:
        return {}
    bound.apply_defaults()
    arguments = dict(list(bound.arguments.items())[1:])
    for name, parameter in init_parameters(cls).items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(arguments.pop(name, {}))
        elif parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            arguments.pop(name, None)
    return arguments


def class_path(cls: type) -> str:
    """``module.QualifiedName``: what a config's ``class_path`` names."""
    return f"{cls.__module__}.{cls.__qualname__}"


class RemembersArguments:
    """A base class whose instances remember the arguments their constructor was called with (:attr:`init_args`), so
    that a subclass needs no code of its own to be recorded as ``class_path`` + ``init_args``."""

    _init_args: dict[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        self = super().__new__(cls)
        self._init_args = bound_arguments(cls, args, kwargs)
        return self

    @property
    def init_args(self) -> dict[str, Any]:
        """The constructor's arguments this instance was built with, defaults included (a copy)."""
        return dict(getattr(self, "_init_args", {}))

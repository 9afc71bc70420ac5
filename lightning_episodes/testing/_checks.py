"""What every contract harness shares: a named check, running a harness's checks with messages naming the property
that failed, pytest parameters for them, and the plain-Python stand-ins of ``pytest.raises`` and ``pytest.approx``
(pytest is not a dependency of the package)."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch

S = TypeVar("S")


def _always(spec: object) -> bool:
    return True


@dataclass(frozen=True)
class Check(Generic[S]):
    """One property of a contract.

    Args:
        run: asserts the property of a spec (raises :class:`AssertionError` when it does not hold).
        applies: whether a spec has the property at all (a loader with a one-class split has no scarce 2-way
            training); a check that does not apply is not run, and :func:`contract_params` leaves it out.
    """

    run: Callable[[S], None]
    applies: Callable[[S], bool] = _always


def run_checks(checks: Mapping[str, Check[S]], spec: S, only: Iterable[str] | None = None) -> None:
    """Run the ``checks`` (those named in ``only``, else all, in their order) that apply to ``spec``.

    Raises:
        ValueError: if ``only`` names a check that ``checks`` lacks.
        AssertionError: at the first property that fails, its message naming ``spec`` and the property.
    """
    names = list(checks) if only is None else list(only)
    unknown = [name for name in names if name not in checks]
    if unknown:
        raise ValueError(f"checks: unknown {unknown}; available: {', '.join(checks)}")
    for name in names:
        check = checks[name]
        if not check.applies(spec):
            continue
        try:
            check.run(spec)
        except AssertionError as error:
            detail = str(error).strip()
            if detail:  # numpy's and torch's messages span lines: they start on a line of their own
                detail = (":\n" if "\n" in detail else ": ") + detail
            raise AssertionError(f"{spec} breaks the contract's {name!r}{detail}") from error
        except Exception as error:
            error.add_note(f"(raised while checking {name!r} of {spec})")
            raise


def contract_params(specs: Sequence[S], checks: Mapping[str, Check[S]]) -> list[Any]:
    """``pytest.param(spec, name, id="<spec>-<name>")`` for every check that applies to every spec: one test per
    property, for ``@pytest.mark.parametrize(("spec", "check"), contract_params(SPECS, TARGET_CHECKS))`` over a test
    that calls ``check_target(spec, checks=[check])``. Imports pytest, which the rest of the package does not need."""
    import pytest

    return [
        pytest.param(spec, name, id=f"{spec}-{name}")
        for spec in specs
        for name, check in checks.items()
        if check.applies(spec)
    ]


@contextmanager
def raises(
    expected: type[BaseException] | tuple[type[BaseException], ...], match: str
) -> Iterator[list[BaseException]]:
    """``pytest.raises(expected, match=match)`` without pytest: the block must raise ``expected`` with a message in
    which ``re.search`` finds ``match``. The list it yields holds the exception afterwards."""
    caught: list[BaseException] = []
    try:
        yield caught
    except expected as error:
        caught.append(error)
    else:
        raise AssertionError(f"expected {expected} matching {match!r}; nothing was raised")
    message = str(caught[0])
    assert re.search(match, message), f"{type(caught[0]).__name__}({message!r}) does not match {match!r}"


def assert_approx(actual: Any, expected: Any, rel: float = 1e-6, abs_tol: float = 1e-12, what: str = "value") -> None:
    """``assert actual == pytest.approx(expected, rel=rel, abs=abs_tol)`` without pytest, for numbers and dicts of
    numbers: ``|actual - expected| <= max(rel * |expected|, abs_tol)``."""
    if isinstance(expected, Mapping):
        assert isinstance(actual, Mapping), f"{what}: {actual!r} is not a mapping"
        assert set(actual) == set(expected), f"{what}: keys {sorted(actual)} != {sorted(expected)}"
        for key in expected:
            assert_approx(actual[key], expected[key], rel, abs_tol, f"{what}[{key!r}]")
        return
    tolerance = max(rel * abs(expected), abs_tol)
    assert abs(actual - expected) <= tolerance, f"{what}: {actual} != {expected} ± {tolerance:.3g}"


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` through ``torch.save`` and a ``weights_only`` load, as a checkpoint carries it (plain values and
    CPU tensors only, or the load fails)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def same_state(a: object, b: object) -> bool:
    """Whether two (nested) state dicts hold the same keys, equal tensors and equal values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.equal(a, b)
    return a == b

"""The weighting tests' shared fixture: the test-only extensions registered for the contract harnesses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.weighting import extensions


@pytest.fixture
def registered_extensions() -> Iterator[None]:
    """The test-only target, proposal and normaliser registered for the test (the registries restored after), so
    that a contract module's rows cover every registered entry (``pytestmark = usefixtures(...)`` there)."""
    with extensions.registered():
        yield

"""Names every doctest in the package may use without importing them."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace: dict) -> None:
    doctest_namespace["torch"] = torch

"""The docstring examples of the answer/signal layer run and pass."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["answers", "equivalence", "clustering", "signals", "prompts", "datasets"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    if name == "equivalence":
        pytest.importorskip("math_verify")
    module = importlib.import_module(f"certa.algorithms.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0

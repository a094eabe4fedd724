"""The docstring examples of the answer/signal layer run and pass."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["certa.algorithms.answers.extract", "certa.algorithms.answers.equivalence",
           "certa.algorithms.answers.clustering", "certa.algorithms.signals.multipath", "certa.algorithms.prompts",
           "certa.eval.datasets"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    if name.endswith("equivalence"):
        pytest.importorskip("math_verify")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0

"""The docstring examples of the answer/signal layer run and pass (and there are some to run).

``certa.eval.datasets`` is not here: its examples need the dataset files and are all
``+SKIP``; tests/test_datasets.py covers it."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["certa.algorithms.answers.extract", "certa.algorithms.answers.equivalence",
           "certa.algorithms.answers.clustering", "certa.algorithms.signals.multipath", "certa.algorithms.prompts",
           "certa.algorithms.signals.text", "certa.algorithms.signals.reasoning", "certa.algorithms.signals.cot"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    if name.endswith("equivalence"):
        pytest.importorskip("math_verify")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no docstring example that runs"
    assert result.failed == 0

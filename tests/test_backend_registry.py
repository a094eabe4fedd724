"""Every registered backend passes the shared conformance suite (issue 39 item 2).

The check is static: each backend name in :data:`~certa.runtime.backends.registry.BACKENDS`
must be the ``backend_name`` of some ``BackendConformance`` subclass in tests/ (the module may
skip at run time where the engine is not installed: a GPU, a model, a server). The simulated
engine (``sim``) runs the suite here.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from certa.runtime import ScriptedBackend
from certa.runtime.backends.registry import BACKENDS
from certa.runtime.sim.contention import ContentionBackend
from certa.runtime.sim.cost_model import CostModel

from .conformance import BackendConformance
from .test_scripted_backend import COUNTING, counting_probe

TESTS = pathlib.Path(__file__).resolve().parent


def conformance_classes() -> dict[str, list[str]]:
    """backend name -> the conformance classes (``file::Class``) that declare it."""
    out: dict[str, list[str]] = {}
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "BackendConformance"
                                                      for b in node.bases):
                names = [s.value.value for s in node.body if isinstance(s, ast.Assign)
                         and any(getattr(t, "id", None) == "backend_name" for t in s.targets)
                         and isinstance(s.value, ast.Constant)]
                assert names, f"{path.name}::{node.name} does not say which backend it tests (backend_name = ...)"
                out.setdefault(names[0], []).append(f"{path.name}::{node.name}")
    return out


def test_every_registered_backend_has_a_conformance_suite():
    found = conformance_classes()
    missing = [name for name in BACKENDS if name not in found]
    assert not missing, f"backends without a BackendConformance subclass in tests/: {missing}"
    assert not set(found) - set(BACKENDS) - {"faulty"}, f"suites of unregistered backends: {set(found) - set(BACKENDS)}"


class TestSimulatedEngine(BackendConformance):
    """The simulated engine in accelerated time, its text from the scripted fake."""

    backend_name = "sim"

    @pytest.fixture
    async def backend(self):
        content = ScriptedBackend(responses=lambda r: COUNTING, probe=counting_probe,
                                  scores=lambda r: {"Yes": 0.75, "No": 0.25})
        b = ContentionBackend(cost=CostModel(0.0005, 0.0, 0.0, 0.0), kv_capacity=100_000, speed=1.0,
                              content=content)
        yield b
        await b.close()

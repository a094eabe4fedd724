"""Backends for tests: the scripted fake (``scripted``, like DSPy's DummyLM) and fault injection (``faults``)."""

from certa.runtime.backends.testing.faults import Fault, FaultyBackend
from certa.runtime.backends.testing.scripted import ScriptedBackend

__all__ = ["Fault", "FaultyBackend", "ScriptedBackend"]

"""Backends: the engines certa drives (scripted fake, llama.cpp, SGLang, OpenAI-compatible HTTP)."""

from certa.runtime.backends.base import Backend, ChunkedSequence, BackendSequence
from certa.runtime.backends.testing.scripted import ScriptedBackend

__all__ = ["Backend", "BackendSequence", "ChunkedSequence", "ScriptedBackend"]

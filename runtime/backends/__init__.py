"""Backends: the engines certa drives (scripted fake, llama.cpp, SGLang, OpenAI-compatible HTTP)."""

from certa.runtime.backends.base import Backend, ChunkedSequence, Sequence
from certa.runtime.backends.testing.scripted import ScriptedBackend

__all__ = ["Backend", "Sequence", "ChunkedSequence", "ScriptedBackend"]

"""Backends: the engines certa drives (scripted fake, llama.cpp, SGLang, OpenAI-compatible HTTP)."""

from .base import Backend, ChunkedSequence, Sequence
from .scripted import ScriptedBackend

__all__ = ["Backend", "Sequence", "ChunkedSequence", "ScriptedBackend"]

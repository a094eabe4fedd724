"""Backend names → backend classes, importing heavy engines only when asked for.

``certa run --backend NAME``, ``certa serve --backend NAME`` and ``Runtime("NAME", ...)``
resolve names here; the CLI help lists :data:`BACKENDS` with its help lines.

Example:
    >>> BACKENDS.names()
    ['scripted', 'llamacpp', 'openai', 'sglang', 'sglang-http', 'sim']
    >>> type(make_backend("scripted", responses=["\\\\boxed{4}"])).__name__
    'ScriptedBackend'
"""

from __future__ import annotations

from typing import Any

from certa.runtime.backends.base import Backend
from certa.runtime.registry import Registry

__all__ = ["BACKENDS", "make_backend"]

BACKENDS: Registry[Backend] = Registry("backend")
"""Every backend by name; entries are ``"module:Class"`` strings, imported on first use."""

BACKENDS.register("scripted", "certa.runtime.backends.testing.scripted:ScriptedBackend",
                  help="fake model with scripted responses, for tests and examples")
BACKENDS.register("llamacpp", "certa.runtime.backends.llamacpp.backend:LlamaCppBackend",
                  help="embedded llama.cpp engine on CPU, GGUF models", install="pip install 'certa[cpu]'")
BACKENDS.register("openai", "certa.runtime.backends.openai_http:OpenAIBackend",
                  help="any OpenAI-compatible HTTP server", install="pip install 'certa[http]'")
BACKENDS.register("sglang", "certa.runtime.backends.sglang.engine:SGLangEngineBackend",
                  help="SGLang engine in process, on a GPU", install="pip install 'certa[sglang]'")
BACKENDS.register("sglang-http", "certa.runtime.backends.sglang.http:SGLangHTTPBackend",
                  help="SGLang server(s) over HTTP", install="pip install 'certa[sglang]'")
BACKENDS.register("sim", "certa.runtime.sim.contention:ContentionBackend",
                  help="SIMULATED engine (cost model, KV pool, batching; estimated presets) in real time, "
                       "for load tests: options preset, speed")


def make_backend(name: str, **options: Any) -> Backend:
    """Build the backend called ``name`` with ``options`` (see each backend's docs)."""
    return BACKENDS.make(name, **options)

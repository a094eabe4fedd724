"""Backend names → backend instances, importing heavy engines only when asked for."""

from __future__ import annotations

from typing import Any

from certa.runtime.errors import ConfigError
from certa.runtime.backends.base import Backend

BACKENDS = {
    "scripted": ("certa.runtime.backends.testing.scripted", "ScriptedBackend"),
    "llamacpp": ("certa.runtime.backends.llamacpp.backend", "LlamaCppBackend"),
    "openai": ("certa.runtime.backends.openai_http", "OpenAIBackend"),
    "sglang": ("certa.runtime.backends.sglang.engine", "SGLangEngineBackend"),
    "sglang-http": ("certa.runtime.backends.sglang.http", "SGLangHTTPBackend"),
}


def make_backend(name: str, **options: Any) -> Backend:
    """Build the backend called ``name`` with ``options`` (see each backend's docs)."""
    try:
        module_name, cls_name = BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r}", hint=f"choose one of {', '.join(BACKENDS)}") from None
    import importlib
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"backend {name!r} is not available: {exc}",
                          hint="install the matching extra, e.g. pip install 'certa[cpu]'") from None
    return getattr(module, cls_name)(**options)

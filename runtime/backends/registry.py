"""Backend names → backend classes, importing heavy engines only when asked for.

``certa run --backend NAME``, ``certa serve --backend NAME``, ``Runtime("NAME", ...)`` and
:func:`~certa.runtime.build.make_runtime` resolve names here; the CLI help lists
:data:`BACKENDS` with its help lines. Each entry also says which of the command line's
``--model``/``--url`` it takes (``options``), so :func:`cli_options` maps them without a list
of names of its own, and ``auto`` picks the installed engine (:func:`auto_backend`).

Example:
    >>> BACKENDS.names()
    ['scripted', 'llamacpp', 'openai', 'sglang', 'sglang-http', 'sim']
    >>> type(make_backend("scripted", responses=["\\\\boxed{4}"])).__name__
    'ScriptedBackend'
    >>> cli_options("sglang-http", "ignored", "http://a:30000,http://b:30000")
    {'base_url': ['http://a:30000', 'http://b:30000']}
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

from certa.runtime.backends.base import Backend
from certa.runtime.errors import ConfigError
from certa.runtime.registry import Registry

__all__ = ["BACKENDS", "auto_backend", "cli_options", "make_backend"]

BACKENDS: Registry[Backend] = Registry("backend")
"""Every backend by name; entries are ``"module:Class"`` strings, imported on first use, with
``options``: the command-line options (``model``, ``base_url``) the backend takes."""

BACKENDS.register("scripted", "certa.runtime.backends.testing.scripted:ScriptedBackend",
                  help="fake model with scripted responses, for tests and examples")
BACKENDS.register("llamacpp", "certa.runtime.backends.llamacpp.backend:LlamaCppBackend",
                  help="embedded llama.cpp engine on CPU, GGUF models", install="pip install 'certa[cpu]'",
                  options=("model",))
BACKENDS.register("openai", "certa.runtime.backends.openai_http:OpenAIBackend",
                  help="any OpenAI-compatible HTTP server", install="pip install 'certa[http]'", options=("base_url",))
BACKENDS.register("sglang", "certa.runtime.backends.sglang.engine:SGLangEngineBackend",
                  help="SGLang engine in process, on a GPU", install="pip install 'certa[sglang]'", options=("model",))
BACKENDS.register("sglang-http", "certa.runtime.backends.sglang.http:SGLangHTTPBackend",
                  help="SGLang server(s) over HTTP", install="pip install 'certa[sglang]'", options=("base_url",))
BACKENDS.register("sim", "certa.runtime.sim.contention:ContentionBackend",
                  help="SIMULATED engine (cost model, KV pool, batching; estimated presets) in real time, "
                       "for load tests: options preset, speed")


def make_backend(name: str | None, **options: Any) -> Backend:
    """Build the backend called ``name`` with ``options`` (see each backend's docs).

    ``auto``: the installed engine (:func:`auto_backend`), logged on ``certa.runtime``. None
    (``Runtime()`` without a backend) is refused with a hint, never a silent fake whose answers
    would look like a model's.
    """
    if name is None:
        raise ConfigError("Runtime() needs a backend", hint="Runtime('auto') picks the installed engine (llama.cpp "
                          "on CPU, SGLang on a GPU) and logs which; Runtime('scripted') or "
                          "Runtime(ct.ScriptedBackend(responses=[...])) is the scripted fake")
    if name == "auto":
        name = auto_backend()
        logging.getLogger("certa.runtime").info("Runtime('auto'): backend %s", name)
    return BACKENDS.make(name, **options)


def cli_options(backend: str, model: str | None, url: str | None) -> dict[str, Any]:
    """``--model`` and ``--url`` as constructor options of ``backend``.

    ``--model`` goes to the backends whose entry takes ``model`` (the engines that load one);
    ``--url`` (comma-separated for several) as ``base_url``, which a backend that does not take
    it refuses when it is made.
    """
    opts: dict[str, Any] = {}
    if model and "model" in BACKENDS.meta(backend, "options", ()):
        opts["model"] = model
    if url:
        opts["base_url"] = url.split(",") if "," in url else url
    return opts


def auto_backend() -> str:
    """The backend ``auto`` means here: SGLang on a machine with CUDA and sglang, else the
    embedded llama.cpp engine; ``ConfigError`` with a hint when no real engine is installed."""
    if importlib.util.find_spec("sglang") is not None and _has_cuda():
        return "sglang"
    if importlib.util.find_spec("llama_cpp") is not None:
        return "llamacpp"
    raise ConfigError("no real engine is installed", hint="pip install 'certa[cpu]' for the embedded llama.cpp "
                      "engine, or pass --backend scripted (Runtime('scripted')) for the fake backend")


def _has_cuda() -> bool:
    try:
        import torch  # noqa: PLC0415
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False

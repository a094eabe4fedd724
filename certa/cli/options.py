"""What the CLI's options can name, and how ``--backend``/``--model``/``--url`` build a Runtime.

The help texts of ``certa run`` and ``certa serve`` are generated here from the registries
(programs, backends, scheduling policies; see :mod:`certa.runtime.registry`), so a newly
registered name shows up in ``--help`` without editing the CLI.

Example:
    >>> backend_options("sglang-http", None, "http://a:30000,http://b:30000")
    {'base_url': ['http://a:30000', 'http://b:30000']}
    >>> SCHEDULER_HELP
    'fcfs, lpm, app-fifo, certa-nocd, certa'
"""

from __future__ import annotations

from typing import Any, Optional

from certa.algorithms.programs.library import PROGRAMS
from certa.runtime.backends.registry import BACKENDS
from certa.runtime.errors import ConfigError
from certa.runtime.registry import Registry
from certa.runtime.scheduling.policies import POLICIES

__all__ = ["BACKEND_HELP", "PROGRAM_HELP", "SCHEDULER_HELP", "auto_backend", "backend_options", "check_backend",
           "make_runtime", "parse_backend_opts", "registry_epilog"]

PROGRAM_HELP = f"built-in program ({PROGRAMS.choices()}) or FILE.py:attr"
BACKEND_HELP = f"auto, {BACKENDS.choices()}"
SCHEDULER_HELP = POLICIES.choices()


def registry_epilog(*tables: tuple[str, Registry]) -> str:
    """Help paragraphs ``title: name — help; ...`` for the CLI, generated from the registries."""
    return "\n\n".join(f"{title}: " + "; ".join(f"{name} — {table.help(name)}" for name in table)
                        for title, table in tables)


def backend_options(backend: str, model: Optional[str], url: Optional[str]) -> dict[str, Any]:
    """``--model`` and ``--url`` as backend constructor options (every backend names them alike).

    ``--model`` goes to the engines that load one (llamacpp, sglang); ``--url`` (comma-separated
    for several) to the HTTP backends as ``base_url``.
    """
    opts: dict[str, Any] = {}
    if model and backend in ("llamacpp", "sglang"):
        opts["model"] = model
    if url:
        opts["base_url"] = url.split(",") if "," in url else url
    return opts


def parse_backend_opts(items: list[str]) -> dict[str, Any]:
    """``--backend-opt KEY=VALUE`` pairs; a VALUE that parses as JSON is taken as JSON.

    >>> parse_backend_opts(["n_seq=8", "verbose=false", "model=qwen2.5-coder-0.5b"])
    {'n_seq': 8, 'verbose': False, 'model': 'qwen2.5-coder-0.5b'}
    """
    import json
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError(f"--backend-opt {item!r}: expected KEY=VALUE", hint="e.g. --backend-opt max_in_flight=8")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def check_backend(backend: str) -> None:
    """Raise ``ConfigError`` (listing the choices) for a ``--backend`` name no one registered.

    Checked before anything slow or anything else that can fail (loading data), so a typo
    is the error the user sees. ``auto`` is always valid.

    >>> check_backend("scripted")
    """
    if backend != "auto":
        BACKENDS.entry(backend)


def make_runtime(backend: str, model: Optional[str], scheduler: str = "certa", **opts: Any):
    """Build a Runtime for a CLI backend name (``auto`` picks llama.cpp on CPU, SGLang on GPU)
    with one scheduling policy for all its programs (certa's by default, as ``certa serve``).

    An option the backend does not take is a ``ConfigError`` naming it."""
    from certa.runtime import Runtime, Scheduler
    from certa.runtime.scheduling.policies import make_policy
    if backend == "auto":
        backend = auto_backend()
    kwargs: dict[str, Any] = {**opts, **backend_options(backend, model, None)}
    sched = Scheduler(policy=make_policy(scheduler))
    try:
        return Runtime(backend, scheduler=sched, **kwargs)
    except TypeError as exc:  # an option the backend's constructor does not take
        raise ConfigError(f"bad option for backend {backend!r}: {exc}", hint="see docs/backends.md") from None


def auto_backend() -> str:
    import importlib.util
    if importlib.util.find_spec("sglang") is not None and _has_cuda():
        return "sglang"
    if importlib.util.find_spec("llama_cpp") is not None:
        return "llamacpp"
    raise ConfigError("no real engine is installed", hint="pip install 'certa[cpu]' for the embedded llama.cpp "
                      "engine, or pass --backend scripted for the fake backend")


def _has_cuda() -> bool:
    try:
        import torch  # noqa: PLC0415
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False

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
           "make_runtime", "registry_epilog"]

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


def check_backend(backend: str) -> None:
    """Raise ``ConfigError`` (listing the choices) for a ``--backend`` name no one registered.

    Checked before anything slow or anything else that can fail (loading data), so a typo
    is the error the user sees. ``auto`` is always valid.

    >>> check_backend("scripted")
    """
    if backend != "auto":
        BACKENDS.entry(backend)


def make_runtime(backend: str, model: Optional[str], scheduler: str = "fcfs", **opts: Any):
    """Build a Runtime for a CLI backend name (``auto`` picks llama.cpp on CPU, SGLang on GPU)."""
    from certa.runtime import Runtime, Scheduler
    if backend == "auto":
        backend = auto_backend()
    kwargs: dict[str, Any] = {**opts, **backend_options(backend, model, None)}
    sched = None
    if scheduler != "fcfs":
        from certa.runtime.scheduling.policies import make_policy
        sched = Scheduler(policy=make_policy(scheduler))
    return Runtime(backend, scheduler=sched, **kwargs)


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

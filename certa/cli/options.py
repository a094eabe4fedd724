"""What the CLI's options can name: help texts, ``--backend-opt`` pairs, a ``--backend`` check.

The help texts of ``certa run`` and ``certa serve`` are generated here from the registries
(programs, backends, scheduling policies; see :mod:`certa.runtime.registry`), so a newly
registered name shows up in ``--help`` without editing the CLI. The Runtime itself is built by
:func:`certa.runtime.build.make_runtime`, as the server's and the simulator's are; which
backends take ``--model`` and ``--url`` is their registry entries' ``options``.

Example:
    >>> SCHEDULER_HELP
    'fcfs, lpm, app-fifo, certa-nocd, certa'
    >>> check_backend("scripted")
"""

from __future__ import annotations

from typing import Any

from certa.algorithms.programs.library import PROGRAMS
from certa.runtime.backends.registry import BACKENDS
from certa.runtime.errors import ConfigError
from certa.runtime.registry import Registry
from certa.runtime.scheduling.policies import POLICIES

__all__ = ["BACKEND_HELP", "PROGRAM_HELP", "SCHEDULER_HELP", "check_backend", "parse_backend_opts", "registry_epilog"]

PROGRAM_HELP = f"built-in program ({PROGRAMS.choices()}) or FILE.py:attr"
BACKEND_HELP = f"auto, {BACKENDS.choices()}"
SCHEDULER_HELP = POLICIES.choices()


def registry_epilog(*tables: tuple[str, Registry]) -> str:
    """Help paragraphs ``title: name — help; ...`` for the CLI, generated from the registries."""
    return "\n\n".join(f"{title}: " + "; ".join(f"{name} — {table.help(name)}" for name in table)
                        for title, table in tables)


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

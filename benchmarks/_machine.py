"""Shared scaffolding of the llama.cpp CPU benchmarks (``cpu_engine.py``, ``probe_overhead.py``).

A benchmark builds its parser with :func:`parser` (``--json`` and ``--model``), adds its
own options (:func:`add_options`), and hands its ``async main(args) -> dict`` to
:func:`run_main`, which writes the JSON; the report's ``machine`` entry is :func:`machine`.
Imported as a sibling module, so the benchmarks still run as ``python benchmarks/x.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def machine() -> dict[str, str]:
    """Where the figures were measured (the ``machine`` entry of a report)."""
    return {"platform": platform.platform(), "note": "shared CPU; other jobs may be running"}


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by ``doc``'s first line, with ``--json`` and ``--model``."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--json", required=True, help="write the figures here")
    p.add_argument("--model", default=DEFAULT_MODEL, help="GGUF path or known model name")
    return p


def add_options(p: argparse.ArgumentParser, **defaults: int | float | str) -> None:
    """``--name`` options in the given order, typed as their defaults (``probe_tokens`` -> ``--probe-tokens``)."""
    for name, default in defaults.items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)


def run_main(main: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]],
             args: argparse.Namespace) -> dict[str, Any]:
    """Run ``main(args)`` to completion and write its report to ``args.json``; returns the report."""
    out = asyncio.run(main(args))
    Path(args.json).write_text(json.dumps(out, indent=2))
    return out

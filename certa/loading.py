"""Resolve what the user asked to run: a built-in program name or ``FILE.py:attr``."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from typing import Any

from certa.runtime.errors import ConfigError
from certa.runtime.program import Program


def load_target(target: str, options: dict[str, Any] | None = None) -> Any:
    """Return a runnable (compiled graph, Program class or factory result) for ``target``.

    ``target`` is a built-in program name from :mod:`certa.algorithms.programs.library` (``sc``,
    ``cot``, ...) or ``path/to/file.py:attribute`` (``:attribute`` defaults to ``program``).
    ``options`` are factory keywords for a built-in program (a calibrated policy file's
    ``program`` section: e.g. CoT's ``k``, ``interval`` and ``signal``).
    """
    path, _, attr = target.partition(":")
    if options and path.endswith(".py"):
        raise ConfigError(f"program options {sorted(options)} apply to built-in programs, not {target}")
    if path.endswith(".py"):
        file = pathlib.Path(path)
        if not file.exists():
            raise ConfigError(f"program file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"certa_user_{file.stem}", file)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        name = attr or "program"
        if not hasattr(module, name):
            raise ConfigError(f"{path} has no attribute {name!r}", hint="use FILE.py:attribute")
        obj = getattr(module, name)
        return obj() if callable(obj) and not hasattr(obj, "new") and not (
            isinstance(obj, type) and issubclass(obj, Program)) else obj
    from certa.algorithms.programs.library import PROGRAMS, build
    if target in PROGRAMS:
        return build(target, **(options or {}))
    raise ConfigError(f"unknown program {target!r}",
                      hint=f"use a built-in name ({PROGRAMS.choices()}) or FILE.py:attribute")

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

    While a file runs, its folder is first on ``sys.path``, so it can import its neighbours
    (``from helper import vote`` next to ``prog.py``), as ``python prog.py`` would allow;
    ``sys.path`` is restored afterwards (the imported neighbours stay in ``sys.modules``, so
    module-level imports keep working; an ``import`` deferred into a step body does not).
    """
    path, _, attr = target.partition(":")
    if options and path.endswith(".py"):
        raise ConfigError(f"program options {sorted(options)} apply to built-in programs, not {target}")
    if path.endswith(".py"):
        file = pathlib.Path(path)
        if not file.exists():
            raise ConfigError(f"program file {path} does not exist")
        module = _exec_file(file)
        name = attr or "program"
        if not hasattr(module, name):
            raise ConfigError(f"{path} has no attribute {name!r}", hint="use FILE.py:attribute")
        obj = getattr(module, name)
        return obj() if callable(obj) and not hasattr(obj, "new") and not (
            isinstance(obj, type) and issubclass(obj, Program)) else obj
    from certa.algorithms.programs.library import PROGRAMS, build
    if target in PROGRAMS:
        return build(target, **(options or {}))
    raise ConfigError(f"unknown program {target!r}", hint=f"{PROGRAMS.hint(target)}; or FILE.py:attribute")


def _exec_file(file: pathlib.Path) -> Any:
    """Import ``file`` as module ``certa_user_<stem>`` with its folder on ``sys.path`` meanwhile."""
    spec = importlib.util.spec_from_file_location(f"certa_user_{file.stem}", file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    folder = str(file.resolve().parent)
    sys.modules[spec.name] = module
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    finally:
        try:
            sys.path.remove(folder)  # the entry we added (the first equal one), even if the file added others
        except ValueError:
            pass
    return module

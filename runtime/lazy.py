"""Lazy package exports: a module-level ``__getattr__``/``__dir__`` pair that imports on first use.

A package lists its public names as ``name -> (module, attribute)`` (attribute ``None`` for
the module itself); nothing is imported until a name is first looked up, and the value is then
cached in the package's namespace so later look-ups skip ``__getattr__``. This module imports
nothing of certa, so any layer may use it.

Example (in a package's ``__init__.py``: ``__getattr__, __dir__ = lazy_exports(__name__, TABLE)``):
    >>> import types
    >>> demo = sys.modules["demo"] = types.ModuleType("demo")
    >>> table = {"dumps": ("json", "dumps"), "decoder": ("json.decoder", None)}
    >>> demo.__getattr__, demo.__dir__ = lazy_exports("demo", table)
    >>> demo.dumps({"a": 1}), "dumps" in vars(demo), "decoder" in dir(demo)
    ('{"a": 1}', True, True)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(module_name: str, table: Mapping[str, tuple[str, str | None]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for package ``module_name`` exporting ``table`` lazily.

    ``table`` maps a public name to ``(module, attribute)``; attribute ``None`` exports the
    module itself. An unknown name raises ``AttributeError`` as a plain module would.
    """

    def __getattr__(name: str) -> Any:
        try:
            target, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}") from None
        module = importlib.import_module(target)
        value = module if attr is None else getattr(module, attr)
        setattr(sys.modules[module_name], name, value)  # later look-ups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module_name]), *table})

    return __getattr__, __dir__

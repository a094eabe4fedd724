"""Old module names that moved, still importable with a ``DeprecationWarning``.

The command line moved into :mod:`certa.cli` (one module per command group) and drawing,
plots and the live table into :mod:`certa.viz`. ``import certa.drawing`` (and the other old
names below) gives a module that forwards to the new one, so existing code keeps working
while it says where to import from.

Example:
    >>> import sys, warnings, certa
    >>> _ = sys.modules.pop("certa.plots", None)  # (not imported before in this process)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     from certa.plots import plot_certaindex
    >>> plot_certaindex.__module__, str(caught[0].message)
    ('certa.viz.plots', 'certa.plots moved to certa.viz.plots')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "install"]

MOVED: dict[str, str] = {
    "certa.drawing": "certa.viz.drawing", "certa.tree_drawing": "certa.viz.tree_drawing",
    "certa.plots": "certa.viz.plots", "certa.live": "certa.viz.live", "certa.progress": "certa.cli.progress",
    "certa.cli_run": "certa.cli.run", "certa.cli_serve": "certa.cli.serve", "certa.cli_sim": "certa.cli.sim",
    "certa.cli_eval": "certa.cli.eval", "certa.cli_models": "certa.cli.models",
    "certa.cli_choices": "certa.cli.options", "certa.cli_errors": "certa.cli.errors",
}
"""Old module name -> where it lives now."""


class _Forwarder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names only; the module it makes forwards every attribute to the new one."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new}", DeprecationWarning, stacklevel=2)
        target = importlib.import_module(new)
        module.__dict__.update({k: v for k, v in vars(target).items() if not k.startswith("__")})
        module.__getattr__ = lambda name: getattr(target, name)  # type: ignore[attr-defined]


def install() -> None:
    """Make the old names importable (idempotent; :mod:`certa` calls it on import)."""
    if not any(isinstance(f, _Forwarder) for f in sys.meta_path):
        sys.meta_path.append(_Forwarder())

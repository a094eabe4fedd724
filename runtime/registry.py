"""Named tables of extensions: programs, backends, scheduling and stopping policies, signals.

Every extension point of certa is a :class:`Registry`: a name maps to an :class:`Entry`
holding a factory (a callable, or a ``"module:attr"`` string imported on first use, so a
heavy backend costs nothing until asked for) and a one-line help text that CLI help and
``certa serve`` listings are generated from. The module that owns a table fills it with
explicit :meth:`Registry.register` calls; importing some other module never adds names to
it. An unknown name raises a :class:`~certa.runtime.errors.ConfigError` listing the choices.
Everything else about an entry travels with it as keyword metadata (:meth:`Registry.meta`):
which CLI options a backend takes, a scheduling policy's colour in plots, ... so registering a
name is one entry in one place.

=====================  ============================================================
table                  owner
=====================  ============================================================
programs               ``certa.algorithms.programs.library.PROGRAMS``
backends               ``certa.runtime.backends.registry.BACKENDS``
scheduling policies    ``certa.runtime.scheduling.policies.POLICIES``
stopping policies      ``certa.algorithms.policies.STOPPING_POLICIES`` (every kind, the
                       runtime's own included)
CoT certaindex         ``certa.algorithms.signals.COT_SIGNALS`` (the multi-path signals are
signals                plain functions a program calls, never named in a config)
=====================  ============================================================

Example:
    >>> colors = Registry("color")
    >>> colors.register("red", lambda shade=1.0: f"red x{shade}", help="pure red", hex="#ff0000")
    >>> colors.register("blue", "colorsys:rgb_to_hsv", help="imported when first asked for")
    >>> colors.make("red", shade=0.5), colors.names(), colors.help("red"), colors.meta("red", "hex")
    ('red x0.5', ['red', 'blue'], 'pure red', '#ff0000')
    >>> "blue" in colors, colors.get("blue").__name__
    (True, 'rgb_to_hsv')
    >>> colors.get("green")
    Traceback (most recent call last):
    ...
    certa.runtime.errors.ConfigError: CT300 config-error: unknown color 'green' (hint: choose one of: red, blue)
    >>> colors.get("bleu")
    Traceback (most recent call last):
    ...
    certa.runtime.errors.ConfigError: CT300 config-error: unknown color 'bleu' (hint: did you mean 'blue'? choose one of: red, blue)
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from certa.runtime.errors import ConfigError

__all__ = ["Entry", "Registry", "did_you_mean"]

T = TypeVar("T")


def did_you_mean(name: object, options: list[str]) -> str | None:
    """``"did you mean 'x'?"`` for the option closest to a mistyped ``name``, or None.

    The one spelling suggester of certa: registries, step names, CLI choices.

    >>> did_you_mean("scc", ["cot", "sc", "mcts"]), did_you_mean("zzz", ["cot", "sc"])
    ("did you mean 'sc'?", None)
    """
    if not isinstance(name, str):
        return None
    close = difflib.get_close_matches(name, options, n=1) or difflib.get_close_matches(name.lower(), options, n=1)
    return f"did you mean {close[0]!r}?" if close else None


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered name: its factory (or ``"module:attr"``), help line, install hint and
    whatever else its table records about it (``meta``)."""

    name: str
    target: Callable[..., T] | str
    help: str = ""
    install: str | None = None  # how to get a lazy target's module when importing it fails
    meta: Mapping[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """An ordered name → factory table for one kind of extension (``kind`` names it in errors).

    Args:
        kind: what the names are, for messages ("backend", "scheduling policy", ...).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, target: Callable[..., T] | str, *, help: str = "",
                 install: str | None = None, **meta: Any) -> None:
        """Add ``name``. ``target``: a factory, or ``"module:attr"`` imported on first use.

        ``help`` defaults to the first paragraph of the factory's docstring, on one line (give
        it explicitly for lazy targets: listing names must not import them). ``meta``: anything
        else the table keeps about the entry (read with :meth:`meta`).
        """
        if name in self._entries:
            raise ConfigError(f"{self.kind} {name!r} is registered twice")
        if isinstance(target, str) and ":" not in target:
            raise ConfigError(f"{self.kind} {name!r}: a lazy target is 'module:attr', got {target!r}")
        if not help and not isinstance(target, str):
            help = " ".join((inspect.getdoc(target) or "").split("\n\n")[0].split())
        self._entries[name] = Entry(name, target, help, install, dict(meta))

    # ---- lookup ---------------------------------------------------------------------
    def entry(self, name: str) -> Entry[T]:
        """The entry for ``name``; ConfigError listing the choices if there is none."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: an unhashable "name" from a JSON file
            raise ConfigError(f"unknown {self.kind} {name!r}", hint=self.hint(name)) from None

    def get(self, name: str) -> Callable[..., T]:
        """The factory for ``name``, importing a lazy one (ConfigError if its module is missing)."""
        target = self.entry(name).target
        if not isinstance(target, str):
            return target
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"{self.kind} {name!r} is not available: {exc}", hint=self._entries[name].install) \
                from None
        return getattr(module, attr)

    def make(self, name: str, /, *args: Any, **kwargs: Any) -> T:
        """``get(name)(*args, **kwargs)``."""
        return self.get(name)(*args, **kwargs)

    def help(self, name: str) -> str:
        """The one-line help of ``name``."""
        return self.entry(name).help

    def meta(self, name: str, key: str, default: Any = None) -> Any:
        """What the table recorded as ``key`` about ``name`` (``default`` when nothing)."""
        return self.entry(name).meta.get(key, default)

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._entries)

    def hint(self, name: object) -> str:
        """The hint for an unknown ``name``: the closest registered name, if any, then every choice."""
        close = did_you_mean(name, self.names())
        return f"{close} choose one of: {self.choices()}" if close else f"choose one of: {self.choices()}"

    def choices(self) -> str:
        """The names as ``"a, b, c"`` (for help texts and error hints)."""
        return ", ".join(self._entries)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {self.choices()})"

r"""The built-in program library: names → factories, as ``certa run NAME`` resolves them.

Every program takes the input ``question=``, prompts for ``\boxed{}`` answers and returns an
answer string (or None) that :func:`~certa.algorithms.answers.equivalence.grade` can check. Each
keeps ``state.answers`` for the answer-count policies in :mod:`~certa.algorithms.policies`
(imported here so ``Policy.from_dict`` knows them).

Example:
    >>> sorted(PROGRAMS)
    ['cot', 'mcts', 'rebase', 'sc', 'sc-mcts']
    >>> build("sc", cap=8).knob.cap
    8
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from certa.dsl import CompiledGraph
from certa.runtime.errors import ConfigError

from certa.algorithms import policies as _policies  # noqa: F401 - registers ESC, AC, ... with Policy.from_dict
from certa.algorithms.programs.cot_probe import cot_program
from certa.algorithms.programs.mcts import mcts_program
from certa.algorithms.programs.rebase import rebase_program
from certa.algorithms.programs.sc_mcts import sc_mcts_program
from certa.algorithms.programs.self_consistency import sc_program

__all__ = ["PROGRAMS", "build", "describe"]

PROGRAMS: dict[str, Callable[..., CompiledGraph]] = {
    "cot": cot_program,
    "sc": sc_program,
    "mcts": mcts_program,
    "rebase": rebase_program,
    "sc-mcts": sc_mcts_program,
}
"""Built-in programs; each value is a factory returning a :class:`~certa.dsl.CompiledGraph`."""


def build(name: str, **overrides: Any) -> CompiledGraph:
    """Build the built-in program ``name`` with factory keyword ``overrides``.

    Raises ``ConfigError`` for an unknown name or an option the factory does not take.
    """
    factory = PROGRAMS.get(name)
    if factory is None:
        raise ConfigError(f"unknown program {name!r}", hint=f"built-in programs: {', '.join(sorted(PROGRAMS))}")
    params = inspect.signature(factory).parameters
    named = [p for p, spec in params.items() if spec.kind is not inspect.Parameter.VAR_KEYWORD]
    unknown = [k for k in overrides if k not in named]
    if unknown and len(named) == len(params):
        raise ConfigError(f"program {name!r} has no option {unknown[0]!r}", hint=f"options: {', '.join(named)}")
    try:
        return factory(**overrides)
    except TypeError as exc:  # an option a nested factory (e.g. sc-mcts's MCTS) does not take
        raise ConfigError(f"bad option for program {name!r}: {exc}", hint=f"options: {', '.join(named)}") from None


def describe(name: str) -> str:
    """The first line of a built-in program's factory docstring."""
    if name not in PROGRAMS:
        raise ConfigError(f"unknown program {name!r}", hint=f"built-in programs: {', '.join(sorted(PROGRAMS))}")
    return (inspect.getdoc(PROGRAMS[name]) or "").splitlines()[0]

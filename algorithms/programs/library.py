r"""The built-in program library: names → factories, as ``certa run NAME`` resolves them.

Every program takes the input ``question=``, prompts for ``\boxed{}`` answers and returns an
answer string (or None) that :func:`~certa.algorithms.answers.equivalence.grade` can check. Each
keeps ``state.answers`` for the answer-count policies in :mod:`~certa.algorithms.policies`.
:data:`PROGRAMS` is a :class:`~certa.runtime.registry.Registry` whose entries import their
module on first use, so listing the names (CLI help, ``certa serve``) loads no program; its
``replay`` says which trace replay of :mod:`certa.eval` reproduces the program (None: none can).

Example:
    >>> sorted(PROGRAMS)
    ['cot', 'mcts', 'rebase', 'sc', 'sc-cot', 'sc-mcts']
    >>> describe("sc")
    'self-consistency: sample answers in rounds, majority vote'
    >>> build("sc", cap=8).knob.cap
    8
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from certa.runtime.errors import ConfigError
from certa.runtime.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from certa.dsl import CompiledGraph

__all__ = ["PROGRAMS", "build", "describe"]

PROGRAMS: Registry[CompiledGraph] = Registry("program")
"""Built-in programs; each factory returns a :class:`~certa.dsl.CompiledGraph`."""

_HERE = "certa.algorithms.programs"
# replay=: the trace replay that reproduces the program's decisions from recorded traces (certa.eval: "sc",
# "cot", "sc-cot"), or None where no trace format records what it needs (the tree searches' rewards)
PROGRAMS.register("cot", f"{_HERE}.cot_probe:cot_program",
                  help="chain of thought, probed mid-way for an early answer", replay="cot")
PROGRAMS.register("sc", f"{_HERE}.self_consistency:sc_program",
                  help="self-consistency: sample answers in rounds, majority vote", replay="sc")
PROGRAMS.register("mcts", f"{_HERE}.mcts:mcts_program",
                  help="Monte Carlo tree search over reasoning steps, scored by the model", replay=None)
PROGRAMS.register("rebase", f"{_HERE}.rebase:rebase_program",
                  help="REBASE: reward-balanced tree search over reasoning steps", replay=None)
PROGRAMS.register("sc-mcts", f"{_HERE}.sc_mcts:sc_mcts_program",
                  help="self-consistency whose samples are whole MCTS searches", replay=None)
PROGRAMS.register("sc-cot", f"{_HERE}.sc_cot:sc_cot_program",
                  help="self-consistency over CoT chains, each with its own probe certaindex, stopped together",
                  replay="sc-cot")

def build(name: str, **overrides: Any) -> CompiledGraph:
    """Build the built-in program ``name`` with factory keyword ``overrides``.

    Raises ``ConfigError`` for an unknown name or an option the factory does not take.
    """
    factory = PROGRAMS.get(name)
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
    """The one-line help of a built-in program (``ConfigError`` for an unknown name)."""
    return PROGRAMS.help(name)

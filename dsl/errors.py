"""The DSL's compile errors: a malformed graph raises one of these from ``Graph.compile``.

Every class is a :class:`~certa.runtime.errors.CertaError` (the one base of certa's errors)
with a stable code, listed in ``docs/errors.md``.

Example:
    >>> err = UnknownStepError("edge points to 'smaple'", step="smaple", hint="did you mean 'sample'?")
    >>> err.code
    'CT101'
    >>> str(err)
    "CT101 unknown-step [step=smaple]: edge points to 'smaple' (hint: did you mean 'sample'?)"
"""

from __future__ import annotations

from certa.runtime.errors import CertaError

__all__ = ["ALL_ERRORS", "CompileError", "ConflictingUpdateError", "InvalidGraphError", "MissingCertaindexError", "UnboundedFanoutError",
           "UnboundedLoopError", "UnknownStateKeyError", "UnknownStepError", "UnreachableStepError"]


class CompileError(CertaError):
    """A graph is malformed; raised by ``Graph.compile``."""

    code = "CT100"
    name = "compile-error"


class UnknownStepError(CompileError):
    code, name = "CT101", "unknown-step"


class UnreachableStepError(CompileError):
    code, name = "CT102", "unreachable-step"


class UnboundedLoopError(CompileError):
    code, name = "CT103", "unbounded-loop"


class UnboundedFanoutError(CompileError):
    code, name = "CT104", "unbounded-fanout"


class MissingCertaindexError(CompileError):
    code, name = "CT105", "missing-certaindex"


class UnknownStateKeyError(CompileError):
    code, name = "CT106", "unknown-state-key"


class InvalidGraphError(CompileError):
    code, name = "CT107", "invalid-graph"


class ConflictingUpdateError(CertaError):
    """At run time: two branches of one fan-out wrote the same state field, which has no reducer
    (the later write would silently replace the earlier; LangGraph raises ``InvalidUpdateError``)."""

    code, name = "CT108", "conflicting-update"


ALL_ERRORS: tuple[type[CertaError], ...] = (
    CompileError, UnknownStepError, UnreachableStepError, UnboundedLoopError, UnboundedFanoutError,
    MissingCertaindexError, UnknownStateKeyError, InvalidGraphError, ConflictingUpdateError,
)
"""The DSL's error classes (``docs/errors.md`` lists every code)."""

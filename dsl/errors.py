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

from certa.runtime.errors import CertaError, StepFailedError

__all__ = ["ALL_ERRORS", "ALL_WARNINGS", "CompileError", "CompileWarning", "ConflictingUpdateError",
           "InvalidGraphError", "InvalidJoinError", "InvalidUpdateError", "JoinWithoutFanoutError", "MissingAnswerWarning",
           "MissingCertaindexError", "UnboundedFanoutError", "UnboundedLoopError", "UnhintedRouterWarning", "UnknownStateKeyError",
           "UnknownStepError", "UnreachableStepError"]


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


class InvalidUpdateError(StepFailedError):
    """At run time: a step's update does not fit the state model (a wrong type, or an awaitable
    such as the coroutine of an un-awaited ``ctx.gen``); validated like the model's own fields.
    A subclass of CT201."""

    code, name = "CT113", "invalid-update"


class JoinWithoutFanoutError(CompileError):
    """``g.join(step, after=src)`` where ``src`` never fans out (``fanout=1`` and no ``Send`` targets it)."""

    code, name = "CT109", "join-without-fanout"


class InvalidJoinError(CompileError):
    """A malformed join: the join step is ``after`` itself, the entry, joined twice, or also
    entered per branch from ``after`` by an edge or a router."""

    code, name = "CT110", "invalid-join"


class CompileWarning(UserWarning):
    """A graph that compiles but is probably not what was meant (``warnings.warn`` at compile).

    Example:
        >>> str(MissingAnswerWarning("no @answer", program="g"))
        'CT111 missing-answer [program=g]: no @answer'
    """

    code = "CT100"
    name = "compile-warning"

    def __init__(self, message: str, *, program: str | None = None, step: str | None = None,
                 hint: str | None = None) -> None:
        where = " ".join(f"{k}={v}" for k, v in (("program", program), ("step", step)) if v)
        text = f"{self.code} {self.name}{f' [{where}]' if where else ''}: {message}"
        super().__init__(text + (f" (hint: {hint})" if hint else ""))
        self.program, self.step, self.hint = program, step, hint


class MissingAnswerWarning(CompileWarning):
    """No ``@g.answer`` and no ``answer`` state field: every ``Result.answer`` would be ``None``."""

    code, name = "CT111", "missing-answer"


class UnhintedRouterWarning(CompileWarning):
    """A router with neither a ``Literal[...]`` return hint nor ``destinations=``: compile cannot
    check where it goes (CT101/CT102 are skipped for it)."""

    code, name = "CT112", "router-without-destinations"


ALL_ERRORS: tuple[type[CertaError], ...] = (
    CompileError, UnknownStepError, UnreachableStepError, UnboundedLoopError, UnboundedFanoutError,
    MissingCertaindexError, UnknownStateKeyError, InvalidGraphError, ConflictingUpdateError,
    JoinWithoutFanoutError, InvalidJoinError, InvalidUpdateError,
)
ALL_WARNINGS: tuple[type[CompileWarning], ...] = (CompileWarning, MissingAnswerWarning, UnhintedRouterWarning)
"""The DSL's error classes (``docs/errors.md`` lists every code)."""

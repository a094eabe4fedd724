"""certa's error hierarchy: every error carries a stable code and names where it happened.

Codes are stable strings (documented in ``docs/errors.md``); messages say what went wrong
and, where possible, how to fix it.

Example:
    >>> err = UnknownStepError("edge points to 'smaple'", step="smaple", hint="did you mean 'sample'?")
    >>> err.code
    'CT101'
    >>> str(err)
    "CT101 unknown-step [step=smaple]: edge points to 'smaple' (hint: did you mean 'sample'?)"
"""

from __future__ import annotations


class CertaError(Exception):
    """Base of every certa error. ``code`` is stable; ``program``/``step``/``branch`` locate it."""

    code: str = "CT000"
    name: str = "certa-error"

    def __init__(
        self,
        message: str,
        *,
        program: str | None = None,
        step: str | None = None,
        branch: int | str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.program = program
        self.step = step
        self.branch = branch
        self.hint = hint
        super().__init__(self.__str__())

    def where(self) -> str:
        parts = [f"{k}={v}" for k, v in (("program", self.program), ("step", self.step), ("branch", self.branch)) if v is not None]
        return f" [{' '.join(parts)}]" if parts else ""

    def __str__(self) -> str:
        text = f"{self.code} {self.name}{self.where()}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text

    def __reduce__(self):  # keep errors picklable across process pools
        return (_rebuild, (type(self), self.message, self.program, self.step, self.branch, self.hint))


def _rebuild(cls, message, program, step, branch, hint):
    return cls(message, program=program, step=step, branch=branch, hint=hint)


# ---- compile-time errors (raised by graph.compile) -------------------------------------
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


# ---- run-time errors --------------------------------------------------------------------
class RuntimeFailure(CertaError):
    """A program failed while running."""

    code = "CT200"
    name = "runtime-error"


class StepFailedError(RuntimeFailure):
    code, name = "CT201", "step-failed"


class CertaindexRangeError(RuntimeFailure):
    code, name = "CT202", "certaindex-out-of-range"


class BackendError(RuntimeFailure):
    """The backend failed a request. ``retryable`` tells the runtime whether to retry."""

    code, name = "CT203", "backend-error"

    def __init__(self, message: str, *, retryable: bool = False, **where) -> None:
        self.retryable = retryable
        super().__init__(message, **where)


class RequestAbortedError(RuntimeFailure):
    code, name = "CT204", "request-aborted"


class LimitExceededError(RuntimeFailure):
    """An input is over a configured limit (prompt size, fan-out, tokens)."""

    code, name = "CT205", "limit-exceeded"


class ConfigError(CertaError):
    """A configuration, policy file, trace file or CLI option is invalid."""

    code, name = "CT300", "config-error"


class ModelNotFoundError(ConfigError):
    code, name = "CT301", "model-not-found"


class ModelIntegrityError(ConfigError):
    code, name = "CT302", "model-integrity"


class DatasetError(ConfigError):
    code, name = "CT303", "dataset-error"


class TraceFormatError(ConfigError):
    code, name = "CT304", "trace-format"


ALL_ERRORS: tuple[type[CertaError], ...] = (
    CertaError, CompileError, UnknownStepError, UnreachableStepError, UnboundedLoopError,
    UnboundedFanoutError, MissingCertaindexError, UnknownStateKeyError, InvalidGraphError,
    RuntimeFailure, StepFailedError, CertaindexRangeError, BackendError, RequestAbortedError,
    LimitExceededError, ConfigError, ModelNotFoundError, ModelIntegrityError, DatasetError,
    TraceFormatError,
)

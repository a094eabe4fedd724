"""certa's error base and the runtime's errors: every error carries a stable code and names where it happened.

Codes are stable strings (documented in ``docs/errors.md``); messages say what went wrong
and, where possible, how to fix it. :class:`CertaError` is the one base; each layer owns
the errors it raises: the runtime's are here, the DSL's compile errors in
``certa.dsl.errors``, the evaluation tooling's in ``certa.eval.errors``, the server's in
``certa.serve.errors``.

Example:
    >>> err = StepFailedError("ZeroDivisionError: division by zero", program="sc", step="vote")
    >>> err.code
    'CT201'
    >>> str(err)
    'CT201 step-failed [program=sc step=vote]: ZeroDivisionError: division by zero'
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


class LimitExceededError(RuntimeFailure):
    """An input is over a configured limit (prompt size, fan-out, tokens)."""

    code, name = "CT205", "limit-exceeded"


class CallDepthError(LimitExceededError):
    """A sub-program (``ctx.call``) nested deeper than ``RuntimeLimits.max_call_depth``; the
    message names the chain of program ids."""

    code, name = "CT206", "call-depth-exceeded"


class StepLimitError(LimitExceededError):
    """A program ran more steps than ``RuntimeLimits.max_steps`` (a loop nothing else bounds)."""

    code, name = "CT207", "step-limit-exceeded"


class RequestTimeoutError(BackendError):
    """A backend request got no answer within ``RuntimeLimits.request_timeout`` seconds; it is
    aborted, and retried only if ``RetryPolicy.retry_timeouts``."""

    code, name = "CT208", "request-timeout"


class CheckpointError(RuntimeFailure):
    """A checkpointed thread cannot be saved or resumed: a state or ``Send`` payload that is not
    JSON, another program or other inputs than the thread started with, a thread already running,
    or a checkpoint store that fails; the message names the thread."""

    code, name = "CT220", "checkpoint-error"


class ConfigError(CertaError, ValueError):
    """A configuration, policy file, trace file or CLI option is invalid (also a ``ValueError``)."""

    code, name = "CT300", "config-error"


class ModelNotFoundError(ConfigError):
    code, name = "CT301", "model-not-found"


class ModelIntegrityError(ConfigError):
    code, name = "CT302", "model-integrity"


ALL_ERRORS: tuple[type[CertaError], ...] = (
    CertaError, RuntimeFailure, StepFailedError, CertaindexRangeError, BackendError,
    LimitExceededError, CallDepthError, StepLimitError, RequestTimeoutError, CheckpointError, ConfigError,
    ModelNotFoundError, ModelIntegrityError,
)
"""The runtime's error classes; each layer above lists its own (``certa.dsl.errors``,
``certa.eval.errors``, ``certa.serve.errors``), and ``docs/errors.md`` lists every code."""

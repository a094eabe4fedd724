"""Errors of the reasoning server, each with a stable code and the HTTP status it maps to.

Request-validation failures reuse the runtime's classes where one fits: a knob or token
budget over the server's limit is :class:`~certa.runtime.errors.LimitExceededError`
(CT205, HTTP 400); a bad policy or preset is :class:`~certa.runtime.errors.ConfigError`
(CT300, HTTP 400). The classes below cover what only a server has.

Example:
    >>> err = ServerBusyError("4 programs are running (--max-concurrent 4)", retry_after_s=2)
    >>> err.code, http_status(err), err.retry_after_s
    ('CT411', 429, 2)
    >>> http_status(UnknownModelError("no model 'gpt-4'"))
    404
    >>> http_status(TimeLimitError("ran past 600s")), error_type(TimeLimitError("ran past 600s"))
    (504, 'server_error')
"""

from __future__ import annotations

from certa.dsl.errors import CompileError
from certa.runtime.errors import BackendError, CertaError, ConfigError, LimitExceededError, RuntimeFailure

__all__ = ["BadRequestError", "BodyTimeoutError", "ServerBusyError", "ShuttingDownError", "TimeLimitError",
           "UnauthorizedError", "UnknownModelError", "error_type", "http_status", "no_retry"]


class BadRequestError(ConfigError):
    """The request body is malformed: invalid JSON, a wrong type, an unknown field."""

    code, name = "CT410", "bad-request"

    def __init__(self, message: str, *, param: str | None = None, **where) -> None:
        self.param = param
        super().__init__(message, **where)


class BodyTimeoutError(BadRequestError):
    """The request body did not arrive in full within the server's body timeout
    (``--body-timeout``) after its head: HTTP 408, and the connection is closed."""

    code, name = "CT416", "body-timeout"


class ServerBusyError(LimitExceededError):
    """``max_concurrent`` programs are already running; retry after ``retry_after_s`` seconds."""

    code, name = "CT411", "server-busy"

    def __init__(self, message: str, *, retry_after_s: int = 1, **where) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, **where)


class UnknownModelError(ConfigError):
    """The request names a model (program) this server does not serve."""

    code, name = "CT412", "unknown-model"


class ShuttingDownError(RuntimeFailure):
    """The server is shutting down: new requests are refused, unfinished programs aborted."""

    code, name = "CT413", "shutting-down"


class UnauthorizedError(ConfigError):
    """The request has no API key, or a wrong one (the server runs with ``--api-key``)."""

    code, name = "CT414", "unauthorized"


class TimeLimitError(LimitExceededError):
    """A program ran past the server's per-request wall-time limit (``max_request_s``,
    ``--max-request-seconds``); it was aborted with its backend requests. The server stopped it,
    not a fault of the request: HTTP 504 ``server_error`` (not the client's 400
    ``invalid_request_error``), with ``x-should-retry: false`` since the same request would
    likely run into the limit again (OpenAI's clients honour that header)."""

    code, name = "CT415", "time-limit"


_STATUS: tuple[tuple[type[CertaError], int, str], ...] = (
    (TimeLimitError, 504, "server_error"),  # before LimitExceededError, its base: a server-side stop
    (UnknownModelError, 404, "invalid_request_error"),
    (UnauthorizedError, 401, "invalid_request_error"),
    (BodyTimeoutError, 408, "invalid_request_error"),
    (ServerBusyError, 429, "rate_limit_error"),
    (ShuttingDownError, 503, "server_error"),
    (LimitExceededError, 400, "invalid_request_error"),
    (ConfigError, 400, "invalid_request_error"),
    (CompileError, 400, "invalid_request_error"),
    (BackendError, 502, "server_error"),
)


def no_retry(exc: BaseException) -> bool:
    """Whether a response for ``exc`` should tell clients not to retry (``x-should-retry: false``)."""
    return isinstance(exc, TimeLimitError)


def http_status(exc: BaseException) -> int:
    """The HTTP status for an error raised while serving a request (500 if unexpected)."""
    for cls, status, _ in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def error_type(exc: BaseException) -> str:
    """OpenAI's error ``type`` string for ``exc``."""
    for cls, _, kind in _STATUS:
        if isinstance(exc, cls):
            return kind
    return "server_error"

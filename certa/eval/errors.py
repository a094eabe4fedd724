"""The evaluation tooling's errors: datasets that cannot be read and malformed trace files.

Both are :class:`~certa.runtime.errors.ConfigError` subclasses (a bad input, not a failed
run), with stable codes listed in ``docs/errors.md``.

Example:
    >>> err = TraceFormatError("traces.jsonl:3: not JSON")
    >>> err.code, isinstance(err, ConfigError)
    ('CT304', True)
"""

from __future__ import annotations

from certa.runtime.errors import CertaError, ConfigError

__all__ = ["ALL_ERRORS", "DatasetError", "TraceFormatError"]


class DatasetError(ConfigError):
    """A dataset cannot be found or read, or a reserved split was asked for."""

    code, name = "CT303", "dataset-error"


class TraceFormatError(ConfigError):
    """A trace file is malformed (the message names file and line)."""

    code, name = "CT304", "trace-format"


ALL_ERRORS: tuple[type[CertaError], ...] = (DatasetError, TraceFormatError)
"""The evaluation tooling's error classes (``docs/errors.md`` lists every code)."""

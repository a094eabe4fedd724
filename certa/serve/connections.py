"""Connection limits of ``certa serve``: header, body and idle timeouts, a header-size cap, a connection cap.

uvicorn times out idle keep-alive connections but waits forever for a request's headers, so
a client that sends half a request line holds its connection (and a file descriptor) for
good. :class:`ConnectionLimits` turns on what uvicorn has (``timeout_keep_alive``,
``limit_concurrency``, ``h11_max_incomplete_event_size``) and adds a header timeout: a
connection whose request headers are not complete ``header_timeout_s`` after it opened (or
after its previous response) is closed. ``max_connections`` open connections are served; a
request on one more gets a 503. The request *body* is the app's (:func:`certa.serve.http.create_app`): its
size limit (4 MiB, ``max_body_bytes``) is enforced while it streams in, and a body not complete
``body_timeout_s`` after its head (a client that dribbles it, or stops mid-body) gets a 408 and
the connection closes. ``certa serve`` sets all of these with flags (``docs/serve.md``).

Example:
    >>> limits = ConnectionLimits(header_timeout_s=5)
    >>> sorted(limits.uvicorn_options())
    ['h11_max_incomplete_event_size', 'http', 'limit_concurrency', 'timeout_keep_alive']
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from certa.runtime.errors import ConfigError

__all__ = ["ConnectionLimits", "head_too_large"]


@dataclass(frozen=True)
class ConnectionLimits:
    """``header_timeout_s``: seconds to send a request's headers; ``body_timeout_s``: seconds,
    after the head, to send the whole body (else 408, the app's ``body_timeout_s``);
    ``keep_alive_s``: an idle connection's life between requests; ``max_connections``: open
    connections (and requests) at once, more get 503; ``max_header_bytes``: the largest
    request head (more: 400)."""

    header_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    max_connections: int = 1024
    max_header_bytes: int = 64 << 10
    body_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "keep_alive_s", "max_connections", "max_header_bytes", "body_timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
                raise ConfigError(f"ConnectionLimits.{name} must be a positive finite number, not {v!r}")
        for name in ("max_connections", "max_header_bytes"):
            if not isinstance(getattr(self, name), int):
                raise ConfigError(f"ConnectionLimits.{name} must be a whole number, not {getattr(self, name)!r}")

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for ``uvicorn.Config``."""
        # uvicorn counts the connection asking too (``len(connections) >= limit`` gives 503), so its
        # limit is one over ours: max_connections connections are served, the next one gets a 503
        return {"http": _protocol(self.header_timeout_s, self.max_header_bytes), "timeout_keep_alive": self.keep_alive_s,
                "limit_concurrency": self.max_connections + 1,
                "h11_max_incomplete_event_size": self.max_header_bytes}


def head_too_large(buffered: bytes, max_header_bytes: int) -> bool:
    """Whether the request head at the start of ``buffered`` is over ``max_header_bytes``: its
    blank line (``\\r\\n\\r\\n``, or a bare ``\\n\\n``, as h11 reads it) does not end within them.

    >>> head_too_large(b"GET / HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n" + b"x" * 100, 64)
    False
    >>> head_too_large(b"GET / HTTP/1.1\\r\\nX-Big: " + b"a" * 100 + b"\\r\\n\\r\\n", 64)
    True
    """
    if len(buffered) <= max_header_bytes:
        return False
    return _HEAD_END.search(buffered, 0, max_header_bytes) is None


_HEAD_END = re.compile(rb"\n\r?\n")


def _protocol(header_timeout_s: float, max_header_bytes: int = 64 << 10) -> type:
    """uvicorn's h11 protocol with a header timeout and a head-size cap that also holds when
    the whole head arrives in one read (h11's ``max_incomplete_event_size`` only bounds a head
    still incomplete: a 100 KB head read at once went through)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_overdue, self.cycle)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_overdue(self, cycle: Any) -> None:
            idle = cycle is None or cycle.response_complete  # not mid-request (pipelining arms with one)
            if self.cycle is cycle and idle and not self.transport.is_closing():  # no new request since armed
                self.logger.info("closing a connection that sent no complete request in %.1fs", header_timeout_s)
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            if self.conn.their_state is h11.IDLE and head_too_large(self.conn.trailing_data[0], max_header_bytes):
                self._refuse_head()
                return
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:  # a request's headers arrived
                self._disarm()

        def _refuse_head(self) -> None:
            """400 and close, as uvicorn answers a head h11 found too long while incomplete."""
            self._disarm()
            self.logger.warning("refusing a request head over %d bytes (--max-header-bytes)", max_header_bytes)
            msg = f"the request head is over {max_header_bytes} bytes (the server's --max-header-bytes)".encode()
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
                                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(msg), msg))
            self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers get the same time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol

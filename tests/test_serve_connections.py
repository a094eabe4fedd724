"""Request bodies and connections of ``certa serve`` (issue 20, item 5), over raw loopback
sockets: a chunked body is refused once it passes 4 MiB (not read whole first); half-sent
headers, idle keep-alive connections and oversized heads are cut off; past the connection
cap new requests get 503. Every loop here is bounded."""

from __future__ import annotations

import select
import socket
import time

import pytest

pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")

import certa as ct  # noqa: E402
from certa.runtime.errors import ConfigError  # noqa: E402
from certa.serve import Server  # noqa: E402
from certa.serve.connections import ConnectionLimits  # noqa: E402
from certa.serve.launch import start_background  # noqa: E402


def server() -> Server:
    return Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."]), max_knob=8)


def connect(bg, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", bg.port), timeout=timeout)
    return s


def read_response(s: socket.socket, deadline_s: float = 5.0) -> bytes:
    """Bytes until the peer closes or the head and a little body arrived (bounded)."""
    out, end = b"", time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        out += chunk
        if b"\r\n\r\n" in out and (b"\r\n0\r\n" in out or b'"}}' in out or b"}" in out.split(b"\r\n\r\n", 1)[1]):
            break
    return out


def closed_within(s: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``s`` (None if still open after ``seconds``)."""
    t0 = time.monotonic()
    s.settimeout(seconds)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return time.monotonic() - t0
    except socket.timeout:
        return None
    except ConnectionResetError:
        return time.monotonic() - t0


def test_chunked_body_over_the_limit_is_refused_while_it_streams():
    with start_background(server()) as bg:
        s = connect(bg)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * (256 << 10)
        framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
        sent, answer = 0, b""
        s.settimeout(2.0)
        while sent < (64 << 20):  # at most 64 MiB; the server should answer after 4 MiB
            if select.select([s], [], [], 0)[0]:
                answer += s.recv(65536)
                break
            try:
                s.sendall(framed)
            except (OSError, socket.timeout):  # the server stopped reading: its answer is waiting
                break
            sent += len(chunk)
        s.settimeout(5.0)
        if b"\r\n\r\n" not in answer:
            try:
                s.sendall(b"0\r\n\r\n")
            except OSError:
                pass
        end = time.monotonic() + 5
        while b"over the limit" not in answer and time.monotonic() < end:
            try:
                data = s.recv(65536)
            except (OSError, socket.timeout):
                break
            if not data:
                break
            answer += data
        s.close()
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"over the limit" in answer
        assert sent < (12 << 20), f"the server read {sent >> 20} MiB before refusing a 4 MiB limit"


def test_half_sent_headers_are_cut_off_after_the_header_timeout():
    with start_background(server(), connections=ConnectionLimits(header_timeout_s=0.5)) as bg:
        held = [connect(bg) for _ in range(5)]
        for s in held:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n")  # never finished
        slow = connect(bg)  # a slowloris: a byte at a time, never a full head
        t0 = time.monotonic()
        closed = None
        slow.settimeout(0.1)
        while time.monotonic() - t0 < 3.0:
            try:
                slow.sendall(b"X")
                if slow.recv(1) == b"":
                    closed = time.monotonic() - t0
                    break
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = time.monotonic() - t0
                break
        waits = [closed_within(s, 3.0) for s in held]
        assert all(w is not None for w in waits), "a half-sent request held its connection past the timeout"
        assert closed is not None and closed < 2.5
        for s in (*held, slow):
            s.close()
        s = connect(bg)  # a complete request still works
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(s).startswith(b"HTTP/1.1 200")
        s.close()


def test_idle_keep_alive_connection_is_closed():
    with start_background(server(), connections=ConnectionLimits(keep_alive_s=0.5, header_timeout_s=30)) as bg:
        s = connect(bg)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(s).startswith(b"HTTP/1.1 200")
        waited = closed_within(s, 3.0)
        assert waited is not None and waited < 2.5
        s.close()


def test_connection_cap_gives_503_then_recovers():
    with start_background(server(), connections=ConnectionLimits(max_connections=4, header_timeout_s=30)) as bg:
        held = [connect(bg) for _ in range(4)]
        time.sleep(0.2)
        s = connect(bg)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(s).startswith(b"HTTP/1.1 503")
        s.close()
        for h in held:
            h.close()
        time.sleep(0.2)
        s = connect(bg)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(s).startswith(b"HTTP/1.1 200")
        s.close()


def test_oversized_request_head_is_refused():
    with start_background(server(), connections=ConnectionLimits(max_header_bytes=8 << 10)) as bg:
        s = connect(bg)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: ")
        try:
            for _ in range(8):  # a head that grows past 8 KiB before it ends
                time.sleep(0.05)
                s.sendall(b"a" * (4 << 10))
            s.sendall(b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_response(s)
        assert answer.startswith(b"HTTP/1.1 400") or answer == b""
        s.close()


def test_limits_are_checked():
    with pytest.raises(ConfigError, match="header_timeout_s"):
        ConnectionLimits(header_timeout_s=0)
    with pytest.raises(ConfigError, match="max_connections"):
        ConnectionLimits(max_connections=float("inf"))

"""``certa serve``'s connection flags reach the server (issue 20, item 5): ``--header-timeout``,
``--body-timeout``, ``--keep-alive-timeout``, ``--max-connections``, ``--max-header-bytes``.

In process, a stub ``run`` records the :class:`ConnectionLimits` the CLI built (every flag, the
defaults, and bad values refused naming the flag); one real ``certa serve`` process on the
scripted backend then shows the flags at work over raw loopback sockets: a connection past the
cap gets a 503, an idle one is closed after the keep-alive timeout, a stalled body gets a 408.
"""

from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")

from certa.cli import app  # noqa: E402
from certa.serve import launch  # noqa: E402
from certa.serve.connections import ConnectionLimits  # noqa: E402
from .conftest import wait_for_serve_port  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
runner = CliRunner()


@pytest.fixture
def launched(monkeypatch):
    """What ``certa serve`` passes to ``run`` (nothing is served)."""
    calls: list[dict] = []
    monkeypatch.setattr(launch, "run", lambda server, host, port, **kw: calls.append(kw))
    return calls


def test_connection_flags_reach_the_server(launched):
    r = runner.invoke(app, ["serve", "--backend", "scripted", "--header-timeout", "2.5", "--body-timeout", "7",
                            "--keep-alive-timeout", "1.5", "--max-connections", "12", "--max-header-bytes", "4096"])
    assert r.exit_code == 0, r.output
    limits = launched[0]["connections"]
    assert limits == ConnectionLimits(header_timeout_s=2.5, body_timeout_s=7.0, keep_alive_s=1.5,
                                      max_connections=12, max_header_bytes=4096)
    opts = limits.uvicorn_options()
    assert (opts["timeout_keep_alive"], opts["limit_concurrency"], opts["h11_max_incomplete_event_size"]) == (
        1.5, 13, 4096)


def test_connection_flag_defaults_are_the_documented_ones(launched):
    r = runner.invoke(app, ["serve", "--backend", "scripted"])
    assert r.exit_code == 0, r.output
    assert launched[0]["connections"] == ConnectionLimits() == ConnectionLimits(
        header_timeout_s=10, body_timeout_s=30, keep_alive_s=5, max_connections=1024, max_header_bytes=64 << 10)
    docs = (ROOT / "docs" / "serve.md").read_text()
    for flag, default in [("--header-timeout", "10"), ("--body-timeout", "30"), ("--keep-alive-timeout", "5"),
                          ("--max-connections", "1024"), ("--max-header-bytes", "65536")]:
        assert re.search(rf"`{flag} [A-Z]+`[^|]*\| {default} \|", docs), f"docs/serve.md does not list {flag}"


@pytest.mark.parametrize("flag,value", [("--header-timeout", "0"), ("--body-timeout", "-1"),
                                        ("--keep-alive-timeout", "inf"), ("--max-connections", "0"),
                                        ("--max-header-bytes", "10")])
def test_bad_connection_flags_are_one_coded_error(launched, flag, value):
    r = runner.invoke(app, ["serve", "--backend", "scripted", flag, value])
    assert r.exit_code == 2 and not launched, r.output
    assert "CT300" in r.output and flag in r.output and "Traceback" not in r.output


def _request(port: int, raw: bytes, seconds: float = 10.0) -> tuple[bytes, float | None]:
    """Send ``raw`` on a new connection; what comes back until the server closes it, and when."""
    s = socket.create_connection(("127.0.0.1", port), timeout=seconds)
    s.sendall(raw)
    out, t0 = b"", time.monotonic()
    try:
        while data := s.recv(65536):
            out += data
    except socket.timeout:
        return out, None
    finally:
        s.close()
    return out, time.monotonic() - t0


def test_certa_serve_enforces_its_connection_flags():
    proc = subprocess.Popen([sys.executable, "-m", "certa", "serve", "--backend", "scripted", "--port", "0",
                             "--max-knob", "8", "--log-level", "info", "--max-connections", "2",
                             "--keep-alive-timeout", "0.5", "--body-timeout", "0.5", "--header-timeout", "60"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        port = wait_for_serve_port(proc, 60)
        health = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
        # --keep-alive-timeout 0.5: answered, then the idle connection is closed
        answer, closed_after = _request(port, health)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert closed_after is not None and closed_after < 3.0  # the default would be 5 s
        # --body-timeout 0.5: a body that stops midway gets a 408 and the connection closes
        answer, closed_after = _request(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                                              b"Content-Length: 100\r\n\r\n{\"model\"")
        assert answer.startswith(b"HTTP/1.1 408") and b"CT416" in answer, answer[:300]
        assert closed_after is not None and closed_after < 5.0
        # --max-connections 2: with one other connection open a request is served, with two it gets 503
        # (asyncio accepts in order, so the held connections are open before the next one's request)
        held = [socket.create_connection(("127.0.0.1", port), timeout=10)]
        try:
            answer, _ = _request(port, health)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            answer, _ = _request(port, health)
            assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        finally:
            for s in held:
                s.close()
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("flag", ["--max-token-budget", "--max-tokens"])
def test_the_token_budget_flag_and_its_old_name_reach_the_server(monkeypatch, flag):
    """``--max-token-budget`` (issue 39: ``max_tokens`` names a request's budget only); the old
    ``--max-tokens`` still works."""
    servers = []
    monkeypatch.setattr(launch, "run", lambda server, host, port, **kw: servers.append(server))
    r = runner.invoke(app, ["serve", "--backend", "scripted", flag, "777"])
    assert r.exit_code == 0, r.output
    assert servers[0].max_token_budget == 777


def test_the_sim_preset_flag_and_its_old_name(monkeypatch):
    servers = []
    monkeypatch.setattr(launch, "run", lambda server, host, port, **kw: servers.append(server))
    for flag in ("--sim-preset", "--preset"):
        r = runner.invoke(app, ["serve", "--backend", "sim", flag, "h100-llama-3.1-8b"])
        assert r.exit_code == 0, r.output
    assert [s.runtime.backend.preset.name for s in servers] == ["h100-llama-3.1-8b"] * 2
    r = runner.invoke(app, ["serve", "--backend", "scripted", "--sim-preset", "h100-llama-3.1-8b"])
    assert r.exit_code == 2 and "--sim-preset and --speed are options of --backend sim" in r.output


def test_server_max_tokens_is_the_deprecated_name_of_max_token_budget():
    import certa as ct
    from certa.serve import Server
    with pytest.warns(DeprecationWarning, match="max_token_budget"):
        server = Server("sc", ct.ScriptedBackend(), max_tokens=500)
    assert server.max_token_budget == 500

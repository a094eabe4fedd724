"""Streaming clients that hang up at the moment a certaindex event fires (issue 20, item 1).

On Python 3.10/3.11 ``asyncio.wait_for`` returns the inner result instead of raising when a
cancel arrives in the same loop turn as the awaited event; a stream that waited that way
swallowed the disconnect and its program decoded on to its cap. These tests disconnect many
streams, each timed against the program's certaindex events (0–3 loop turns after one fires),
and require that every program and every backend request is gone afterwards.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest

import certa as ct
from certa.algorithms.programs.library import build
from certa.serve import Server
from certa.serve.format import Formatter

http = pytest.importorskip("certa.serve.http", reason="starlette is not installed (pip install 'certa[serve]')")


def disagree(req) -> str:
    """Five answers in turn: never a majority, so the program would run on to its (large) cap."""
    return f"so \\boxed{{{(req.seed or 0) % 5}}}"


def backend(latency: float = 0.002) -> ct.ScriptedBackend:
    return ct.ScriptedBackend(disagree, latency=latency)


def server_for(b: ct.ScriptedBackend) -> Server:
    return Server({"sc": build("sc", branches_per_round=2, cap=1000, max_tokens=64)}, b)


async def _hop(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _one_disconnect(server: Server, kind: str, hops: int, nth_event: int) -> bool:
    """Stream one request through the ASGI layer; the client disconnects ``hops`` loop turns
    after the program's ``nth_event``-th ``kind`` event (``request_done``: the turn before a
    certaindex event fires). True if the handler returned."""
    stream = server.stream("q", heartbeat_s=5.0, progress=True)
    fmt = Formatter("chat", request_id=stream.request_id, model="sc", created=0)
    app = http._EventStream(stream, fmt, include_usage=False)
    gone = asyncio.get_running_loop().create_future()
    seen = 0

    def on_event(ev) -> None:
        nonlocal seen
        if ev.kind == kind and ev.program_id == stream._job.program.program_id:
            seen += 1
            if seen == nth_event and not gone.done():
                if hops == 0:
                    gone.set_result({"type": "http.disconnect"})
                else:
                    asyncio.ensure_future(_hop(hops - 1)).add_done_callback(
                        lambda _: gone.done() or gone.set_result({"type": "http.disconnect"}))

    unsubscribe = server.runtime.events.subscribe(on_event)

    def receive() -> asyncio.Future:  # awaited by the app: the disconnect lands on the turn it is set
        return gone

    async def send(message: dict) -> None:  # a dead socket: uvicorn drops what is sent after a disconnect
        pass

    try:
        handler = asyncio.ensure_future(app({"type": "http"}, receive, send))
        done, _ = await asyncio.wait({handler}, timeout=1.0)
        if not done:  # hung: abort its program so the next trial gets the CPU
            stream._job.task.cancel()
            await asyncio.wait({handler}, timeout=1.0)
        return bool(done)
    finally:
        unsubscribe()


async def test_60_disconnects_timed_against_certaindex_events_leave_nothing_running():
    b = backend()
    server = server_for(b)
    try:
        hung = []
        for i in range(60):
            kind = ("request_done", "certaindex")[i % 2]
            if not await _one_disconnect(server, kind, hops=(i // 2) % 4, nth_event=2 + (i // 8) % 3):
                hung.append((kind, (i // 2) % 4))
        assert hung == [], f"{len(hung)} of 60 stream handlers did not end after their client left"
        assert server.running == 0
        assert b.live_rids() == set()
        assert server.metrics()["programs_finished"] == {"cancelled": 60}
    finally:
        await server.shutdown(0)


def test_50_http_disconnects_timed_against_events_leave_no_program_or_request():
    """The same over real sockets (uvicorn on loopback): each client reads progress chunks
    (one per certaindex event) and hangs up a random fraction of a round after one."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from certa.serve.launch import start_background

    b = backend(latency=0.004)
    server = server_for(b)
    rng = random.Random(20)
    body = {"model": "sc", "stream": True, "messages": [{"role": "user", "content": "q"}]}
    with start_background(server) as bg, httpx.Client(base_url=bg.url, timeout=10) as client:
        for i in range(50):
            with client.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                progress = 0
                for line in r.iter_lines():
                    if '"certa"' in line:
                        progress += 1
                        if progress >= 1 + i % 3:
                            time.sleep(rng.uniform(0, 0.006))
                            break
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            health = client.get("/health").json()
            if health["programs_running"] == 0 and not b.live_rids():
                break
            time.sleep(0.02)
        assert client.get("/health").json()["programs_running"] == 0
        assert b.live_rids() == set()
        assert server.metrics()["programs_finished"] == {"cancelled": 50}

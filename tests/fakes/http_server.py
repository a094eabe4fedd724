"""A minimal asyncio HTTP/1.1 server for tests: one request per connection, loopback only.

Handlers are ``async (FakeRequest) -> Reply``. A reply with ``stream`` set is sent as
server-sent events until the iterator ends or the client disconnects (then the iterator
is closed, so the fake engine behind it sees the disconnect like a real server does).

Example::

    async def handler(req):
        return Reply(200, {"ok": True})
    server = await FakeHTTPServer(handler).start()
    ...  # talk to server.url
    await server.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able, or bytes
    headers: dict[str, str] = field(default_factory=dict)
    stream: AsyncIterator[str] | None = None  # SSE data payloads


Handler = Callable[[FakeRequest], Awaitable[Reply]]
_REASONS = {200: "OK", 307: "Temporary Redirect", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


class FakeHTTPServer:
    """Serves ``handler`` on 127.0.0.1 (an ephemeral port); ``requests`` records every request."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[FakeRequest] = []
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self.url = ""

    async def start(self, port: int = 0) -> "FakeHTTPServer":
        """Listen on 127.0.0.1:``port`` (0: an ephemeral port); a closed server may start again."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port, reuse_address=True)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            req = await self._read(reader)
            if req is not None:
                self.requests.append(req)
                await self._respond(req, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _read(reader: asyncio.StreamReader) -> FakeRequest | None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return FakeRequest(method, path, headers, body)

    async def _respond(self, req: FakeRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reply = await self.handler(req)
        head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.stream is None:
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            await writer.drain()
            return
        head += ["Content-Type: text/event-stream"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())

        async def watch() -> None:  # the client closing its end = disconnect
            with contextlib.suppress(Exception):
                await reader.read()
            req.disconnected.set()

        watcher = asyncio.ensure_future(watch())
        stream = reply.stream
        try:
            async for payload in stream:
                if req.disconnected.is_set():
                    break
                writer.write(f"data: {payload}\n\n".encode())
                await writer.drain()
            else:
                writer.write(b"data: [DONE]\n\n")
                await writer.drain()
        except ConnectionError:
            req.disconnected.set()
        finally:
            watcher.cancel()
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

"""The ASGI app: OpenAI-compatible routes over one :class:`~certa.serve.Server` (Starlette).

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``
(``/v1/models/{id}``), ``GET /health``, ``GET /metrics`` (Prometheus text). Every response
carries ``X-Request-Id`` (the client's, if it sent a sane one). Errors use OpenAI's shape
``{"error": {"message", "type", "param", "code"}}`` with certa's error code. A request body
must arrive within ``body_timeout_s`` of the handler starting to read it (a client that dribbles
it or stops mid-body gets a 408, CT416, and its connection is closed). A client that
disconnects — mid-stream or while waiting for a plain response — aborts its program and
every backend request the program has in flight. The app holds no state of its own: build
one per Server with :func:`create_app`.

Example:
    >>> from certa.serve import Server
    >>> app = create_app(Server("sc", "scripted"))
    >>> sorted(r.path for r in app.routes)[:3]
    ['/health', '/metrics', '/v1/chat/completions']
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from certa.runtime.errors import CertaError

from certa.serve.completion import Completion, Heartbeat, Progress
from certa.serve.errors import BadRequestError, BodyTimeoutError, error_type, http_status, no_retry
from certa.serve.format import DONE, KEEPALIVE, Formatter, error_body, log_safe, sse
from certa.serve.schemas import ChatRequest, CompletionRequest, parse_request
from certa.serve.server import Server
from certa.serve.stream import CompletionStream

__all__ = ["create_app"]

log = logging.getLogger("certa.serve")
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no")]


def create_app(server: Server, *, shutdown_timeout: float = 30.0, heartbeat_s: float = 15.0,
               max_body_bytes: int = 4 << 20, body_timeout_s: float | None = 30.0, api_keys: Sequence[str] = (),
               public_metrics: bool = False) -> Starlette:
    """The ASGI app for ``server``. On shutdown it lets running programs finish for up to
    ``shutdown_timeout`` seconds, then aborts them; ``heartbeat_s``: SSE keep-alive comments.
    ``max_body_bytes``/``body_timeout_s``: a request body's size and the seconds it may take to
    arrive (``None``: no limit on time; over either, the request is refused).
    ``api_keys``: if any, every route but ``/health`` (and ``/metrics`` when
    ``public_metrics``) needs ``Authorization: Bearer KEY`` (see :mod:`certa.serve.auth`)."""
    api = _Api(server, heartbeat_s, max_body_bytes, body_timeout_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        yield
        await server.shutdown(shutdown_timeout)

    routes = [Route("/v1/chat/completions", api.chat, methods=["POST"]),
              Route("/v1/completions", api.text, methods=["POST"]),
              Route("/v1/models", api.models, methods=["GET"]),
              Route("/v1/models/{model:path}", api.model, methods=["GET"]),
              Route("/health", api.health, methods=["GET"]),
              Route("/metrics", api.metrics, methods=["GET"])]
    middleware = [Middleware(RequestIdMiddleware)]
    if api_keys:
        from certa.serve.auth import ApiKeyMiddleware
        middleware.append(Middleware(ApiKeyMiddleware, keys=api_keys, public_metrics=public_metrics))
    return Starlette(routes=routes, lifespan=lifespan, middleware=middleware)


class RequestIdMiddleware:
    """Honour a sane ``X-Request-Id`` (else make one), expose it as ``request.state.request_id``
    and return it on the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = given if _SANE_ID.fullmatch(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)


def _error(exc: BaseException, request_id: str) -> JSONResponse:
    status = http_status(exc)
    if isinstance(exc, CertaError):
        msg = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
        body = error_body(msg, error_type(exc), exc.code, getattr(exc, "param", None))
        log.info("request_id=%s status=%d error=%s %s", request_id, status, exc.code, log_safe(msg))
    else:
        body = error_body(f"internal error ({type(exc).__name__}); request id {request_id}", "server_error", None)
        log.error("request_id=%s status=500 internal error", request_id, exc_info=exc)
    headers = {"Retry-After": str(exc.retry_after_s)} if hasattr(exc, "retry_after_s") else None
    if isinstance(exc, BodyTimeoutError):
        headers = {"Connection": "close"}  # the rest of the body is not waited for: the connection ends
    elif no_retry(exc):
        headers = {"x-should-retry": "false"}  # a server-side stop the same request would meet again
    return JSONResponse(body, status_code=status, headers=headers)


def _check_unicode(data: Any) -> None:
    """JSON may escape a lone surrogate (``"\\ud800"``); no text with one can be encoded, so
    refuse it here (400) rather than fail later (500)."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequestError("the request has a lone surrogate (\\ud800-\\udfff): not valid Unicode text") from None


async def _within(work: Awaitable[Any], seconds: float | None, overdue: Callable[[], Exception]) -> Any:
    """``await work``, but raise ``overdue()`` if it takes over ``seconds`` (``None``: no limit).
    Not ``asyncio.wait_for``/``asyncio.timeout``: the first can swallow a cancel on 3.10/3.11
    and the second is 3.11+; a cancel of the caller cancels ``work`` too."""
    if seconds is None:
        return await work
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task}, timeout=seconds)
    finally:
        if not task.done():
            task.cancel()
    if not task.done() or task.cancelled():
        await asyncio.gather(task, return_exceptions=True)
        raise overdue()
    return task.result()


async def _disconnected(receive: Receive) -> None:
    """Returns when the client goes away (call only after the body has been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _race_disconnect(work: asyncio.Future, receive: Receive, *,
                           on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
    """Wait for ``work`` or the client's disconnect, whichever comes first, then cancel both;
    ``on_stop`` runs after the cancel and before both are joined."""
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (work, gone):
            t.cancel()
        if on_stop is not None:
            await on_stop()
        await asyncio.gather(work, gone, return_exceptions=True)


class _Api:
    def __init__(self, server: Server, heartbeat_s: float, max_body_bytes: int, body_timeout_s: float | None) -> None:
        self.server, self.heartbeat_s, self.max_body_bytes = server, heartbeat_s, max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def chat(self, request: Request) -> Any:
        return await self._handle(request, ChatRequest, "chat")

    async def text(self, request: Request) -> Any:
        return await self._handle(request, CompletionRequest, "text")

    async def _handle(self, request: Request, schema: type, kind: str) -> Any:
        rid = request.state.request_id
        try:
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_body_bytes:  # refuse before reading it
                raise BadRequestError(f"the request body has {declared} bytes, over the limit of {self.max_body_bytes}")
            body = await _within(self._read_body(request), self.body_timeout_s, lambda: BodyTimeoutError(
                f"the request body did not arrive within {self.body_timeout_s:g} s of its head (the server's "
                "body timeout)"))
            try:
                data = json.loads(body)
            except (ValueError, RecursionError):
                raise BadRequestError("the request body is not valid JSON") from None
            _check_unicode(data)
            req = parse_request(schema, data)
            question = req.question()
        except ClientDisconnect:  # gone mid-body: nothing to answer, nothing started
            self.server.stats.rejected("disconnected")
            log.info("request_id=%s client disconnected before its request body arrived", rid)
            return Response(status_code=499)  # never sent: the connection is closed
        except Exception as exc:  # noqa: BLE001 - refused before the server saw it: count it here
            self.server.stats.rejected("body_timeout" if isinstance(exc, BodyTimeoutError) else "bad_request")
            return _error(exc, rid)
        try:
            opts = {"model": req.model, "request_id": rid, "max_tokens": req.budget(), "seed": req.seed,
                    "certa": req.certa}  # validated once, here
            fmt = Formatter(kind, request_id=rid, model=req.model, created=int(time.time()))  # type: ignore[arg-type]
            if req.stream:
                stream = self.server.stream(question, heartbeat_s=self.heartbeat_s, progress=req.certa.progress,
                                            **opts)
                return _EventStream(stream, fmt, include_usage=req.include_usage())
            return _Plain(self.server, question, opts, fmt)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an OpenAI-shaped error
            return _error(exc, rid)

    async def _read_body(self, request: Request) -> bytes:
        """The body, refused as soon as it passes the limit (a chunked body has no Content-Length
        to check first, so it is counted as it streams in, never held whole)."""
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BadRequestError(f"the request body has over {self.max_body_bytes} bytes, over the limit of "
                                      f"{self.max_body_bytes}")
            chunks.append(chunk)
        return b"".join(chunks)

    async def models(self, request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [self._model(m) for m in self.server.models]})

    async def model(self, request: Request) -> JSONResponse:
        name = request.path_params["model"]
        if name not in self.server.models:
            from certa.serve.errors import UnknownModelError
            return _error(UnknownModelError(f"model {name!r} is not served here",
                                            hint=f"models: {', '.join(self.server.models)}"), request.state.request_id)
        return JSONResponse(self._model(name))

    def _model(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": int(self.server.started), "owned_by": "certa"}

    async def health(self, request: Request) -> JSONResponse:
        closing = self.server.closing
        return JSONResponse({"status": "shutting_down" if closing else "ok", "programs_running": self.server.running,
                             "models": self.server.models}, status_code=503 if closing else 200)

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(self.server.prometheus(), media_type="text/plain; version=0.0.4; charset=utf-8")


class _Plain:
    """A non-streaming completion, raced against the client's disconnect."""

    def __init__(self, server: Server, question: str, opts: dict[str, Any], fmt: Formatter) -> None:
        self.server, self.question, self.opts, self.fmt = server, question, opts, fmt

    async def _run(self) -> Response:
        try:
            c = await self.server.complete(self.question, **self.opts)
        except Exception as exc:  # noqa: BLE001 - likewise
            return _error(exc, self.opts["request_id"])
        return JSONResponse(self.fmt.response(c))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        work = asyncio.ensure_future(self._run())
        await _race_disconnect(work, receive)
        if work.cancelled():
            log.info("request_id=%s client disconnected: program aborted", self.opts["request_id"])
            return
        await work.result()(scope, receive, send)


class _EventStream:
    """A streaming completion as server-sent events, raced against the client's disconnect."""

    def __init__(self, stream: CompletionStream, fmt: Formatter, *, include_usage: bool) -> None:
        self.stream, self.fmt, self.include_usage = stream, fmt, include_usage

    async def _pump(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})

        async def emit(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        await emit(sse(self.fmt.start()))
        try:
            async for ev in self.stream:
                if isinstance(ev, Progress):
                    await emit(sse(self.fmt.progress(ev)))
                elif isinstance(ev, Heartbeat):
                    await emit(KEEPALIVE)
                elif isinstance(ev, Completion):
                    for chunk in self.fmt.final(ev, self.include_usage):
                        await emit(sse(chunk))
        except Exception as exc:  # noqa: BLE001 - the status line is gone: report in-band, as OpenAI does
            err = json.loads(_error(exc, self.stream.request_id).body)
            await emit(sse(err))
        await emit(DONE)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump = asyncio.ensure_future(self._pump(send))
        # on_stop aborts the program first: the pump then ends even if it missed its cancel
        await _race_disconnect(pump, receive, on_stop=self.stream.aclose)
        if pump.cancelled() or pump.exception() is not None:
            log.info("request_id=%s client disconnected mid-stream: program aborted", self.stream.request_id)

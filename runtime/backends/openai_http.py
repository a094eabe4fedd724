"""OpenAIBackend: any OpenAI-compatible server (llama.cpp, vLLM, SGLang, ...) over HTTP.

Requests stream (SSE), so ``abort(rid)`` or cancelling the awaiting task closes the stream
at once; servers stop decoding when the client disconnects. Token counts come from the
streamed ``usage`` (``stream_options.include_usage``) when the server sends it, otherwise
from the streamed chunks (prompt tokens are then estimated at ~4 bytes a token). Several
worker URLs (``urls=``) are routed by program (rendezvous hash of ``program_id``, with
health checks and failover: :mod:`certa.runtime.backends.worker_pool`) so a program's
branches, chunks and probes share one server's prefix cache; every request also carries
``X-SMG-Routing-Key: <program>`` for a gateway in front. Sequences are the generic
:class:`~certa.runtime.backends.base.ChunkedSequence` (no native rollback over HTTP).

Only configured hosts are ever contacted (see :mod:`.http_common`). Needs ``httpx``
(``pip install 'certa[http]'``).

Example (routing and URLs need no server):
    >>> from certa.runtime.types import GenRequest
    >>> b = OpenAIBackend(urls=["http://127.0.0.1:8001", "http://127.0.0.1:8002"], model="m")
    >>> b.api_base(b.workers[0])
    'http://127.0.0.1:8001/v1'
    >>> first = b.route(GenRequest(prompt="", program_id="p1", rid="p1-s0-b0"))
    >>> b.route(GenRequest(prompt="", program_id="p1", rid="p1-s0-b7")) == first   # same program, same worker
    True

Generating (needs a server, so not run as a doctest)::

    backend = OpenAIBackend(base_url="http://127.0.0.1:8000", api_key=None)
    out = await backend.generate(GenRequest(prompt="2+2=", max_tokens=4, rid="p1-s0-b0",
                                            program_id="p1"))
    out.text, out.tokens, out.finish_reason
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from certa.runtime.errors import BackendError
from certa.runtime.types import Capabilities, GenRequest, GenResult, ScoreRequest, ScoreResult
from certa.runtime.backends.http_common import (StreamingBackend, StreamState, affinity_key, iter_sse, make_client,
                                                normalise_workers, probs_from_top, resolve_urls, routing_header,
                                                server_abort_error, status_error, stream_error, transport_error, where)
from certa.runtime.backends.openai_wire import parse_chat, parse_completion, request_body, usage
from certa.runtime.backends.worker_pool import WorkerPool

@dataclass(slots=True)
class _Live:
    worker: str
    task: asyncio.Task | None = None
    sent: bool = False  # the request reached the server (not just a client-side queue)
    aborted: bool = False


class _Unreachable(Exception):
    """A worker refused the connection before anything was sent (internal: triggers failover)."""

    def __init__(self, error: BackendError) -> None:
        super().__init__(str(error))
        self.error = error


Parser = Callable[[dict, StreamState], None]
__all__ = ["OpenAIBackend", "StreamState", "Parser"]


class OpenAIBackend(StreamingBackend):
    """Backend for OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

    Args:
        base_url: the server's URL (one server). A URL with no path gets ``/v1``.
        urls: several worker URLs instead (client-side routing by program, with failover).
        model: model name to send; ``None`` asks each worker's ``/models`` once.
        api_key: sent as ``Authorization: Bearer``; never logged.
        timeout: seconds allowed between streamed bytes (and for connecting, up to 10 s).
        extra_body: fields merged into every request body (server-specific extras).
        allowed_hosts: hosts that may be contacted; default: the hosts of ``base_url``.
        stream_usage: ask for ``stream_options.include_usage`` (turn off for servers that
            reject it).
        score_top_logprobs: top logprobs requested by ``score``.
        health_interval: seconds between health probes of each worker (several workers
            only; ``None``: no probes, workers are marked down only by failed requests).
    """

    def __init__(
        self,
        base_url: str | Sequence[str] | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        extra_body: Mapping[str, Any] | None = None,
        allowed_hosts: Iterable[str] | None = None,
        *,
        urls: str | Sequence[str] | None = None,
        stream_usage: bool = True,
        score_top_logprobs: int = 5,
        health_interval: float | None = 2.0,
    ) -> None:
        workers, self._guard = normalise_workers(resolve_urls(type(self).__name__, base_url, urls), allowed_hosts)
        self.pool = WorkerPool(workers, probe=self._probe, interval=health_interval)
        self.model = model
        self.timeout = float(timeout)
        self.extra_body = dict(extra_body or {})
        self.stream_usage = stream_usage
        self.score_top_logprobs = score_top_logprobs
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._models: dict[str, str | None] = {}
        self._live: dict[str, _Live] = {}
        self._logprob_score: bool | None = None  # None: untried
        self._bg: set[asyncio.Future] = set()
        self.capabilities = Capabilities(score=True, logprobs=True, streaming=True, name="openai")

    @property
    def workers(self) -> list[str]:
        """The worker URLs (routing reads them from :attr:`pool`; the host guard checks every send)."""
        return self.pool.workers

    @workers.setter
    def workers(self, urls: list[str]) -> None:
        self.pool.workers = list(urls)

    def __repr__(self) -> str:  # never shows the api key
        return f"{type(self).__name__}(workers={self.workers!r}, model={self.model!r})"

    # ---- plumbing -------------------------------------------------------------------------
    def _http(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = make_client(self.timeout, self._headers)
            self._client_loop = loop
        return self._client

    @staticmethod
    def api_base(worker: str) -> str:
        """The OpenAI API root of a worker URL (``/v1`` added when the URL has no path)."""
        return worker if worker.split("://", 1)[1].count("/") else worker + "/v1"

    def route(self, req: Any) -> str:
        """The worker that serves ``req`` (same program → same worker, while it is healthy)."""
        return self.pool.route(affinity_key(req)) or self.workers[0]

    def health_url(self, worker: str) -> str:
        """What a health probe GETs (OpenAI-compatible servers: the model list)."""
        return self.api_base(worker) + "/models"

    async def _probe(self, worker: str) -> bool:
        url = self._guard.check(self.health_url(worker))
        resp = await self._http().get(url, timeout=min(2.0, self.timeout))
        return resp.status_code == 200

    def metrics(self) -> dict[str, int]:
        """Counters: failovers, workers marked down / re-admitted, failed probes, workers down now."""
        return {**self.pool.stats, "workers_down": len(self.pool.down)}

    async def _model_for(self, worker: str) -> str | None:
        if self.model is not None:
            return self.model
        if worker not in self._models:
            url = self._guard.check(self.api_base(worker) + "/models")
            try:
                resp = await self._http().get(url)
                data = resp.json().get("data") if resp.status_code == 200 else None
                self._models[worker] = str(data[0]["id"]) if data else None
            except Exception:  # discovery is best effort: servers may not list models
                self._models[worker] = None
        return self._models[worker]

    def _admit(self, req: GenRequest, worker: str) -> Any:
        """Async context held while the request is at the server (subclasses gate here)."""
        return contextlib.nullcontext()

    async def _server_abort(self, worker: str, rid: str) -> None:
        """Tell the server to drop ``rid`` (OpenAI servers abort on disconnect: nothing to do)."""

    # ---- request bodies and chunk parsing ----------------------------------------------------
    async def _request(self, req: GenRequest, worker: str, top: int) -> tuple[str, dict, Parser]:
        """URL, JSON body and chunk parser for ``req`` (``top``: top logprobs wanted)."""
        body, chat = request_body(req, await self._model_for(worker), max(req.logprobs, top), self.stream_usage)
        body.update(self.extra_body)
        body["stream"] = True
        if chat:
            return self.api_base(worker) + "/chat/completions", body, self._parse_chat
        return self.api_base(worker) + "/completions", body, self._parse_completion

    _usage = staticmethod(usage)
    _parse_completion = staticmethod(parse_completion)
    _parse_chat = staticmethod(parse_chat)

    # ---- the streaming core ------------------------------------------------------------------
    async def _stream(self, req: GenRequest, live: _Live, st: StreamState, top: int) -> None:
        import httpx

        url, body, parse = await self._request(req, live.worker, top)
        self._guard.check(url, req)
        async with self._admit(req, live.worker):
            live.sent = True
            started = False
            try:
                async with self._http().stream("POST", url, json=body,
                                               headers=routing_header(affinity_key(req))) as resp:
                    started = True
                    if not 200 <= resp.status_code < 300:
                        raise status_error(resp.status_code, await resp.aread(), req, url)
                    self.pool.mark_up(live.worker)  # it answers: up (a no-op unless it was down)
                    async for payload in iter_sse(resp.aiter_lines()):
                        try:
                            data = json.loads(payload)
                        except ValueError:
                            raise BackendError(f"malformed stream chunk from {url}: {payload[:80]!r}",
                                               retryable=True, **where(req)) from None
                        if isinstance(data, dict) and data.get("error"):
                            raise stream_error(data, req, url)
                        if isinstance(data, dict):
                            parse(data, st)
                            st.flush()
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if not started:
                    live.sent = False  # nothing reached the server: another worker may take it
                    raise _Unreachable(transport_error(exc, req, url)) from None
                raise
            except httpx.TransportError as exc:
                if not isinstance(exc, httpx.TimeoutException):  # the connection broke: the worker died?
                    self.pool.mark_down(live.worker, f"{type(exc).__name__} mid-stream")
                raise transport_error(exc, req, url) from None

    async def _attempts(self, req: GenRequest, live: _Live, st: StreamState, top: int) -> None:
        """Stream ``req``; a worker that cannot be reached is marked down and the request
        fails over to the next worker of its program's ranking (each worker tried once)."""
        tried: list[str] = []
        while True:
            try:
                return await self._stream(req, live, st, top)
            except _Unreachable as exc:
                self.pool.mark_down(live.worker, "unreachable")
                tried.append(live.worker)
                nxt = self.pool.route(affinity_key(req), exclude=tried)
                if nxt is None:
                    raise exc.error from None
                self.pool.stats["failovers"] += 1
                live.worker = nxt

    def _abort_error(self, st: StreamState, req: GenRequest) -> Exception:
        """The error for a request the server aborted on its own (subclasses refine it)."""
        return server_abort_error(st, req)

    async def run_stream(self, req: GenRequest, top: int = 0,
                   on_text: Callable[[str], None] | None = None) -> tuple[StreamState, bool]:
        """Stream ``req``; returns its state and whether it was aborted through ``abort``
        (``on_text``: called with each new piece of text as it arrives)."""
        if not req.rid:
            raise BackendError("request has no rid", retryable=False, **where(req))
        if req.rid in self._live:
            raise BackendError(f"rid {req.rid!r} is already in flight", retryable=False, **where(req))
        self.pool.start()
        live = _Live(self.route(req))
        st = StreamState(on_text=on_text)
        self._live[req.rid] = live
        inner = live.task = asyncio.ensure_future(self._attempts(req, live, st, top))
        try:
            await asyncio.wait({inner})
        except asyncio.CancelledError:  # the caller gave up: stop the stream, tell the server
            inner.cancel()
            await asyncio.gather(inner, return_exceptions=True)
            if live.sent:
                self._spawn(self._server_abort(live.worker, req.rid))
            raise
        finally:
            if self._live.get(req.rid) is live:
                del self._live[req.rid]
        if inner.cancelled() or live.aborted:
            if not inner.cancelled():
                inner.exception()  # retrieved: an aborted request's late error is not reported
            return st, True
        inner.result()
        if st.finish == "abort":  # the server dropped it (preempted, evicted, invalid): not ours
            raise self._abort_error(st, req)
        self._check_complete(st, req, live.worker)
        return st, False

    def _check_complete(self, st: StreamState, req: GenRequest, worker: str) -> None:
        """Raise when a stream ended without its request finishing (subclasses that can tell)."""

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # ---- protocol ----------------------------------------------------------------------------
    async def abort(self, rid: str) -> bool:
        live = self._live.pop(rid, None)
        if live is None:
            return False
        live.aborted = True
        if live.task is not None and not live.task.done():
            live.task.cancel()
        if live.sent:
            await self._server_abort(live.worker, rid)
        return True

    def live_rids(self) -> set[str]:
        return set(self._live)

    async def score(self, req: ScoreRequest) -> ScoreResult:
        """P(option) from the first token's top logprobs; the base fallback when unavailable."""
        if self._logprob_score is False or self.score_top_logprobs <= 0:
            return await super().score(req)
        g = GenRequest(prompt=req.prompt, max_tokens=1, temperature=0.0, rid=req.rid, program_id=req.program_id,
                       step=req.step, branch=req.branch, priority=req.priority, kind="score", chat=req.chat)
        try:
            st, aborted = await self.run_stream(g, top=self.score_top_logprobs)
        except BackendError as exc:
            if exc.retryable or self._logprob_score:
                raise
            self._logprob_score = False  # the server rejects logprobs: remember, fall back
            return await super().score(req)
        if aborted:
            return ScoreResult(probs={o: 1.0 / len(req.options) for o in req.options}, tokens=0, rid=req.rid)
        probs = probs_from_top(st.first_top or {}, req.options)
        if probs is None:
            if st.first_top is None:
                self._logprob_score = False
            return await super().score(req)
        self._logprob_score = True
        out = st.result(g)
        return ScoreResult(probs=probs, prompt_tokens=out.prompt_tokens, tokens=max(out.tokens, 1), rid=req.rid)

    async def close(self) -> None:
        await self.pool.close()
        for rid in list(self._live):
            await self.abort(rid)
        if self._bg:
            await asyncio.wait(set(self._bg), timeout=5.0)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

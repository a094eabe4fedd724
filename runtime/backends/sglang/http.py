"""SGLangHTTPBackend: SGLang servers through their native ``/generate`` and ``/abort_request``.

Every request carries certa's ``rid`` (made prefix-free: SGLang's scheduler aborts every rid
that STARTS WITH the aborted one, see :func:`~certa.runtime.backends.http_common.wire_rid`)
and an integer SGLang ``priority`` as top-level fields (not inside ``sampling_params``), plus
the ``X-SMG-Routing-Key: <program>`` header SGLang Model Gateway routes by. Aborts close the
stream and go to ``/abort_request`` (with ``admin_api_key`` when the server has one; a
refused abort is logged and counted in :meth:`SGLangHTTPBackend.metrics`). Several worker
URLs (``urls=``) are routed by program with health checks and failover
(:mod:`certa.runtime.backends.worker_pool`): a program's branches, chunks and probes share
one radix cache. Seeds are honoured by SGLang only with ``--enable-deterministic-inference``
(``server_deterministic=True``); otherwise a seeded, sampled request warns once.

Priority: certa's ``GenRequest.priority`` is lower = more urgent; SGLang's default is higher
= first, so the value sent is ``-round(priority * priority_scale)``; servers started with
``--schedule-low-priority-values-first`` take ``low_priority_values_first=True``. With
``server_priority=False`` (server without ``--enable-priority-scheduling``) no priority is
sent; requests wait in a client-side queue per worker instead, at most ``max_in_flight``
at the server, released most urgent first. Server flags: ``docs/backends.md``.

Example (needs a server, so not run as a doctest)::

    backend = SGLangHTTPBackend(urls=["http://10.0.0.5:30000", "http://10.0.0.6:30000"],
                                allowed_hosts=["10.0.0.5", "10.0.0.6"])
    out = await backend.generate(GenRequest(prompt="2+2=", rid="p1-s0-b0", program_id="p1",
                                            priority=3.0))   # sent as priority=-3
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from certa.runtime.errors import BackendError
from certa.runtime.types import Capabilities, GenRequest
from certa.runtime.backends.http_common import StreamState, server_message, where, wire_rid
from certa.runtime.backends.openai_http import OpenAIBackend, Parser
from certa.runtime.backends.sglang.protocol import (SeedNotice, abort_error, parse_native, sampling_params,
                                                    sglang_priority)

log = logging.getLogger("certa.runtime.backends")

__all__ = ["SGLangHTTPBackend", "PriorityGate", "parse_native", "sglang_priority"]

class PriorityGate:
    """Admit at most ``cap`` holders at once; waiters go most urgent (lowest) first, FIFO ties.

    >>> gate = PriorityGate(2); gate.cap, gate.active
    (2, 0)
    """

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.cap = cap
        self.active = 0
        self._heap: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()

    @property
    def queued(self) -> int:
        return sum(1 for *_, f in self._heap if not f.done())

    @contextlib.asynccontextmanager
    async def slot(self, priority: float):
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: float) -> None:
        if self.active < self.cap and self.queued == 0:
            self.active += 1
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (priority, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted, then cancelled before running
                self._release()
            raise

    def _release(self) -> None:
        self.active -= 1
        while self._heap and self.active < self.cap:
            *_, fut = heapq.heappop(self._heap)
            if not fut.done():
                self.active += 1
                fut.set_result(None)


class SGLangHTTPBackend(OpenAIBackend):
    """SGLang native HTTP backend. Chat requests use SGLang's OpenAI route with the same extras.

    Args:
        urls: one server root URL (``http://host:30000``, or a gateway's) or a list of workers;
            ``/generate``, ``/abort_request`` and ``/v1/...`` are appended to it.
        base_url: one server root URL (``http://host:30000``), or the SGLang Model Gateway's.
        urls: several worker root URLs instead (client-side routing by program, with health
            checks and failover). ``/generate``, ``/abort_request``, ``/v1/...`` are appended.
        server_priority: the servers run ``--enable-priority-scheduling --schedule-policy
            fcfs``; False: order requests client-side (see ``max_in_flight``).
        low_priority_values_first: the servers run ``--schedule-low-priority-values-first``.
        priority_scale: multiply certa priorities before rounding to SGLang integers.
        priority_map: custom ``float -> int`` mapping (overrides the two options above).
        max_in_flight: per-worker cap on requests at the server (default: unlimited with
            server priority, 8 without); waiting requests are released most urgent first.
        incremental_output: the servers run ``--incremental-streaming-output``.
        server_deterministic: the servers run ``--enable-deterministic-inference`` (the only
            mode in which SGLang honours ``sampling_seed``); otherwise a seeded, sampled
            request warns once.
        admin_api_key: the servers' ``--admin-api-key``: ``/abort_request`` accepts only it
            when it is set (``api_key`` is used when this is None).
        abort_timeout: seconds allowed for an ``/abort_request`` call. A refused or failed
            abort is logged (``certa.runtime.backends``) and counted in :meth:`metrics`.
        model, api_key, timeout, extra_body, allowed_hosts, score_top_logprobs,
            health_interval: as for :class:`~certa.runtime.backends.openai_http.OpenAIBackend`.
    """

    def __init__(
        self,
        base_url: str | Sequence[str] | None = None,
        *,
        urls: str | Sequence[str] | None = None,
        model: str | None = None,
        api_key: str | None = None,
        admin_api_key: str | None = None,
        timeout: float = 600.0,
        extra_body: Mapping[str, Any] | None = None,
        allowed_hosts: Iterable[str] | None = None,
        server_priority: bool = True,
        low_priority_values_first: bool = False,
        priority_scale: float = 1.0,
        priority_map: Callable[[float], int] | None = None,
        max_in_flight: int | None = None,
        incremental_output: bool = False,
        server_deterministic: bool = False,
        abort_timeout: float = 5.0,
        score_top_logprobs: int = 5,
        health_interval: float | None = 2.0,
    ) -> None:
        super().__init__(base_url, urls=urls, model=model, api_key=api_key, timeout=timeout, extra_body=extra_body,
                         allowed_hosts=allowed_hosts, score_top_logprobs=score_top_logprobs,
                         health_interval=health_interval)
        self.server_priority = server_priority
        self.low_priority_values_first = low_priority_values_first
        self.priority_scale = priority_scale
        self.priority_map = priority_map
        self.incremental_output = incremental_output
        self.abort_timeout = abort_timeout
        self._abort_headers = {"Authorization": f"Bearer {admin_api_key}"} if admin_api_key else {}
        self._seeds = SeedNotice(server_deterministic, type(self).__name__)
        self.aborts_sent = 0
        self.abort_failures = 0
        self.aborts_unsupported = 0
        self._no_abort_route: set[str] = set()
        cap = max_in_flight if max_in_flight is not None else (None if server_priority else 8)
        self.gates = {w: PriorityGate(cap) for w in self.workers} if cap is not None else {}
        self.capabilities = Capabilities(score=True, logprobs=True, priority=True, streaming=True, name="sglang-http")

    @staticmethod
    def api_base(worker: str) -> str:
        """SGLang serves its OpenAI routes under ``/v1`` of the server root."""
        return worker + "/v1"

    def health_url(self, worker: str) -> str:
        """SGLang's liveness route (no key needed; what the gateway probes too)."""
        return worker + "/health"

    def metrics(self) -> dict[str, int]:
        """The routing counters plus ``aborts_sent`` and ``abort_failures``."""
        return {**super().metrics(), "aborts_sent": self.aborts_sent, "abort_failures": self.abort_failures,
                "aborts_unsupported": self.aborts_unsupported}

    def priority_of(self, req: Any) -> int | None:
        """The SGLang priority sent for ``req`` (None when the server does not order by it)."""
        if not self.server_priority:
            return None
        if self.priority_map is not None:
            return int(self.priority_map(req.priority))
        return sglang_priority(req.priority, scale=self.priority_scale,
                               low_values_first=self.low_priority_values_first)

    def _admit(self, req: GenRequest, worker: str) -> Any:
        gate = self.gates.get(worker)
        return gate.slot(req.priority) if gate is not None else contextlib.nullcontext()

    def _abort_error(self, st: StreamState, req: GenRequest) -> Exception:
        return abort_error(st, req)

    def _check_complete(self, st: StreamState, req: GenRequest, worker: str) -> None:
        """SGLang's last event always carries a finish reason: a stream that ends without one was
        cut (a gateway ends the stream cleanly when the worker behind it dies)."""
        if st.finish is None:
            raise BackendError(f"the stream from {worker} ended before request {req.rid!r} finished "
                               "(the worker went away?)", retryable=True, **where(req))

    async def _request(self, req: GenRequest, worker: str, top: int) -> tuple[str, dict, Parser]:
        self._seeds.check(req)
        prio = self.priority_of(req)
        if req.chat:  # SGLang's OpenAI route takes the same rid/priority extras
            url, body, parse = await super()._request(req, worker, top)
            body["rid"] = wire_rid(req.rid)
            if prio is not None:
                body["priority"] = prio
            return url, body, parse
        body: dict[str, Any] = {"text": req.prompt, "sampling_params": sampling_params(req), "rid": wire_rid(req.rid)}
        if prio is not None:
            body["priority"] = prio
        n_top = max(req.logprobs, top)
        if n_top:
            body.update(return_logprob=True, top_logprobs_num=n_top, return_text_in_logprobs=True)
        body.update(self.extra_body)
        body["stream"] = True
        incremental = self.incremental_output
        return worker + "/generate", body, lambda data, st: parse_native(data, st, incremental)

    async def _server_abort(self, worker: str, rid: str) -> None:
        """POST ``/abort_request`` for this rid (as sent: prefix-free). The stream is closed
        either way; a refused or failed abort is logged and counted (``abort_failures``)."""
        import httpx

        url = self._guard.check(worker + "/abort_request")
        self.aborts_sent += 1
        try:
            resp = await self._http().post(url, json={"rid": wire_rid(rid), "abort_all": False},
                                           headers=self._abort_headers, timeout=self.abort_timeout)
        except (httpx.HTTPError, OSError) as exc:
            self._abort_failed(worker, rid, f"{type(exc).__name__}: {exc}")
            return
        if resp.status_code == 404:  # no such route (SGLang Model Gateway): closing the stream aborts
            self.aborts_unsupported += 1
            if worker not in self._no_abort_route:
                self._no_abort_route.add(worker)
                log.info("%s has no /abort_request (a gateway?): aborts rely on closing the stream, which "
                         "the worker notices as a client disconnect", worker)
        elif not 200 <= resp.status_code < 300:
            hint = " (the server runs --admin-api-key: pass admin_api_key=)" if resp.status_code in (401, 403) else ""
            self._abort_failed(worker, rid, f"HTTP {resp.status_code}: {server_message(resp.content)}{hint}")

    def _abort_failed(self, worker: str, rid: str, why: str) -> None:
        self.abort_failures += 1
        log.warning("abort of %r at %s failed, the server may keep decoding it until the client "
                    "disconnect is noticed: %s", rid, worker, why)

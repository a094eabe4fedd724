"""SGLangHTTPBackend: SGLang servers through their native ``/generate`` and ``/abort_request``.

Every request carries certa's ``rid`` and an integer SGLang ``priority`` as top-level
fields (not inside ``sampling_params``). Aborts go to ``/abort_request`` with the EXACT rid
(SGLang's public path ignores unknown rids, so prefix aborts are never relied on); the
stream is closed at the same time. Many workers are routed by program (rendezvous hash of
``program_id``): a program's branches, chunks and probes share one radix cache.

Priority: certa's ``GenRequest.priority`` is lower = more urgent; SGLang's default is higher
= first, so the value sent is ``-round(priority * priority_scale)``; servers started with
``--schedule-low-priority-values-first`` take ``low_priority_values_first=True``. With
``server_priority=False`` (server without ``--enable-priority-scheduling``) no priority is
sent; requests wait in a client-side queue per worker instead, at most ``max_in_flight``
at the server, released most urgent first. Server flags: ``docs/backends.md``.

Example (needs a server, so not run as a doctest)::

    backend = SGLangHTTPBackend(["http://10.0.0.5:30000", "http://10.0.0.6:30000"],
                                allowed_hosts=["10.0.0.5", "10.0.0.6"])
    out = await backend.generate(GenRequest(prompt="2+2=", rid="p1-s0-b0", program_id="p1",
                                            priority=3.0))   # sent as priority=-3
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from certa.runtime.types import Capabilities, GenRequest
from certa.runtime.backends.http_common import StreamState
from certa.runtime.backends.openai_http import OpenAIBackend, Parser

_INT_LIMIT = 2**31 - 1


def sglang_priority(priority: float, *, scale: float = 1.0, low_values_first: bool = False) -> int:
    """Map certa's priority (lower = urgent) to SGLang's integer priority.

    >>> sglang_priority(2.0), sglang_priority(2.0, low_values_first=True)
    (-2, 2)
    >>> sglang_priority(0.25, scale=100)
    -25
    """
    value = max(-_INT_LIMIT, min(_INT_LIMIT, round(priority * scale)))
    return int(value) if low_values_first else int(-value)


def parse_native(data: dict, st: StreamState, incremental: bool = False,
                 token_text: Callable[[int], str] | None = None) -> None:
    """Fold one SGLang ``/generate`` stream event (or engine output dict) into ``st``.

    Text and logprobs are cumulative unless the server runs with
    ``--incremental-streaming-output``; ``completion_tokens`` is cumulative either way.
    Top-logprob entries are ``(logprob, token_id, text)``; ``token_text`` decodes an id
    when the text is absent (the engine API does not return it).
    """
    meta = data.get("meta_info") or {}
    text = data.get("text")
    lps = [float(x[0]) for x in meta.get("output_token_logprobs") or [] if x and x[0] is not None]
    if incremental:
        st.text.append(text or "")
        st.logprobs.extend(lps)
    else:
        if text is not None:
            st.text = [text]
        if lps or "output_token_logprobs" in meta:
            st.logprobs = lps
    if meta.get("completion_tokens") is not None:
        st.completion_tokens = int(meta["completion_tokens"])
    if meta.get("prompt_tokens") is not None:
        st.prompt_tokens = int(meta["prompt_tokens"])
    st.cached_tokens = int(meta.get("cached_tokens") or st.cached_tokens)
    tops = meta.get("output_top_logprobs") or []
    if st.first_top is None and tops and tops[0]:
        st.first_top = {_token_text(t, token_text): float(t[0]) for t in tops[0] if t and t[0] is not None}
    reason = meta.get("finish_reason")
    if isinstance(reason, dict):
        st.finish = str(reason.get("type") or "stop")
        if st.finish == "abort":
            st.abort_status = reason.get("status_code")
            st.abort_message = str(reason.get("message") or "aborted by the server")
    elif isinstance(reason, str):
        st.finish = reason


def _token_text(entry: Sequence[Any], decode: Callable[[int], str] | None) -> str:
    if len(entry) > 2 and entry[2] is not None:
        return str(entry[2])
    return decode(int(entry[1])) if decode is not None else str(entry[1])


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
        server_priority: the servers run ``--enable-priority-scheduling --schedule-policy
            fcfs``; False: order requests client-side (see ``max_in_flight``).
        low_priority_values_first: the servers run ``--schedule-low-priority-values-first``.
        priority_scale: multiply certa priorities before rounding to SGLang integers.
        priority_map: custom ``float -> int`` mapping (overrides the two options above).
        max_in_flight: per-worker cap on requests at the server (default: unlimited with
            server priority, 8 without); waiting requests are released most urgent first.
        incremental_output: the servers run ``--incremental-streaming-output``.
        abort_timeout: seconds allowed for an ``/abort_request`` call.
        model, api_key, timeout, extra_body, allowed_hosts, score_top_logprobs: as for
            :class:`~certa.runtime.backends.openai_http.OpenAIBackend`.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        extra_body: Mapping[str, Any] | None = None,
        allowed_hosts: Iterable[str] | None = None,
        server_priority: bool = True,
        low_priority_values_first: bool = False,
        priority_scale: float = 1.0,
        priority_map: Callable[[float], int] | None = None,
        max_in_flight: int | None = None,
        incremental_output: bool = False,
        abort_timeout: float = 5.0,
        score_top_logprobs: int = 5,
    ) -> None:
        super().__init__(urls, model=model, api_key=api_key, timeout=timeout, extra_body=extra_body,
                         allowed_hosts=allowed_hosts, score_top_logprobs=score_top_logprobs)
        self.server_priority = server_priority
        self.low_priority_values_first = low_priority_values_first
        self.priority_scale = priority_scale
        self.priority_map = priority_map
        self.incremental_output = incremental_output
        self.abort_timeout = abort_timeout
        cap = max_in_flight if max_in_flight is not None else (None if server_priority else 8)
        self.gates = {w: PriorityGate(cap) for w in self.workers} if cap is not None else {}
        self.capabilities = Capabilities(score=True, logprobs=True, priority=True, prefix_sharing=True,
                                         name="sglang-http")

    @staticmethod
    def api_base(worker: str) -> str:
        """SGLang serves its OpenAI routes under ``/v1`` of the server root."""
        return worker + "/v1"

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

    async def _request(self, req: GenRequest, worker: str, top: int) -> tuple[str, dict, Parser]:
        prio = self.priority_of(req)
        if req.chat:  # SGLang's OpenAI route takes the same rid/priority extras
            url, body, parse = await super()._request(req, worker, top)
            body["rid"] = req.rid
            if prio is not None:
                body["priority"] = prio
            return url, body, parse
        params: dict[str, Any] = {"max_new_tokens": req.max_tokens, "temperature": req.temperature,
                                  "top_p": req.top_p}
        if req.top_k > 0:
            params["top_k"] = req.top_k
        if req.stop:
            params["stop"] = list(req.stop)
        if req.seed is not None:
            params["sampling_seed"] = req.seed
        body: dict[str, Any] = {"text": req.prompt, "sampling_params": params, "rid": req.rid}
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
        """POST ``/abort_request`` for this exact rid; failures are ignored (the stream is closed)."""
        import httpx

        url = self._guard.check(worker + "/abort_request")
        with contextlib.suppress(httpx.HTTPError, OSError):
            await self._http().post(url, json={"rid": rid, "abort_all": False}, timeout=self.abort_timeout)

"""A contract fake of SGLang's request semantics (it runs no model; tokens are made up).

What it reproduces, from SGLang 0.5.x (``io_struct.GenerateReqInput``, ``schedule_policy``,
``tokenizer_manager.abort_request``, ``entrypoints/http_server``):

* ``/generate`` with top-level ``rid`` and ``priority`` (a ``priority`` inside
  ``sampling_params`` is rejected, as SGLang's strict ``SamplingParams`` does), streaming
  ``data: {"text", "output_ids", "meta_info"}`` events, cumulative text unless
  ``incremental_streaming_output``; ``meta_info.finish_reason`` is ``{"type": ...}``;
* a waiting queue and ``max_running_requests`` running slots; priority orders the queue
  only when ``enable_priority_scheduling`` and the policy is ``fcfs``/``lof`` (higher value
  first unless ``schedule_low_priority_values_first``); otherwise arrival order;
* ``/abort_request``: exact rid only (the public path returns early on an unknown rid, so a
  prefix of real rids aborts nothing); empty rid without ``abort_all`` is ignored;
* a client disconnect aborts the request after ``disconnect_abort_delay`` (SGLang: ~2 s);
* ``/v1/chat/completions`` (OpenAI route) accepting ``rid``/``priority`` extras.

``FakeEngine`` exposes the same core as ``sglang.Engine`` does: ``async_generate`` and
``tokenizer_manager.abort_request``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any

from .http_server import FakeHTTPServer, FakeRequest, Reply

YES_NO = "Yes or No"


@dataclass
class FakeSGLangConfig:
    enable_priority_scheduling: bool = False
    schedule_policy: str = "fcfs"
    schedule_low_priority_values_first: bool = False
    abort_on_priority_when_disabled: bool = False
    max_running_requests: int = 8
    step_seconds: float = 0.002
    incremental_streaming_output: bool = False
    disconnect_abort_delay: float = 2.0


@dataclass
class _Req:
    rid: str
    prompt: str
    params: dict
    priority: int | None
    seq: int
    logprob: bool = False
    top_n: int = 0
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    tokens: list[str] = field(default_factory=list)
    text: str = ""
    finish: dict | None = None
    cached: int = 0


def fake_token(prompt: str, seed: Any, i: int) -> str:
    """The fake model's i-th token for a prompt (greedy when seed is None)."""
    if i == 0 and YES_NO in prompt:
        return " Yes"
    h = int(hashlib.sha256(f"{prompt}|{seed}".encode()).hexdigest()[:8], 16)
    return f" t{(h + 7 * i) % 1000},"


class FakeSGLang:
    """Scheduler + tokenizer-manager core shared by the HTTP fake and ``FakeEngine``."""

    def __init__(self, config: FakeSGLangConfig | None = None) -> None:
        self.config = config or FakeSGLangConfig()
        self.states: dict[str, _Req] = {}  # TokenizerManager.rid_to_state
        self.waiting: list[_Req] = []
        self.running: list[_Req] = []
        self.admitted: list[str] = []  # rids in the order they started running
        self.received: list[dict] = []  # every generate request as sent
        self.aborts: list[tuple[str, bool]] = []  # (rid, honoured)
        self._seq = itertools.count()
        self._loop_task: asyncio.Task | None = None
        self._prompts: list[list[str]] = []

    # ---- scheduling --------------------------------------------------------------------------
    def _key(self, r: _Req) -> tuple:
        c = self.config
        if c.enable_priority_scheduling and c.schedule_policy in ("fcfs", "lof"):
            sign = 1 if c.schedule_low_priority_values_first else -1
            return ((r.priority or 0) * sign, r.seq)
        return (r.seq,)

    async def _loop(self) -> None:
        while self.waiting or self.running:
            self.waiting.sort(key=self._key)
            while self.waiting and len(self.running) < self.config.max_running_requests:
                r = self.waiting.pop(0)
                self.running.append(r)
                self.admitted.append(r.rid)
            await asyncio.sleep(self.config.step_seconds)
            for r in list(self.running):
                self._step(r)

    def _step(self, r: _Req) -> None:
        p = r.params
        seed = p.get("sampling_seed") if float(p.get("temperature", 1.0)) > 0 else None
        r.tokens.append(fake_token(r.prompt, seed, len(r.tokens)))
        r.text += r.tokens[-1]
        for s in p.get("stop") or []:
            if s and s in r.text:
                r.finish = {"type": "stop", "matched": s}
                r.text = r.text[: r.text.index(s)]  # the stop string is trimmed, as in SGLang
        if r.finish is None and len(r.tokens) >= int(p.get("max_new_tokens", 128)):
            r.finish = {"type": "length", "length": len(r.tokens)}
        self._emit(r)

    def _emit(self, r: _Req) -> None:
        meta: dict[str, Any] = {"id": r.rid, "finish_reason": r.finish, "prompt_tokens": len(r.prompt.split()),
                                "completion_tokens": len(r.tokens), "cached_tokens": r.cached}
        if r.logprob:
            meta["output_token_logprobs"] = [(-0.1, 100 + i, t) for i, t in enumerate(r.tokens)]
            second = " No" if YES_NO in r.prompt else " x"
            meta["output_top_logprobs"] = [[(math.log(0.8), 1, t), (math.log(0.2), 2, second)][: r.top_n]
                                           for t in r.tokens]
        r.out.put_nowait({"text": r.text, "output_ids": list(range(len(r.tokens))), "meta_info": meta})
        if r.finish is not None:
            self._drop(r)

    def _drop(self, r: _Req) -> None:
        self.states.pop(r.rid, None)
        for q in (self.waiting, self.running):
            if r in q:
                q.remove(r)

    # ---- the public entry points -------------------------------------------------------------
    def submit(self, obj: dict) -> _Req:
        self.received.append(obj)
        rid = obj.get("rid") or f"auto-{next(self._seq)}"
        if rid in self.states:
            raise ValueError(f"Duplicate request ID: {rid}")
        params = dict(obj.get("sampling_params") or {})
        if "priority" in params or "rid" in params:
            raise ValueError("unknown field in sampling_params")
        prio = obj.get("priority")
        if prio is not None and not self.config.enable_priority_scheduling and self.config.abort_on_priority_when_disabled:
            raise ValueError("priority scheduling is not enabled")
        words = obj.get("text", "").split()
        cached = max((_common(words, w) for w in self._prompts), default=0)
        self._prompts.append(words)
        r = _Req(rid, obj.get("text", ""), params, prio, next(self._seq), bool(obj.get("return_logprob")),
                 int(obj.get("top_logprobs_num") or 0), cached=cached)
        self.states[rid] = r
        self.waiting.append(r)
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.ensure_future(self._loop())
        return r

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        if not abort_all and not rid:
            return  # SGLang ignores an empty rid without abort_all
        targets = list(self.states.values()) if abort_all else [self.states[rid]] if rid in self.states else []
        self.aborts.append((rid, bool(targets)))
        for r in targets:
            r.finish = {"type": "abort", "message": "Abort request", "status_code": None}
            self._emit(r)

    async def stream(self, r: _Req, disconnected: asyncio.Event | None = None):
        """Yield output dicts (cumulative text unless incremental) until the request finishes."""
        sent = 0
        gone = disconnected or asyncio.Event()
        try:
            while True:
                get = asyncio.ensure_future(r.out.get())
                stop = asyncio.ensure_future(gone.wait())
                done, _ = await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                if get not in done:
                    get.cancel()
                    return
                out = get.result()
                if self.config.incremental_streaming_output:
                    out = dict(out, text=out["text"][sent:])
                    sent += len(out["text"])
                yield out
                if out["meta_info"]["finish_reason"] is not None:
                    return
        finally:
            if r.rid in self.states:  # client went away: SGLang aborts it a little later
                asyncio.get_running_loop().call_later(self.config.disconnect_abort_delay,
                                                      self.abort_request, r.rid)


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class FakeSGLangServer:
    """``FakeSGLang`` behind SGLang's native HTTP routes on a loopback port."""

    def __init__(self, config: FakeSGLangConfig | None = None) -> None:
        self.core = FakeSGLang(config)
        self.http = FakeHTTPServer(self._handle)
        self.abort_calls: list[dict] = []

    @property
    def url(self) -> str:
        return self.http.url

    async def start(self) -> "FakeSGLangServer":
        await self.http.start()
        return self

    async def close(self) -> None:
        self.core.abort_request(abort_all=True)
        await self.http.close()

    async def _handle(self, req: FakeRequest) -> Reply:
        if req.path == "/abort_request":
            body = req.json() or {}
            self.abort_calls.append(body)
            self.core.abort_request(rid=body.get("rid", ""), abort_all=bool(body.get("abort_all")))
            return Reply(200, b"")
        if req.path == "/v1/models":
            return Reply(200, {"object": "list", "data": [{"id": "fake-sglang"}]})
        if req.path not in ("/generate", "/v1/chat/completions"):
            return Reply(404, {"detail": "Not Found"})
        body = req.json()
        chat = req.path == "/v1/chat/completions"
        obj = _chat_to_generate(body) if chat else body
        try:
            r = self.core.submit(obj)
        except ValueError as exc:
            return Reply(400, {"error": {"message": str(exc)}})
        outs = self.core.stream(r, req.disconnected)
        if chat:
            return Reply(200, stream=_openai_chunks(outs, bool((body.get("stream_options") or {}).get("include_usage"))))
        return Reply(200, stream=(json.dumps(o) async for o in outs))


def _chat_to_generate(body: dict) -> dict:
    prompt = "\n".join(m.get("content", "") for m in body.get("messages", []))
    params = {"max_new_tokens": body.get("max_tokens", 128), "temperature": body.get("temperature", 1.0)}
    if body.get("stop"):
        params["stop"] = body["stop"]
    return {"text": prompt, "sampling_params": params, "rid": body.get("rid"), "priority": body.get("priority")}


async def _openai_chunks(outs, include_usage: bool):
    text, last = "", None
    async for o in outs:
        last = o
        delta, text = o["text"][len(text):], o["text"]
        fr = o["meta_info"]["finish_reason"]
        yield json.dumps({"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": delta}, "finish_reason": fr and fr["type"]}]})
    if include_usage and last is not None:
        m = last["meta_info"]
        yield json.dumps({"choices": [], "usage": {"prompt_tokens": m["prompt_tokens"],
                                                   "completion_tokens": m["completion_tokens"]}})


class _FakeTokenizerManager:
    def __init__(self, core: FakeSGLang) -> None:
        self.core = core

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self.core.abort_request(rid=rid, abort_all=abort_all)


class FakeEngine:
    """Stands in for ``sglang.Engine``: ``async_generate(..., stream=True)`` and abort."""

    def __init__(self, config: FakeSGLangConfig | None = None) -> None:
        self.core = FakeSGLang(config)
        self.tokenizer_manager = _FakeTokenizerManager(self.core)
        self.server_args = self.core.config  # same field names as sglang's ServerArgs
        self.shut_down = False

    async def async_generate(self, prompt=None, sampling_params=None, *, rid=None, priority=None, stream=False,
                             return_logprob=False, top_logprobs_num=None, **_: Any):
        r = self.core.submit({"text": prompt, "sampling_params": sampling_params, "rid": rid, "priority": priority,
                              "return_logprob": return_logprob, "top_logprobs_num": top_logprobs_num})
        gen = self.core.stream(r)
        if stream:
            return gen
        out = None
        async for out in gen:
            pass
        return out

    def shutdown(self) -> None:
        self.shut_down = True

"""A contract fake of SGLang's request semantics (it runs no model; tokens are made up).

What it reproduces, read from the ``sglang==0.5.23`` wheel (``managers/scheduler.py``,
``managers/tokenizer_manager.py``, ``managers/schedule_policy.py``,
``entrypoints/http_server.py``, ``srt/arg_groups/validation_hook.py``,
``sampling/sampling_batch_info.py``, ``utils/auth.py``):

* start-up: ``enable_priority_scheduling`` with a policy other than ``fcfs``/``lof`` is
  refused (SGLang asserts and does not start);
* a waiting queue and ``max_running_requests`` running slots. ``fcfs``: arrival order, or
  ``(priority * sign, arrival)`` with priority scheduling; ``lof``: longest
  ``max_new_tokens`` first, after priority when it is on; other policies: arrival order.
  Higher priority first unless ``schedule_low_priority_values_first``; a request without a
  priority gets the least urgent value;
* a request WITH a priority on a server without priority scheduling runs (priority ignored),
  or, with ``abort_on_priority_when_disabled``, is aborted in-stream:
  ``finish_reason={"type": "abort", "status_code": 503, "message": "Using priority is
  disabled ..."}``;
* the seed: ``sampling_seed`` decides the sample only with ``enable_deterministic_inference``;
  otherwise every sampled (temperature > 0) request draws fresh randomness;
* abort: the tokenizer manager forwards an abort only for a rid it holds (exact match) or
  ``abort_all``; the scheduler then aborts EVERY request whose rid STARTS WITH it;
* ``meta_info.output_top_logprobs`` entries are ``(logprob, token_id, text)`` with text only
  when ``return_text_in_logprobs`` is set (the HTTP body); the Engine API never sets it, so
  its entries are ``(logprob, token_id, None)`` and the client decodes the id.

The HTTP routes and the Engine stand-in are in :mod:`.sglang_fake_http`.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import random
import sys
from dataclasses import dataclass, field
from typing import Any

YES_NO = "Yes or No"
PRIORITY_DISABLED = "Using priority is disabled for this server. Please send a new request without a priority."


@dataclass
class FakeSGLangConfig:
    enable_priority_scheduling: bool = False
    schedule_policy: str = "fcfs"
    schedule_low_priority_values_first: bool = False
    abort_on_priority_when_disabled: bool = False
    enable_deterministic_inference: bool = False
    max_running_requests: int = 8
    step_seconds: float = 0.002
    incremental_streaming_output: bool = False
    disconnect_abort_delay: float = 2.0
    api_key: str | None = None
    admin_api_key: str | None = None

    def __post_init__(self) -> None:  # validation_hook.py: SGLang refuses to start
        if self.enable_priority_scheduling and self.schedule_policy not in ("fcfs", "lof"):
            raise ValueError("To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. "
                             f"'{self.schedule_policy}' is not supported.")


@dataclass
class _Req:
    rid: str
    prompt: str
    params: dict
    priority: int | None
    seq: int
    logprob: bool = False
    top_n: int = 0
    text_in_logprobs: bool = False
    salt: int = 0
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    tokens: list[str] = field(default_factory=list)
    text: str = ""
    finish: dict | None = None
    cached: int = 0


def fake_token(prompt: str, seed: Any, i: int) -> str:
    """The fake model's i-th token for a prompt and a sampling seed."""
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
        self.aborts: list[tuple[str, list[str]]] = []  # (rid asked, rids the scheduler aborted)
        self.vocab: dict[str, int] = {}
        self._seq = itertools.count()
        self._rng = random.Random(1234)
        self._loop_task: asyncio.Task | None = None
        self._prompts: list[list[str]] = []

    # ---- scheduling --------------------------------------------------------------------------
    def _key(self, r: _Req) -> tuple:
        c = self.config
        sign = 1 if c.schedule_low_priority_values_first else -1
        prio = (r.priority * sign,) if c.enable_priority_scheduling else ()
        if c.schedule_policy == "lof":
            return (*prio, -int(r.params.get("max_new_tokens", 128)), r.seq)
        if c.schedule_policy == "fcfs":
            return (*prio, r.seq)
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

    def _seed(self, r: _Req) -> Any:
        p = r.params
        if float(p.get("temperature", 1.0)) <= 0:
            return None  # greedy
        if self.config.enable_deterministic_inference:
            return p.get("sampling_seed", 42)  # sampling_batch_info: seed (default 42) only here
        return f"rand{r.salt}"

    def token_id(self, text: str) -> int:
        return self.vocab.setdefault(text, len(self.vocab) + 100)

    def _step(self, r: _Req) -> None:
        p = r.params
        r.tokens.append(fake_token(r.prompt, self._seed(r), len(r.tokens)))
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
            def entry(lp: float, tok: str) -> tuple:
                return (lp, self.token_id(tok), tok if r.text_in_logprobs else None)
            meta["output_token_logprobs"] = [entry(-0.1, t) for t in r.tokens]
            second = " No" if YES_NO in r.prompt else " x"
            meta["output_top_logprobs"] = [[entry(math.log(0.8), t), entry(math.log(0.2), second)][: r.top_n]
                                           for t in r.tokens]
        r.out.put_nowait({"text": r.text, "output_ids": [self.token_id(t) for t in r.tokens], "meta_info": meta})
        if r.finish is not None:
            self._drop(r)

    def _drop(self, r: _Req) -> None:
        if self.states.get(r.rid) is r:
            del self.states[r.rid]
        for q in (self.waiting, self.running):
            if r in q:
                q.remove(r)

    # ---- the public entry points -------------------------------------------------------------
    def submit(self, obj: dict) -> _Req:
        """``TokenizerManager.generate_request``: ValueError for what it refuses."""
        self.received.append(obj)
        rid = obj.get("rid") or f"auto-{next(self._seq)}"
        if rid in self.states:
            raise ValueError(f"Duplicate request ID detected: {rid}")
        params = dict(obj.get("sampling_params") or {})
        if "priority" in params or "rid" in params:
            raise ValueError("unknown field in sampling_params")
        c = self.config
        prio = obj.get("priority")
        if prio is None and c.enable_priority_scheduling:
            prio = sys.maxsize if c.schedule_low_priority_values_first else -sys.maxsize - 1
        words = (obj.get("text") or "").split()
        cached = max((_common(words, w) for w in self._prompts), default=0)
        self._prompts.append(words)
        r = _Req(rid, obj.get("text") or "", params, prio, next(self._seq), bool(obj.get("return_logprob")),
                 int(obj.get("top_logprobs_num") or 0), bool(obj.get("return_text_in_logprobs")),
                 salt=self._rng.getrandbits(32), cached=cached)
        self.states[rid] = r
        if obj.get("priority") is not None and not c.enable_priority_scheduling and c.abort_on_priority_when_disabled:
            r.finish = {"type": "abort", "status_code": 503, "message": PRIORITY_DISABLED}
            self._emit(r)  # scheduler._set_or_validate_priority: aborted, streamed back
            return r
        self.waiting.append(r)
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.ensure_future(self._loop())
        return r

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        """``TokenizerManager.abort_request`` then ``Scheduler.abort_request`` (prefix match)."""
        if not abort_all and not rid:
            return  # SGLang ignores an empty rid without abort_all
        if not abort_all and rid not in self.states:
            self.aborts.append((rid, []))
            return  # one tokenizer worker: a rid it does not hold is not forwarded
        hit = [r for r in list(self.states.values()) if abort_all or r.rid.startswith(rid)]
        self.aborts.append((rid, [r.rid for r in hit]))
        for r in hit:
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
            if self.states.get(r.rid) is r:  # client went away: SGLang aborts it a little later
                asyncio.get_running_loop().call_later(self.config.disconnect_abort_delay,
                                                      self._late_abort, r)

    def _late_abort(self, r: _Req) -> None:
        if self.states.get(r.rid) is r:
            self.abort_request(r.rid)


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n

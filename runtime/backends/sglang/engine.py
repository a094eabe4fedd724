"""SGLangEngineBackend: an embedded ``sglang.Engine`` (GPU), driven with rid, priority and abort.

Each request is ``await engine.async_generate(prompt=..., sampling_params=..., rid=...,
priority=..., stream=True)``; ``abort(rid)`` calls
``engine.tokenizer_manager.abort_request(rid=..., abort_all=False)`` and stops reading the
stream. The rid the engine sees is prefix-free (:func:`~certa.runtime.backends.http_common.wire_rid`):
SGLang's scheduler aborts every request whose rid STARTS WITH the aborted one. Seeds are
honoured only with ``deterministic=True`` (``enable_deterministic_inference``); otherwise a
seeded, sampled request warns once. The engine is started with
``enable_priority_scheduling=True, schedule_policy="fcfs"`` (priority orders the queue only
under ``fcfs``/``lof``) and a very high ``priority_scheduling_preemption_threshold`` so
priorities order the queue without evicting running requests; pass any of them to
override (a policy other than ``fcfs``/``lof`` needs ``enable_priority_scheduling=False``:
SGLang refuses to start otherwise). certa priority (lower = urgent) is mapped as in
:mod:`certa.runtime.backends.sglang.http`.

``sglang`` is imported only when an engine is built (``pip install 'certa[sglang]'``,
CUDA required). Sequences are the generic chunked ones; the radix cache keeps the shared
prefix of chunks and probes warm.

Example:
    >>> ENGINE_DEFAULTS["schedule_policy"], ENGINE_DEFAULTS["enable_priority_scheduling"]
    ('fcfs', True)

With a GPU (not run as a doctest)::

    backend = SGLangEngineBackend(model="Qwen/Qwen2.5-0.5B-Instruct", mem_fraction_static=0.5)
    out = await backend.generate(GenRequest(prompt="2+2=", rid="p1-s0-b0", priority=1.0))
    await backend.close()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from certa.runtime.errors import BackendError, ConfigError
from certa.runtime.types import Capabilities, GenRequest, GenResult, ScoreRequest, ScoreResult
from certa.runtime.backends.http_common import StreamingBackend, StreamState, probs_from_top, where, wire_rid
from certa.runtime.backends.sglang.protocol import (PRIORITY_POLICIES, SeedNotice, abort_error, parse_native,
                                                    sampling_params, sglang_priority)

ENGINE_DEFAULTS: dict[str, Any] = {
    "enable_priority_scheduling": True,
    "schedule_policy": "fcfs",
    "priority_scheduling_preemption_threshold": 2**30,
}


class SGLangEngineBackend(StreamingBackend):
    """Backend over an in-process ``sglang.Engine``.

    Args:
        model: model to load (a local path or a name the engine can resolve); passed to
            ``sglang.Engine`` as ``model_path`` (``model_path=`` is accepted too).
        engine: an already-built engine (or a stand-in with ``async_generate`` and
            ``tokenizer_manager.abort_request``); then no engine is started or shut down here.
        deterministic: start the engine with ``enable_deterministic_inference=True`` so
            ``GenRequest.seed`` makes sampling reproducible (SGLang ignores seeds otherwise;
            batch-invariant kernels cost some throughput).
        low_priority_values_first, priority_scale, priority_map: priority mapping, as for
            :class:`~certa.runtime.backends.sglang.http.SGLangHTTPBackend`.
        score_top_logprobs: top logprobs requested by ``score``.
        **engine_kwargs: passed to ``sglang.Engine`` after :data:`ENGINE_DEFAULTS`.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        engine: Any = None,
        deterministic: bool = False,
        low_priority_values_first: bool | None = None,
        priority_scale: float = 1.0,
        priority_map: Callable[[float], int] | None = None,
        score_top_logprobs: int = 5,
        model_path: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        if model is not None and model_path is not None and model != model_path:
            raise ConfigError("SGLangEngineBackend got both model= and model_path=; pass model= only")
        model = model if model is not None else model_path
        self._owns_engine = engine is None
        kwargs = {**ENGINE_DEFAULTS, **engine_kwargs}
        if deterministic:
            kwargs["enable_deterministic_inference"] = True
        if low_priority_values_first is not None:
            kwargs["schedule_low_priority_values_first"] = low_priority_values_first
        if engine is None:
            engine, settings = _start_engine(model, kwargs), kwargs
        else:  # a built engine: read its settings where it exposes them
            args = getattr(engine, "server_args", None)
            settings = {k: getattr(args, k) for k in ("schedule_low_priority_values_first", "incremental_streaming_output",
                                                       "enable_deterministic_inference") if hasattr(args, k)}
            if low_priority_values_first is not None:
                settings["schedule_low_priority_values_first"] = low_priority_values_first
        self._seeds = SeedNotice(bool(settings.get("enable_deterministic_inference", False)), type(self).__name__)
        self.engine = engine
        self.low_priority_values_first = bool(settings.get("schedule_low_priority_values_first", False))
        self.incremental = bool(settings.get("incremental_streaming_output", False))
        self.priority_scale = priority_scale
        self.priority_map = priority_map
        self.score_top_logprobs = score_top_logprobs
        self._live: dict[str, list[Any]] = {}  # rid -> [task, aborted]
        self._closed = False
        self.capabilities = Capabilities(score=True, logprobs=True, priority=True, streaming=True, name="sglang")

    # ---- helpers ---------------------------------------------------------------------------
    def priority_of(self, req: Any) -> int:
        if self.priority_map is not None:
            return int(self.priority_map(req.priority))
        return sglang_priority(req.priority, scale=self.priority_scale, low_values_first=self.low_priority_values_first)

    def _tokenizer(self) -> Any:
        return getattr(getattr(self.engine, "tokenizer_manager", None), "tokenizer", None)

    def _prompt(self, req: GenRequest) -> str:
        if not req.chat:
            return req.prompt
        tok = self._tokenizer()
        if tok is None or not hasattr(tok, "apply_chat_template"):
            raise BackendError("engine has no tokenizer chat template for a chat request", **where(req))
        messages = ([{"role": "system", "content": req.system}] if req.system else [])
        messages.append({"role": "user", "content": req.prompt})
        if req.assistant_prefix:  # continue the assistant turn
            messages.append({"role": "assistant", "content": req.assistant_prefix})
            return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                           continue_final_message=True)
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _decode(self, token_id: int) -> str:
        tok = self._tokenizer()
        return tok.decode([token_id]) if tok is not None else str(token_id)

    def _engine_abort(self, rid: str) -> None:
        with contextlib.suppress(Exception):
            self.engine.tokenizer_manager.abort_request(rid=wire_rid(rid), abort_all=False)

    # ---- streaming core ---------------------------------------------------------------------
    async def _stream(self, req: GenRequest, st: StreamState, top: int) -> None:
        params = sampling_params(req)
        if req.seed is not None:
            self._seeds.check(req)
        kwargs: dict[str, Any] = {"prompt": self._prompt(req), "sampling_params": params, "rid": wire_rid(req.rid),
                                  "priority": self.priority_of(req), "stream": True}
        n_top = max(req.logprobs, top)
        if n_top:
            kwargs.update(return_logprob=True, top_logprobs_num=n_top)
        try:
            gen = await self.engine.async_generate(**kwargs)
            try:
                async for out in gen:
                    parse_native(out, st, self.incremental, self._decode)
                    st.flush()
            finally:
                with contextlib.suppress(Exception):
                    await gen.aclose()
        except (ValueError, TypeError, RuntimeError) as exc:
            raise BackendError(f"sglang engine rejected request {req.rid!r}: {exc}", retryable=False,
                               **where(req)) from None

    async def run_stream(self, req: GenRequest, top: int = 0,
                   on_text: Callable[[str], None] | None = None) -> tuple[StreamState, bool]:
        if not req.rid:
            raise BackendError("request has no rid", **where(req))
        if req.rid in self._live:
            raise BackendError(f"rid {req.rid!r} is already in flight", **where(req))
        st = StreamState(on_text=on_text)
        inner = asyncio.ensure_future(self._stream(req, st, top))
        entry = self._live[req.rid] = [inner, False]
        try:
            await asyncio.wait({inner})
        except asyncio.CancelledError:  # the caller gave up: stop reading and abort in the engine
            inner.cancel()
            self._engine_abort(req.rid)
            await asyncio.gather(inner, return_exceptions=True)
            raise
        finally:
            if self._live.get(req.rid) is entry:
                del self._live[req.rid]
        if inner.cancelled() or entry[1]:
            if not inner.cancelled():
                inner.exception()
            return st, True
        inner.result()
        if st.finish == "abort":
            raise abort_error(st, req)
        return st, False

    # ---- protocol ---------------------------------------------------------------------------
    async def abort(self, rid: str) -> bool:
        entry = self._live.pop(rid, None)
        if entry is None:
            return False
        entry[1] = True
        self._engine_abort(rid)
        if not entry[0].done():
            entry[0].cancel()
        return True

    def live_rids(self) -> set[str]:
        return set(self._live)

    async def score(self, req: ScoreRequest) -> ScoreResult:
        """P(option) from the first token's top logprobs; the base fallback if none match."""
        g = GenRequest(prompt=req.prompt, max_tokens=1, temperature=0.0, rid=req.rid, program_id=req.program_id,
                       step=req.step, branch=req.branch, priority=req.priority, kind="score", chat=req.chat)
        st, aborted = await self.run_stream(g, top=max(self.score_top_logprobs, 1))
        if aborted:
            return ScoreResult(probs={o: 1.0 / len(req.options) for o in req.options}, tokens=0, rid=req.rid)
        probs = probs_from_top(st.first_top or {}, req.options)
        if probs is None:
            return await super().score(req)
        out = st.result(g)
        return ScoreResult(probs=probs, prompt_tokens=out.prompt_tokens, tokens=max(out.tokens, 1), rid=req.rid)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for rid in list(self._live):
            await self.abort(rid)
        if self._owns_engine:
            with contextlib.suppress(Exception):
                self.engine.shutdown()


def _start_engine(model: str | None, kwargs: dict[str, Any]) -> Any:
    """``sglang.Engine(model_path=model, **kwargs)``, refusing what SGLang would refuse first."""
    if not model:
        raise ConfigError("SGLangEngineBackend needs model= (or a built engine=)")
    policy = kwargs.get("schedule_policy", "fcfs")
    if kwargs.get("enable_priority_scheduling") and policy not in PRIORITY_POLICIES:
        raise ConfigError(f"SGLang orders by priority only under schedule_policy 'fcfs' or 'lof' and refuses to "
                          f"start with priority scheduling under {policy!r}",
                          hint=f"keep schedule_policy='fcfs', or pass enable_priority_scheduling=False to use {policy!r}")
    try:
        import sglang
    except ImportError as exc:
        raise ConfigError(f"sglang is not installed: {exc}",
                          hint="pip install 'certa[sglang]' (Python >= 3.11, Linux x86_64 with a CUDA GPU)") from None
    return sglang.Engine(model_path=model, **kwargs)

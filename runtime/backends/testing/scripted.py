"""ScriptedBackend: a deterministic fake engine for tests and examples (like DSPy's DummyLM).

Responses come from a list (served in order, cycling), a mapping from prompt substring to
response(s), or a callable ``(request) -> str``. Tokens are whitespace-separated words, so
``"a b c"`` is 3 tokens. Latency is a constant, a per-token delay, or a callable; ``generate_stream`` delivers the
response word by word (``token_latency`` before each).
It is a fake: it runs no model and is named so everywhere it is used. For assertions it
records the newest ``keep`` requests it served (``requests``) and rids it aborted (default
10,000 each; ``keep=None`` records all), so a long-running ``certa serve --backend scripted``
stays bounded; ``served`` counts every request. docs/backends.md ("The scripted backend, for
tests") describes the response formats.

Example:
    >>> import asyncio
    >>> from certa.runtime.types import GenRequest
    >>> b = ScriptedBackend(responses={"capital": "Paris", "2+2": ["4", "four"]})
    >>> asyncio.run(b.generate(GenRequest(prompt="What is 2+2?", rid="a"))).text
    '4'
    >>> asyncio.run(b.generate(GenRequest(prompt="What is 2+2?", rid="b"))).text
    'four'
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
from collections.abc import Callable, Mapping, Sequence as Seq
from typing import Union

from certa.runtime.errors import BackendError, ConfigError
from certa.runtime.types import Capabilities, GenRequest, GenResult, ScoreRequest, ScoreResult
from certa.runtime.backends.base import Backend, BackendSequence

Responder = Union[Seq[str], Mapping[str, Union[str, Seq[str]]], Callable[[GenRequest], str], None]
_WORD = re.compile(r"\S+\s*|\s+")


def words(text: str) -> list[str]:
    """Split ``text`` into the scripted backend's tokens (a word plus its trailing space)."""
    return _WORD.findall(text)


def default_response(req: GenRequest) -> str:
    """A deterministic pseudo-answer derived from the prompt and seed (demo use only)."""
    digest = hashlib.sha256(f"{req.prompt}|{req.seed}|{req.temperature}".encode()).digest()
    return f"Let me think step by step. The answer is \\boxed{{{digest[0] % 8 + 1}}}."


class ScriptedBackend(Backend):
    """Deterministic fake backend. See the module docstring for the response formats.

    Args:
        responses: list / mapping / callable / None (None: :func:`default_response`).
        latency: seconds per request, or ``callable(req) -> seconds``.
        token_latency: extra seconds per generated token.
        probe: ``callable(text_so_far, suffix) -> str`` answering probes of sequences; when
            given, sequences are native and rollback-exact (``capabilities.rollback_probe``).
        scores: ``callable(ScoreRequest) -> {option: prob}`` for ``score``.
        fail: ``callable(req) -> Exception | None`` to inject failures.
        keep: how many of the newest requests (and aborted rids) to record for assertions
            (``None``: all; a server running on this backend for days needs a bound).
    """

    def __init__(
        self,
        responses: Responder = None,
        *,
        latency: float | Callable[[GenRequest], float] = 0.0,
        token_latency: float = 0.0,
        probe: Callable[[str, str], str] | None = None,
        scores: Callable[[ScoreRequest], dict[str, float]] | None = None,
        fail: Callable[[GenRequest], Exception | None] | None = None,
        keep: int | None = 10_000,
    ) -> None:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ConfigError(f"ScriptedBackend keep must be a positive int or None, not {keep!r}")
        self._responses = responses
        self._cycle = itertools.cycle(responses) if isinstance(responses, (list, tuple)) and responses else None
        self._keyed: dict[str, itertools.cycle] = {}
        self._latency = latency
        self._token_latency = token_latency
        self._probe = probe
        self._scores = scores
        self._fail = fail
        self._live: dict[str, asyncio.Task | None] = {}
        self._keep = keep
        self.requests: list[GenRequest] = []  # the newest `keep` requests served, in order (for assertions)
        self.aborted: list[str] = []  # rids aborted while live (the newest `keep`)
        self.abort_calls: list[str] = []  # rids abort() was called with (the newest `keep`)
        self.served = 0  # every request served (generations, sequences, probes)
        self.capabilities = Capabilities(rollback_probe=probe is not None, score=True, streaming=True, name="scripted")

    def _record(self, log: list, item: object) -> None:
        """Append ``item`` to one of the records, keeping its newest ``keep`` entries (trimmed
        in batches of ``keep // 4``, so recording stays O(1) per request)."""
        log.append(item)
        keep = self._keep
        if keep is not None and len(log) > keep + keep // 4:
            del log[: len(log) - keep]

    def _served(self, req: GenRequest) -> None:
        self.served += 1
        self._record(self.requests, req)

    # ---- responses ------------------------------------------------------------------
    def respond(self, req: GenRequest) -> str:
        """The full text this backend answers ``req`` with (before ``max_tokens``/stops)."""
        r = self._responses
        if r is None:
            return default_response(req)
        if callable(r):
            return r(req)
        if self._cycle is not None:
            return next(self._cycle)
        if isinstance(r, Mapping):
            for key, value in r.items():
                if key in req.prompt:
                    if isinstance(value, str):
                        return value
                    cyc = self._keyed.setdefault(key, itertools.cycle(value))
                    return next(cyc)
            raise BackendError(f"scripted backend has no response for prompt {req.prompt[:60]!r}",
                               program=req.program_id or None, step=req.step or None, branch=req.branch)
        raise BackendError("scripted backend has an empty response list")

    def _delay(self, req: GenRequest, n_tokens: int) -> float:
        base = self._latency(req) if callable(self._latency) else self._latency
        return base + self._token_latency * n_tokens

    @staticmethod
    def _cut(text: str, req: GenRequest) -> tuple[str, int, str]:
        finish = "stop"
        for s in req.stop:
            i = text.find(s)
            if i >= 0:
                text = text[:i]
        toks = words(text)
        if len(toks) > req.max_tokens:
            toks, finish = toks[: req.max_tokens], "length"
        return "".join(toks), len(toks), finish

    # ---- protocol -------------------------------------------------------------------
    async def generate(self, req: GenRequest) -> GenResult:
        return await self._serve(req, None)

    async def generate_stream(self, req: GenRequest, on_text: Callable[[str], None]) -> GenResult:
        """Stream word by word: ``latency`` first, then ``token_latency`` before each word."""
        return await self._serve(req, on_text)

    async def _serve(self, req: GenRequest, on_text: Callable[[str], None] | None) -> GenResult:
        if not req.rid:
            raise BackendError("request has no rid", program=req.program_id or None, step=req.step or None)
        self._served(req)
        if self._fail is not None and (exc := self._fail(req)) is not None:
            raise exc
        text, n, finish = self._cut(self.respond(req), req)
        self._live[req.rid] = asyncio.current_task()
        sent = 0
        try:
            if on_text is None:
                delay = self._delay(req, n)
                await asyncio.sleep(delay if delay > 0 else 0)
            else:
                base = self._latency(req) if callable(self._latency) else self._latency
                await asyncio.sleep(base if base > 0 else 0)
                for word in words(text):
                    await asyncio.sleep(self._token_latency if self._token_latency > 0 else 0)
                    if req.rid not in self._live:
                        break  # aborted between words
                    on_text(word)
                    sent += 1
        except asyncio.CancelledError:
            self._live.pop(req.rid, None)
            raise
        if self._live.pop(req.rid, "gone") == "gone":  # aborted while sleeping
            return GenResult(text="".join(words(text)[:sent]), tokens=sent, finish_reason="abort", rid=req.rid)
        return GenResult(text=text, tokens=n, prompt_tokens=len(words(req.prompt)), finish_reason=finish,
                         rid=req.rid, token_logprobs=[0.0] * n if req.logprobs else None)

    async def abort(self, rid: str) -> bool:
        self._record(self.abort_calls, rid)
        task = self._live.pop(rid, None)
        if task is None:
            return False
        self._record(self.aborted, rid)
        if task is not asyncio.current_task() and not task.done():
            task.cancel()
        return True

    def live_rids(self) -> set[str]:
        return set(self._live)

    async def score(self, req: ScoreRequest) -> ScoreResult:
        if self._scores is None:
            return await super().score(req)
        self._live[req.rid] = asyncio.current_task()
        try:
            await asyncio.sleep(self._delay(GenRequest(prompt=req.prompt), 1))
        finally:
            self._live.pop(req.rid, None)
        return ScoreResult(probs=dict(self._scores(req)), prompt_tokens=len(words(req.prompt)), rid=req.rid)

    async def open_sequence(self, req: GenRequest) -> BackendSequence:
        if self._probe is None:
            return await super().open_sequence(req)
        return ScriptedSequence(self, req)


class ScriptedSequence(BackendSequence):
    """A native scripted sequence: the whole response is fixed at open, revealed chunk by chunk."""

    def __init__(self, backend: ScriptedBackend, req: GenRequest) -> None:
        super().__init__(req)
        self.backend = backend
        full, _, finish = backend._cut(backend.respond(req), req)
        self._words = words(full)
        self._final_reason = finish
        self.prompt_tokens = len(words(req.prompt))
        backend._served(req)

    async def _wait(self, rid: str, n: int) -> None:
        b = self.backend
        b._live[rid] = asyncio.current_task()
        try:
            await asyncio.sleep(b._delay(self.req, n))
        finally:
            b._live.pop(rid, None)

    async def extend(self, max_new_tokens: int) -> GenResult:
        if self.finished:
            return GenResult(text="", tokens=0, finish_reason=self.finish_reason or "stop", rid=self.rid)
        chunk = self._words[self.tokens: self.tokens + max_new_tokens]
        await self._wait(self.rid, len(chunk))
        self.tokens += len(chunk)
        self.text += "".join(chunk)
        if self.tokens >= len(self._words):
            self.finished, self.finish_reason = True, self._final_reason
        return GenResult(text="".join(chunk), tokens=len(chunk), rid=self.rid,
                         finish_reason=self.finish_reason or "length")

    async def probe(self, suffix: str, max_tokens: int = 20, *, rid: str = "") -> GenResult:
        assert self.backend._probe is not None
        rid = rid or f"{self.rid}.probe"
        answer = self.backend._probe(self.text, suffix)
        toks = words(answer)[:max_tokens]
        self.backend._served(GenRequest(prompt=self.req.prompt + self.text + suffix, rid=rid,
                                        kind="probe", program_id=self.req.program_id))
        await self._wait(rid, len(toks))
        return GenResult(text="".join(toks), tokens=len(toks), prompt_tokens=len(words(suffix)), rid=rid,
                         token_logprobs=[0.0] * len(toks))  # a fake: certain of every probe token

    async def close(self) -> None:
        self.backend._live.pop(self.rid, None)

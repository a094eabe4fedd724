"""The backend protocol every engine implements, plus the generic sequence fallback.

A backend serves ``GenRequest``/``ScoreRequest`` objects, aborts by exact rid, reports the
rids it still holds, and may offer *sequences*: a live generation that can be extended
chunk by chunk and probed with exact KV rollback (``Capabilities.rollback_probe``).
Backends without native sequences get :class:`ChunkedSequence`, which re-issues
``prompt + text so far`` as new requests (cheap where the engine caches prefixes).

Example:
    >>> import asyncio
    >>> from certa.runtime.backends.testing.scripted import ScriptedBackend
    >>> from certa.runtime.types import GenRequest
    >>> b = ScriptedBackend(responses=["four"])
    >>> asyncio.run(b.generate(GenRequest(prompt="2+2?", rid="r1"))).text
    'four'
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable
from typing import Any

from certa.runtime.types import Capabilities, GenRequest, GenResult, ScoreRequest, ScoreResult


class Backend(abc.ABC):
    """Abstract engine. Subclasses implement ``generate``, ``abort`` and ``live_rids``."""

    capabilities: Capabilities = Capabilities()

    @abc.abstractmethod
    async def generate(self, req: GenRequest) -> GenResult:
        """Generate a completion for ``req``. Cancelling the awaiting task must stop the work."""

    @abc.abstractmethod
    async def abort(self, rid: str) -> bool:
        """Abort the request with this exact rid; True if it was live. Unknown rids are ignored."""

    @abc.abstractmethod
    def live_rids(self) -> set[str]:
        """Rids the backend is still working on (queued or running)."""

    async def generate_stream(self, req: GenRequest, on_text: Callable[[str], None]) -> GenResult:
        """``generate``, calling ``on_text(piece)`` on the event loop with each new piece of
        text as it is decoded; the pieces join to the result's ``text``. Cancelling and
        aborting behave as for ``generate``.

        Default (backends that cannot stream, ``capabilities.streaming`` False): generate,
        then one piece with the whole text.
        """
        out = await self.generate(req)
        if out.text:
            on_text(out.text)
        return out

    async def score(self, req: ScoreRequest) -> ScoreResult:
        """Probability of each option as the continuation of ``req.prompt``.

        Default: greedy-generate a few tokens once and put all mass on the option it starts
        with (a coarse fallback for engines without logprobs).
        """
        out = await self.generate(GenRequest(prompt=req.prompt, max_tokens=4, temperature=0.0,
                                             rid=req.rid, program_id=req.program_id, step=req.step,
                                             branch=req.branch, priority=req.priority, kind="score",
                                             chat=req.chat))
        text = out.text.strip().lower()
        probs = {o: (1.0 if text.startswith(o.lower()) else 0.0) for o in req.options}
        if not any(probs.values()):
            probs = {o: 1.0 / len(req.options) for o in req.options}
        return ScoreResult(probs=probs, prompt_tokens=out.prompt_tokens, tokens=out.tokens, rid=req.rid)

    async def open_sequence(self, req: GenRequest) -> "BackendSequence":
        """Start a live sequence for ``req`` (prompt only; nothing is decoded yet)."""
        return ChunkedSequence(self, req)

    async def close(self) -> None:
        """Release engine resources. Idempotent."""

    async def __aenter__(self) -> "Backend":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class BackendSequence(abc.ABC):
    """A live generation that grows chunk by chunk and can be probed between chunks."""

    def __init__(self, req: GenRequest) -> None:
        self.req = req
        self.text = ""
        self.tokens = 0
        self.finished = False
        self.finish_reason: str | None = None
        self.prompt_tokens = 0

    @property
    def rid(self) -> str:
        return self.req.rid

    @abc.abstractmethod
    async def extend(self, max_new_tokens: int) -> GenResult:
        """Decode up to ``max_new_tokens`` more tokens; returns only the new chunk."""

    @abc.abstractmethod
    async def probe(self, suffix: str, max_tokens: int = 20, *, rid: str = "") -> GenResult:
        """Append ``suffix``, decode greedily, then forget both: the sequence is unchanged."""

    async def close(self) -> None:
        """Free the sequence's resources."""


class ChunkedSequence(BackendSequence):
    """Generic sequence over any backend: each chunk and probe is a separate request.

    Exactness caveat: re-tokenising ``prompt + text`` at chunk boundaries can differ from
    one continuous decode; backends with ``rollback_probe`` avoid this.
    """

    def __init__(self, backend: Backend, req: GenRequest) -> None:
        super().__init__(req)
        self.backend = backend
        self._chunk = 0

    def _sub(self, tag: str, suffix: str = "", **overrides) -> GenRequest:
        """The request that continues the sequence (plus ``suffix``): a plain prompt grows by the
        text so far; a chat request keeps its user turn and continues the assistant turn."""
        r = self.req
        grown = {"assistant_prefix": r.assistant_prefix + self.text + suffix} if r.chat \
            else {"prompt": r.prompt + self.text + suffix}
        fields = dict(prompt=r.prompt, max_tokens=r.max_tokens, temperature=r.temperature,
                      top_p=r.top_p, top_k=r.top_k, seed=r.seed, stop=r.stop, rid=f"{r.rid}.{tag}",
                      program_id=r.program_id, step=r.step, branch=r.branch, priority=r.priority,
                      prefix_hint=r.prefix_hint, kind=r.kind, logprobs=r.logprobs, chat=r.chat, system=r.system)
        fields.update(grown)
        fields.update(overrides)
        return GenRequest(**fields)

    async def extend(self, max_new_tokens: int) -> GenResult:
        if self.finished:
            return GenResult(text="", tokens=0, finish_reason=self.finish_reason or "stop", rid=self.rid)
        budget = min(max_new_tokens, self.req.max_tokens - self.tokens)
        seed = None if self.req.seed is None else self.req.seed + self._chunk
        sub = self._sub(f"c{self._chunk}", max_tokens=max(budget, 0), seed=seed)
        self._chunk += 1
        out = await self.backend.generate(sub)
        self.text += out.text
        self.tokens += out.tokens
        self.prompt_tokens += out.prompt_tokens
        if out.finish_reason != "length" or self.tokens >= self.req.max_tokens:
            self.finished = True
            self.finish_reason = out.finish_reason if self.tokens < self.req.max_tokens else "length"
        return out

    async def probe(self, suffix: str, max_tokens: int = 20, *, rid: str = "", stop: tuple[str, ...] = (),
                    temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> GenResult:
        """A separate request for the prompt, the text so far and ``suffix``; greedy unless a
        ``temperature`` is given (protocol extensions: ``stop``, ``temperature``, ``top_p``, ``seed``)."""
        sub = self._sub("probe", suffix, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=0,
                        stop=tuple(stop), seed=seed, kind="probe",
                        logprobs=1 if self.backend.capabilities.logprobs else 0)
        if rid:
            sub.rid = rid
        return await self.backend.generate(sub)


def probe_kwargs(seq: Any, **wanted: Any) -> dict[str, Any]:
    """The protocol extensions in ``wanted`` (e.g. ``close_brace=True``) that ``seq.probe``
    accepts; the others are dropped (a probe without them gives the same answer, at more tokens)."""
    try:
        params = inspect.signature(seq.probe).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(wanted)
    return {k: v for k, v in wanted.items() if k in params}

"""The llama.cpp engine's bookkeeping: KV slots, jobs (requests, sequences, scores), probes, text.

Everything here is plain data owned by the engine thread. A *slot* is one llama.cpp sequence
id with the tokens its KV holds (``kv``). A *job* is one request, live sequence or score: it
waits in the queue until it gets a slot, then evaluates its ``pending`` tokens (the prompt
remainder, or the one sampled token not yet in the KV) chunk by chunk. Logits never survive
an iteration in continuous batching, so a job always keeps at least its last token pending
until it needs to sample: that is what makes exact probe rollback cheap.

Example:
    >>> t = TextTail(stops=("\\n\\n",))
    >>> t.push(b"4"), t.push(b"2.\\n"), t.push(b"\\nmore")
    (False, False, True)
    >>> t.text
    '42.'
"""

from __future__ import annotations

import asyncio
import codecs
import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from certa.runtime.scheduling.scheduler import Ticket
from certa.runtime.types import GenResult

JobKind = Literal["gen", "seq", "score"]


class TextTail:
    """Incremental UTF-8 text of generated tokens with stop-string detection and trimming."""

    __slots__ = ("_close_brace", "_depth", "_dec", "stopped", "stops", "text")

    def __init__(self, stops: tuple[str, ...] = (), *, close_brace: bool = False) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""
        self.stops = tuple(s for s in stops if s)
        self.stopped = False
        self._close_brace, self._depth = close_brace, 0

    def _unmatched_brace(self, start: int) -> int:
        """Index just past the first ``}`` that closes a brace opened before the text began, or -1.
        Escaped ``\\{``/``\\}`` are not structural (as in ``extract_probe_answer``)."""
        for i in range(start, len(self.text)):
            ch = self.text[i]
            if ch in "{}" and i > 0 and self.text[i - 1] == "\\":
                continue
            self._depth += 1 if ch == "{" else -1 if ch == "}" else 0
            if self._depth < 0:
                return i + 1
        return -1

    def push(self, piece: bytes) -> bool:
        """Append a token's bytes; True (and text trimmed before the stop) when a stop string appears."""
        start = len(self.text)
        self.text += self._dec.decode(piece)
        cut = -1
        for s in self.stops:
            i = self.text.find(s, max(0, start - len(s) + 1))
            if i >= 0 and (cut < 0 or i < cut):
                cut = i
        if self._close_brace:
            end = self._unmatched_brace(start)
            if end >= 0 and (cut < 0 or end <= cut):
                cut = end
        if cut >= 0:
            self.text = self.text[:cut]
            self.stopped = True
        return self.stopped

    def flush(self) -> None:
        if not self.stopped:
            self.text += self._dec.decode(b"", final=True)


@dataclass(eq=False, slots=True)
class Slot:
    """One llama.cpp sequence id: the tokens in its KV (positions 0..len-1) and its owner job."""

    id: int
    kv: list[int] = field(default_factory=list)
    owner: Job | None = None
    used: int = 0  # iteration when last touched (LRU eviction of cached KV)


@dataclass(eq=False, slots=True)
class Probe:
    """A probe on a live sequence: suffix tokens decoded (greedily, or sampled at ``temperature``),
    then rolled back exactly."""

    rid: str
    suffix: list[int]
    max_tokens: int
    future: asyncio.Future
    base_len: int = 0  # logical length (kv + pending) of the sequence when the probe began
    sampler: Any = None
    out: list[int] = field(default_factory=list)
    text: TextTail = field(default_factory=TextTail)
    aborted: bool = False
    logps: list[float] = field(default_factory=list)  # log-probability of each (greedy) probe token
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0


@dataclass(eq=False, slots=True)
class Job:
    """One unit of engine work. ``budget``: tokens it may sample now (extend chunk / max_tokens)."""

    rid: str
    kind: JobKind
    prompt: list[int]
    loop: asyncio.AbstractEventLoop
    ticket: Ticket
    owned: bool = False  # a runtime sent it (and aborts it): the backend does not abort it on cancel
    program_id: str = ""
    max_tokens: int = 0
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    token_kind: str = "main"
    options: list[tuple[str, list[int]]] | None = None  # score jobs: option → candidate first tokens
    # engine-thread state
    slot: Slot | None = None
    pending: list[int] = field(default_factory=list)
    prompt_left: int = 0
    budget: int = 0
    sampler: Any = None
    out: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    text: TextTail = field(default_factory=TextTail)
    cached: int = 0
    finished: bool = False
    finish_reason: str | None = None
    aborted: bool = False
    future: asyncio.Future | None = None
    probe: Probe | None = None
    chunk_tokens: int = 0  # sequences: tokens / text already returned by earlier extends
    chunk_text: int = 0
    reported_prompt: bool = False
    waiting: Job | None = None  # a leader whose prompt prefill this job waits to share
    on_text: Callable[[str], None] | None = None  # streaming (gen jobs): called on ``loop`` with new text
    context: contextvars.Context | None = None  # the requester's context, where ``on_text`` runs
    streamed: int = 0  # characters of ``text.text`` handed to ``on_text``

    def __post_init__(self) -> None:
        self.pending = list(self.prompt)
        self.prompt_left = len(self.prompt)
        self.text = TextTail(self.stop)

    @property
    def needs_logits(self) -> bool:
        """Whether the last pending token must produce logits (sampling, scoring or probing)."""
        return self.budget > 0 or self.kind == "score" or self.probe is not None

    @property
    def idle(self) -> bool:
        """A sequence between operations (its slot may be preempted and recomputed later)."""
        return self.kind == "seq" and self.future is None and self.probe is None

    def evaluable(self) -> int:
        """How many pending tokens can be evaluated now (all but the last unless it must sample)."""
        if self.aborted or (self.finished and self.probe is None):
            return 0
        return len(self.pending) if self.needs_logits else max(0, len(self.pending) - 1)

    def result(self, finish_reason: str | None = None) -> GenResult:
        """The GenResult for this job's current output (for sequences: the chunk since the last one)."""
        text = self.text.text[self.chunk_text:] if len(self.text.text) >= self.chunk_text else ""
        tokens = len(self.out) - self.chunk_tokens
        first = not self.reported_prompt
        return GenResult(text=text, tokens=tokens, prompt_tokens=len(self.prompt) if first else 0,
                         finish_reason=finish_reason or self.finish_reason or "length",  # type: ignore[arg-type]
                         rid=self.rid, cached_prompt_tokens=self.cached if first else 0,
                         token_logprobs=list(self.logps[self.chunk_tokens:]) if self.logprobs else None)

    def mark_reported(self) -> None:
        self.chunk_tokens = len(self.out)
        self.chunk_text = len(self.text.text)
        self.reported_prompt = True


def stream_text(job: Job, final: bool = False) -> None:
    """Hand ``job``'s new text to its ``on_text`` on its loop (engine thread → loop). Until
    ``final``, the last ``len(longest stop) - 1`` characters are held back: a stop string
    that completes later trims them, and text once handed out is never taken back."""
    if job.on_text is None:
        return
    text = job.text.text
    hold = 0 if final or not job.text.stops else max(map(len, job.text.stops)) - 1
    end = max(job.streamed, len(text) - hold)
    if end <= job.streamed:
        return
    piece, job.streamed = text[job.streamed:end], end
    try:
        job.loop.call_soon_threadsafe(job.on_text, piece, context=job.context)
    except RuntimeError:  # the loop is closed: nobody is listening any more
        pass


def deliver(loop: asyncio.AbstractEventLoop, fut: asyncio.Future | None, value: Any = None,
            exc: BaseException | None = None) -> None:
    """Resolve ``fut`` on its loop from any thread (first resolution wins; closed loops are ignored)."""
    if fut is None:
        return

    def settle() -> None:
        if not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


__all__ = ["Job", "JobKind", "Probe", "Slot", "TextTail", "deliver", "stream_text"]

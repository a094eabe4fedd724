"""Token streaming inside a step: ``ctx.gen(..., stream=True)`` and the :class:`TokenChunk` it yields.

``ctx.gen(prompt, stream=True)`` returns a :class:`TokenStream` instead of a coroutine. The
request goes the usual way — one scheduler ticket, retries, token accounting, abort on
cancel — and its text arrives as it is decoded::

    async for chunk in ctx.gen(prompt, stream=True, max_tokens=256):
        print(chunk.text, end="")            # TokenChunk: text, rid, program_id, step, branch, attempt

    stream = ctx.gen(prompt, stream=True)
    async for chunk in stream: ...
    stream.result                            # the GenResult, as ``await ctx.gen(prompt)`` gives it

    result = await ctx.gen(prompt, stream=True)   # consume the stream, return the GenResult

Nothing is sent until the stream is first iterated or awaited. A backend that cannot stream
(``capabilities.streaming`` False) yields one chunk with the whole text. A retried request
streams again from its start under a new rid: its chunks carry ``attempt`` 1, 2, ... (a
consumer showing text clears it when ``attempt`` changes; ``stream.text`` holds the current
attempt's text). Cancelling the consuming step cancels the request (aborted on the backend);
``async with`` (or ``await stream.aclose()``) aborts it when leaving early, otherwise an
abandoned stream runs on until it ends or its program does.

Under ``Runtime.stream(..., mode="tokens")`` every ``ctx.gen`` streams (the step still gets
its GenResult) and each chunk also goes out as a ``token`` event.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from certa.runtime.types import GenRequest, GenResult

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.context import Context

__all__ = ["STREAM_TOKENS", "TokenChunk", "TokenStream", "attempt_of", "token_emitter", "tokens_wanted", "want_tokens"]

STREAM_TOKENS: contextvars.ContextVar[bool] = contextvars.ContextVar("certa_stream_tokens", default=False)
"""Set in a task under ``Runtime.stream(mode="tokens")``: every ``ctx.gen`` streams (``tokens_wanted()``
reads it; ``ctx.gen`` reads it directly, one frame fewer on the hot path)."""
_ATTEMPT = re.compile(r"~r(\d+)$")
_END = object()


@dataclass(frozen=True, slots=True)
class TokenChunk:
    """A piece of generated text: which request (``rid``), program, step and branch produced it,
    and the ``attempt`` (0 first; a retry streams again from its start)."""

    text: str
    rid: str
    program_id: str
    step: str
    branch: int
    attempt: int = 0


def attempt_of(rid: str) -> int:
    """The attempt a rid names: ``p:s:0:3`` is 0, its retry ``p:s:0:3~r2`` is 2."""
    m = _ATTEMPT.search(rid)
    return int(m.group(1)) if m else 0


def tokens_wanted() -> bool:
    """True inside a program run by ``Runtime.stream(..., mode="tokens")``: every gen streams."""
    return STREAM_TOKENS.get()


def want_tokens() -> contextvars.Token:
    """Make every ``ctx.gen`` in the current context (and tasks started from it) stream."""
    return STREAM_TOKENS.set(True)


def token_emitter(ctx: "Context", req: GenRequest) -> Callable[[str, str], None]:
    """An ``on_text(rid, piece)`` that publishes each piece of ``req``'s current attempt as a
    ``token`` event (a failed attempt's late pieces are dropped)."""
    def on_text(rid: str, piece: str) -> None:
        if rid == req.rid:
            ctx.emit("token", rid=rid, text=piece, attempt=attempt_of(rid))
    return on_text


class TokenStream:
    """What ``ctx.gen(..., stream=True)`` returns: an async iterator of :class:`TokenChunk`,
    awaitable for the :class:`~certa.runtime.types.GenResult` (see the module docs)."""

    def __init__(self, ctx: "Context", make_request: Callable[[], GenRequest]) -> None:
        self._ctx = ctx
        self._make = make_request
        self._req: GenRequest | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[GenResult] | None = None
        self._attempt = 0
        self._pieces: list[str] = []
        self._streamed = False
        self._done = False
        self._closed = False
        self.result: GenResult | None = None

    @property
    def rid(self) -> str | None:
        """The request's rid (its current attempt's), once sent."""
        return None if self._req is None else self._req.rid

    @property
    def text(self) -> str:
        """The text streamed so far by the current attempt."""
        return "".join(self._pieces)

    def _start(self) -> None:
        if self._task is None:
            self._req = self._make()  # limit errors (CT205) raise here, before anything is sent
            run = self._ctx.run
            run.sequences.append(self)  # the program's cleanup closes it (cancels the request)
            self._task = asyncio.ensure_future(self._send())

    async def _send(self) -> GenResult:
        assert self._req is not None
        try:
            return await self._ctx.run.submit(self._req, self._ctx, on_text=self._on_text)
        finally:
            if self in self._ctx.run.sequences:
                self._ctx.run.sequences.remove(self)
            self._queue.put_nowait(_END)

    def _on_text(self, rid: str, piece: str) -> None:
        req = self._req
        if self._closed or req is None or rid != req.rid:
            return  # closed, or a failed attempt's late text
        attempt = attempt_of(rid)
        if attempt != self._attempt:
            self._attempt, self._pieces = attempt, []
        self._pieces.append(piece)
        self._streamed = True
        ctx = self._ctx
        self._queue.put_nowait(TokenChunk(piece, rid, ctx.program_id, ctx.step, ctx.branch, attempt))
        ctx.emit("token", rid=rid, text=piece, attempt=attempt)

    def __aiter__(self) -> "TokenStream":
        return self

    async def __anext__(self) -> TokenChunk:
        self._start()
        if self._done or self._closed:
            raise StopAsyncIteration
        assert self._task is not None
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            self._task.cancel()  # the consuming step was cancelled: so is its request
            raise
        if item is not _END:
            return item
        self._done = True
        if self._task.cancelled():
            if self._closed:
                raise StopAsyncIteration
            raise asyncio.CancelledError()
        self.result = self._task.result()  # the request's error, if it failed, raises here
        if not self._streamed and self.result.text:  # nothing streamed (a path that does not): one chunk
            self._streamed = True
            self._pieces = [self.result.text]
            ctx = self._ctx
            return TokenChunk(self.result.text, self.result.rid or self.rid or "", ctx.program_id, ctx.step,
                              ctx.branch, self._attempt)
        raise StopAsyncIteration

    async def collect(self) -> GenResult:
        """Consume the rest of the stream; the GenResult."""
        async for _ in self:
            pass
        if self.result is None:
            raise asyncio.CancelledError()  # closed before it finished: there is no result
        return self.result

    def __await__(self) -> Generator[Any, None, GenResult]:
        return self.collect().__await__()

    async def close(self) -> None:
        """Stop: cancel the request if it is still running (it is aborted on the backend)."""
        self._closed = True
        if self in self._ctx.run.sequences:
            self._ctx.run.sequences.remove(self)
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    aclose = close

    async def __aenter__(self) -> "TokenStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

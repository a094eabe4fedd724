"""``Runtime.stream``: run one program and iterate what it does while it runs.

Modes (``mode=``; a tuple of modes yields ``(mode, part)`` pairs):

=============  ==============================================================================
``updates``    :class:`StepUpdate` per finished graph step: program, step, branch, the update
               dict the step returned (``{}`` for none)
``tokens``     :class:`~certa.runtime.token_stream.TokenChunk` per piece of generated text: every
               ``ctx.gen`` of the program streams (sequence chunks count too)
``certaindex`` :class:`CertaindexUpdate` per certaindex measurement: knob, value, tokens, signals
``values``     :class:`StateValues` per finished step: the whole state after its update merged
               (a copy; LangGraph's ``"values"``), the last one the final state
``events``     every raw :class:`~certa.runtime.events.Event` (``step_end`` carries the update)
=============  ==============================================================================

Parts of the program's sub-programs (``ctx.call``) come too, named by their ``program_id``.
When the program ends, iteration stops and ``stream.result`` holds its
:class:`~certa.runtime.result.Result`; a program that failed raises its error (a
``CertaError``) after its last part. Leaving early — ``break`` then ``await stream.aclose()``,
or an ``async with`` block — cancels the program: its steps stop and its backend requests are
aborted. A stream dropped without closing is cancelled when it is garbage collected, and a
consumer task cancelled while it waits cancels the program too.

Example:
    >>> import asyncio
    >>> from certa.runtime import Runtime, Program, Knob
    >>> class Twice(Program):  # asks the same question twice; its answer is both replies
    ...     knob = Knob("iterations", cap=2)
    ...     def __init__(self, q): super().__init__(); self.state = {"q": q, "answer": ""}
    ...     async def execute(self, ctx):
    ...         self.state["answer"] += (await ctx.gen(self.state["q"])).text
    ...         self.knob_used += 1
    ...         return self.knob_used < 2
    >>> async def main():
    ...     async with Runtime(backend="scripted").stream(Twice, mode="tokens", q="hi") as s:
    ...         text = "".join([c.text async for c in s])
    ...     return text == s.result.answer != ""
    >>> asyncio.run(main())
    True
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Union

from certa.runtime.errors import ConfigError
from certa.runtime.events import Event, bind_sink
from certa.runtime.token_stream import TokenChunk, want_tokens

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.result import Result
    from certa.runtime.runtime import Runtime

__all__ = ["CertaindexUpdate", "ProgramStream", "STREAM_MODES", "StateValues", "StepUpdate", "StreamMode",
           "StreamPart", "values_emitter"]

StreamMode = Literal["updates", "tokens", "certaindex", "values", "events"]
STREAM_MODES: tuple[str, ...] = ("updates", "tokens", "certaindex", "values", "events")
_END = object()
_VALUES: contextvars.ContextVar[bool] = contextvars.ContextVar("certa_stream_values", default=False)


@dataclass(frozen=True, slots=True)
class StepUpdate:
    """A graph step finished: the update dict it returned (as returned, before the reducers)."""

    program_id: str
    step: str
    branch: int
    update: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CertaindexUpdate:
    """A certaindex measurement: the combined ``value`` at ``knob`` units and ``tokens`` spent."""

    program_id: str
    knob: int
    value: float
    tokens: int
    signals: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StateValues:
    """The whole state after a finished step (``step``/``branch``: the branch whose update was
    merged last; ``None`` when no step has finished): a copy, unchanged by later steps."""

    program_id: str
    step: str | None
    branch: int | None
    state: Any


StreamPart = Union[StepUpdate, TokenChunk, CertaindexUpdate, StateValues, Event]


def values_emitter(runtime: "Runtime", program: Any) -> Callable[[], None] | None:
    """Inside ``Runtime.stream(mode="values")``: a function that emits ``program``'s state now as a
    ``values`` event (the Runtime calls it after every step); None otherwise (nothing per step)."""
    if not _VALUES.get():
        return None

    def emit() -> None:
        state = program.state
        snap = state.model_copy(deep=True) if hasattr(state, "model_copy") else copy.deepcopy(state)
        history = getattr(program, "history", None)
        step, branch = history[-1] if history else (None, None)
        runtime.events.emit("values", program.program_id, step, branch, state=snap)
    return emit


def _part(mode: str, ev: Event) -> StreamPart | None:
    """The part ``ev`` makes in ``mode`` (None: nothing)."""
    if mode == "events":
        return ev
    d = ev.data
    if mode == "updates" and ev.kind == "step_end" and d.get("ok", True):
        update = d.get("update")
        return StepUpdate(ev.program_id, ev.step or "", ev.branch or 0, dict(update) if isinstance(update, dict) else {})
    if mode == "tokens" and ev.kind == "token":
        return TokenChunk(d["text"], d["rid"], ev.program_id, ev.step or "", ev.branch or 0, d.get("attempt", 0))
    if mode == "values" and ev.kind == "values":
        return StateValues(ev.program_id, ev.step, ev.branch, d["state"])
    if mode == "certaindex" and ev.kind == "certaindex":
        return CertaindexUpdate(ev.program_id, d.get("knob", 0), d["value"], d.get("tokens", 0),
                                dict(d.get("signals") or {}))
    return None


class _Collector:
    """The sink bound in the program's task: turns its events into parts on the queue. Holds
    no reference to the :class:`ProgramStream`, so a dropped stream can be collected (and
    cancel its program) while the program task still runs."""

    __slots__ = ("modes", "pairs", "queue")

    def __init__(self, modes: tuple[str, ...], pairs: bool) -> None:
        self.modes, self.pairs = modes, pairs
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def __call__(self, ev: Event) -> None:
        for mode in self.modes:
            part = _part(mode, ev)
            if part is not None:
                self.queue.put_nowait((mode, part) if self.pairs else part)


async def _drive(runtime: "Runtime", program: Any, inputs: dict[str, Any], sink: _Collector,
                 thread: dict[str, Any]) -> "Result":
    # the program's own task: the bound sink and the token/values flags reach every task it starts
    bind_sink(runtime.events, sink)
    if "tokens" in sink.modes:
        want_tokens()
    if "values" in sink.modes:
        _VALUES.set(True)
    return await runtime.run_root(program, inputs, **thread)


class ProgramStream:
    """What :meth:`Runtime.stream <certa.runtime.Runtime.stream>` returns: an async iterator
    of parts (see the module docs) and an async context manager that cancels on exit."""

    def __init__(self, runtime: "Runtime", program: Any, mode: str | Sequence[str], inputs: dict[str, Any],
                 thread: dict[str, Any] | None = None) -> None:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
        bad = [m for m in modes if m not in STREAM_MODES]
        if bad or not modes:
            raise ConfigError(f"unknown stream mode {bad[0] if bad else mode!r}",
                              hint="mode is one of " + ", ".join(STREAM_MODES) + " (or a tuple of them)")
        self._runtime, self._program, self._inputs = runtime, program, inputs
        self._thread = thread or {}  # thread_id, interrupts, command: as Runtime.run takes them
        self._sink = _Collector(modes, not isinstance(mode, str))
        self._queue = self._sink.queue
        self._task: asyncio.Task[Result] | None = None
        self._done = False
        self.result: Result | None = None

    @property
    def modes(self) -> tuple[str, ...]:
        return self._sink.modes

    def _start(self) -> None:
        if self._task is None:
            queue = self._queue
            self._task = asyncio.ensure_future(_drive(self._runtime, self._program, self._inputs, self._sink,
                                                      self._thread))
            self._task.add_done_callback(lambda _: queue.put_nowait(_END))

    def __aiter__(self) -> "ProgramStream":
        return self

    async def __anext__(self) -> Any:
        self._start()
        if self._done:
            raise StopAsyncIteration
        assert self._task is not None
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            self._task.cancel()  # the consumer gave up: so does the program (its requests are aborted)
            raise
        if item is not _END:
            return item
        self._done = True
        if self._task.cancelled():
            raise StopAsyncIteration
        self.result = self._task.result()
        if self.result.error is not None:
            raise self.result.error
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop: cancel the program if it still runs; returns once its requests are aborted."""
        self._done = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if task is not None and task.done() and not task.cancelled() and task.exception() is None:
            self.result = task.result()

    async def __aenter__(self) -> "ProgramStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __del__(self) -> None:
        task = getattr(self, "_task", None)
        if task is not None and not task.done():
            try:
                task.cancel()  # dropped mid-run: the program must not run on unobserved
            except RuntimeError:  # its loop is closed already
                pass

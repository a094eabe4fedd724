"""SimBackend: a Backend whose requests finish when the SIMULATED engine says so (no model runs).

What a request says (its text, tokens, finish reason) comes from a *content* backend — any
:class:`~certa.runtime.backends.base.Backend`; trace replay uses
:class:`~certa.eval.replay_backend.ReplayBackend`. When it takes comes from
:class:`~.engine.SimEngine`: the request enters the engine with the content's token counts
(``prompt_tokens`` when the content reports none; a program's requests share their prompt
as a cached prefix) and its future resolves at the engine iteration that emits its last
token. Sequences (``open_sequence``) grow in chunks that extend the program's cached prefix;
probes read it and are rolled back (``rollback_probe``).

The engine steps when the event loop is idle at the current instant, i.e. after every
program has reacted to the last completions. On a :class:`~.clock.VirtualClockLoop` that
makes time simulated (the engine runs closed-form decode stretches up to the next timer);
on an ordinary loop the engine steps one iteration at a time in real time. The Runtime hands
it its scheduler (``attach_scheduler``): the same policy object orders the engine's queue
and picks preemption victims, and a program's cached prefix is dropped once the scheduler
no longer knows the program.

Tokens an aborted request had decoded are spent although no result carries them; they are
kept per program in :attr:`SimBackend.wasted` (main/probe).

Example:
    >>> import asyncio
    >>> from certa.runtime import Knob, Program, Runtime
    >>> from certa.runtime.backends.testing.scripted import ScriptedBackend
    >>> from certa.runtime.sim.clock import run_virtual
    >>> from certa.runtime.sim.cost_model import CostModel
    >>> from certa.runtime.sim.engine import EngineConfig
    >>> class Ask(Program):
    ...     knob = Knob("iterations", cap=1)
    ...     async def execute(self, ctx):
    ...         self.state = (await ctx.gen("2+2?", max_tokens=8)).text; self.knob_used += 1
    ...         return False
    >>> sim = SimBackend(ScriptedBackend(responses=["4 4 4"]), EngineConfig(10_000), CostModel(0.01, 0.0, 0.0, 0.0))
    >>> async def main():
    ...     res = await Runtime(sim).run(Ask)
    ...     return res.state, res.tokens.main, round(asyncio.get_running_loop().time(), 3)
    >>> run_virtual(main())   # one prefill iteration emits the first token, then one decode each (0.01 s)
    ('4 4 4', 3, 0.03)
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from certa.runtime.backends.base import Backend, BackendSequence
from certa.runtime.scheduling.scheduler import ProgramInfo, Scheduler, Ticket
from certa.runtime.sim.cost_model import CostModel
from certa.runtime.sim.engine import EngineConfig, SimEngine, SimRequest
from certa.runtime.types import Capabilities, GenRequest, GenResult, TokenUsage

__all__ = ["SimBackend", "SimSequence"]


class SimBackend(Backend):
    """Requests served by ``content`` and timed by a :class:`SimEngine` (see the module docstring).

    Args:
        content: the backend that says what each request returns.
        engine, cost: the simulated engine's limits and iteration cost model.
        prompt_tokens: prompt length for content that reports none (replay keys carry no
            prompt): a number, or ``callable(request) -> int``.
        record: keep one :class:`~.cost_model.IterationRecord` per iteration in ``engine.stats``.
    """

    def __init__(self, content: Backend, engine: EngineConfig, cost: CostModel, *,
                 prompt_tokens: int | Callable[[GenRequest], int] = 200, record: bool = False) -> None:
        self.content = content
        self.engine = SimEngine(engine, cost, record=record)
        self.prompt_tokens = prompt_tokens
        self.capabilities = Capabilities(rollback_probe=True, score=False, name="sim")
        self.scheduler: Scheduler | None = None
        self.wasted: dict[str, TokenUsage] = {}
        self.preemptions: dict[str, int] = {}
        self._live: dict[str, tuple[SimRequest, asyncio.Future]] = {}
        self._seq = itertools.count()
        self._wake_pending = False
        self._busy = False

    def attach_scheduler(self, scheduler: Scheduler | None) -> None:
        """Order the engine's queue and preemptions with ``scheduler``'s policy (the Runtime calls this)."""
        self.scheduler = scheduler
        if scheduler is not None:
            self.engine.policy = scheduler.policy

    def prompt_of(self, req: GenRequest) -> int:
        """The prompt length the engine prefills for ``req`` when its content reports none."""
        return self.prompt_tokens(req) if callable(self.prompt_tokens) else self.prompt_tokens

    # ---- Backend --------------------------------------------------------------------
    async def generate(self, req: GenRequest) -> GenResult:
        res = await self.content.generate(req)
        prompt = res.prompt_tokens or self.prompt_of(req)
        r = await self.run(req, req.rid, prompt=prompt, output=res.tokens, shared=prompt, max_tokens=req.max_tokens)
        res.prompt_tokens, res.cached_prompt_tokens = prompt, r.cached_at_admit  # a fresh result: ours to fill
        return res

    async def open_sequence(self, req: GenRequest) -> "SimSequence":
        return SimSequence(self, req, await self.content.open_sequence(req))

    async def abort(self, rid: str) -> bool:
        entry = self._live.pop(rid, None)
        if entry is None:
            return False
        r, fut = entry
        self.engine.abort(r)
        self._waste(r)
        self._count_preemptions(r)
        if not fut.done():
            fut.cancel()
        return True

    def _waste(self, r: SimRequest) -> None:
        self.wasted.setdefault(r.pid, TokenUsage()).add("probe" if r.kind == "probe" else "main", r.generated)

    def live_rids(self) -> set[str]:
        return set(self._live)

    # ---- the engine -----------------------------------------------------------------
    async def run(self, req: GenRequest, rid: str, *, prompt: int, output: int, shared: int,
                  extends_prefix: bool = False, kind: str = "main", max_tokens: int | None = None) -> SimRequest:
        """Put one request on the engine under ``rid`` and wait until it has emitted ``output`` tokens."""
        loop = asyncio.get_running_loop()
        r = SimRequest(rid, req.program_id or req.prefix_hint or rid, prompt=prompt, output=max(1, output),
                       shared=shared, extends_prefix=extends_prefix, kind=kind, max_tokens=max_tokens)
        info = self.scheduler.programs.get(r.pid) if self.scheduler is not None else None
        now = self.engine_time(loop)
        r.ticket = Ticket(rid, info or ProgramInfo(r.pid, arrival=loop.time()), now, seq=next(self._seq))
        if info is not None:
            self.engine.policy.stamp(r.ticket)
        fut = loop.create_future()
        self._live[rid] = (r, fut)
        self.engine.add(r, now)
        self._wake(loop)
        try:
            await fut
        except asyncio.CancelledError:
            if not await self.abort(rid):  # it finished in the engine but nobody will read it: spent anyway
                self._waste(r)
            raise
        return r

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._busy or self._wake_pending:
            return
        self._wake_pending = True
        when_idle = getattr(loop, "call_when_idle", loop.call_soon)  # real time: step at once
        when_idle(lambda: self._step(loop))

    # ---- time: the loop's own (virtual, or real with one iteration a step); subclasses map it
    def engine_time(self, loop: asyncio.AbstractEventLoop) -> float:
        """The engine's clock now (here the loop's)."""
        return loop.time()

    def horizon(self, loop: asyncio.AbstractEventLoop, now: float) -> float:
        """How far (engine time) one step may run decode iterations before it must look again."""
        next_deadline = getattr(loop, "next_deadline", None)
        until = next_deadline() if next_deadline is not None else now  # real time: one iteration
        return until if until is not None else float("inf")

    def schedule_end(self, loop: asyncio.AbstractEventLoop, start: float, end: float, done: list[SimRequest]) -> None:
        """Call :meth:`_complete` when the step ending at engine time ``end`` is over."""
        loop.call_at(end, self._complete, loop, done)

    def _step(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wake_pending = False
        self._drop_ended_programs()
        if self.engine.idle:
            return
        now = self.engine_time(loop)
        t, done = self.engine.step(now, self.horizon(loop, now))
        self._busy = True
        self.schedule_end(loop, now, t, done)

    def _complete(self, loop: asyncio.AbstractEventLoop, done: list[SimRequest]) -> None:
        self._busy = False
        for r in done:
            entry = self._live.pop(r.rid, None)
            if entry is not None and entry[0] is r:
                self._count_preemptions(r)
                if not entry[1].done():
                    entry[1].set_result(None)
        if not self.engine.idle:
            self._wake(loop)

    def _count_preemptions(self, r: SimRequest) -> None:
        if r.preemptions:
            self.preemptions[r.pid] = self.preemptions.get(r.pid, 0) + r.preemptions

    def _drop_ended_programs(self) -> None:
        """Free the cached prefix of every program the scheduler no longer knows (it ended)."""
        if self.scheduler is None:
            return
        known = self.scheduler.programs
        for pid in [p for p in self.engine.prefix if p not in known]:
            self.engine.drop_program(pid)


class SimSequence(BackendSequence):
    """A live sequence on the simulated engine: chunks extend the program's prefix, probes roll back."""

    def __init__(self, backend: SimBackend, req: GenRequest, inner: BackendSequence) -> None:
        super().__init__(req)
        self.backend, self.inner = backend, inner
        self.prompt_tokens = inner.prompt_tokens or backend.prompt_of(req)
        self._chunks = itertools.count()

    def _mirror(self) -> None:
        inner = self.inner
        self.text, self.tokens, self.finished, self.finish_reason = inner.text, inner.tokens, inner.finished, \
            inner.finish_reason

    async def extend(self, max_new_tokens: int) -> GenResult:
        context = self.prompt_tokens + self.inner.tokens
        out = await self.inner.extend(max_new_tokens)
        if out.tokens > 0:
            await self.backend.run(self.req, self.rid, prompt=context, output=out.tokens, shared=context,
                                   extends_prefix=True, max_tokens=max_new_tokens)
        self._mirror()
        return out

    async def probe(self, suffix: str, max_tokens: int = 20, *, rid: str = "") -> GenResult:
        context = self.prompt_tokens + self.inner.tokens
        out = await self.inner.probe(suffix, max_tokens, rid=rid)
        rid = rid or f"{self.rid}.probe{next(self._chunks)}"
        await self.backend.run(self.req, rid, prompt=context + (out.prompt_tokens or 1), output=out.tokens,
                               shared=context, kind="probe", max_tokens=max_tokens)
        return out

    async def close(self) -> None:
        await self.inner.close()

"""ProgramRun: the per-program request path (scheduling, abort on cancel, retries, token counts)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from certa.runtime.errors import BackendError, RequestTimeoutError
from certa.runtime.program import Program
from certa.runtime.scheduling.scheduler import ProgramInfo, Ticket
from certa.runtime.types import GenRequest, GenResult, ScoreRequest, ScoreResult, TokenKind

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.runtime import Runtime
    from certa.runtime.subprogram import Pacer

T = TypeVar("T")


class ProgramRun:
    """Bookkeeping for one running program: rids in flight, open sequences, counters."""

    __slots__ = ("runtime", "program", "backend", "info", "inflight", "sequences", "rid_counter", "parent", "salt",
                 "calls", "aborted", "pacer", "children")

    def __init__(self, runtime: "Runtime", program: Program, parent: "ProgramRun | None",
                 salt: int | None = None, pacer: "Pacer | None" = None) -> None:
        self.runtime = runtime
        self.program = program
        self.backend = runtime.backend
        self.parent = parent
        self.salt = salt  # a sub-program's seed salt (certa.runtime.seeds); None for a root program
        self.calls: dict[tuple[str, int], int] | None = None  # (step, branch) -> sub-programs it called
        self.aborted: list[str] = []  # rids aborted while the program was being closed (Result.aborted)
        self.pacer = pacer  # a spawned sub-program's: its main requests wait for the parent (certa.runtime.subprogram)
        self.children: list[Any] = []  # sub-programs started with ctx.spawn, cancelled with this run
        self.inflight: set[str] = set()
        self.sequences: list[Any] = []
        self.rid_counter = itertools.count()
        # a sub-program (ctx.call) schedules as part of its root program's gang: it shares its info
        self.info = parent.info if parent is not None else ProgramInfo(
            program.program_id, arrival=runtime.scheduler.clock(), knob_cap=program.knob_cap,
            name=program.display_name)

    async def abort(self, rid: str) -> None:
        """Abort ``rid`` on the backend if it is still in flight: the one place the runtime aborts.

        The rid leaves ``inflight`` first, so a request is aborted once however many paths give
        up on it (its awaiting task cancelled, a failure, the program's cleanup).
        """
        if rid not in self.inflight:
            return
        self.inflight.discard(rid)
        self.aborted.append(rid)
        try:
            await self.backend.abort(rid)
        except Exception:  # noqa: BLE001 - a failing abort must not hide why we abort
            pass

    async def guard(self, rid: str, work: Awaitable[Any], kind: TokenKind, ctx, *, retryable_abort: bool = False) -> Any:
        """Await backend ``work`` for ``rid``; abort it on cancellation or failure; count its tokens.

        ``retryable_abort``: a result the engine aborted on its own raises a retryable
        BackendError (before its tokens are counted) instead of being returned.
        """
        self.inflight.add(rid)
        events = self.runtime.events
        listening = events.may_listen and events.active  # read once: a request's sent/done events come in pairs
        if listening:
            events.emit("request_sent", self.program.program_id, ctx.step, ctx.branch, rid=rid, token_kind=kind)
        deadlines = self.runtime.deadlines  # RuntimeLimits.request_timeout, as in timed(), without its frame
        deadline = deadlines.enter(self.runtime.limits.request_timeout)
        try:
            try:
                res = await work
            finally:
                deadlines.leave(deadline)
        except BaseException as exc:  # cancelled, timed out or failed mid-stream: free the rid on the engine
            late = isinstance(exc, asyncio.CancelledError) and deadlines.fired(deadline)
            await self.abort(rid)
            if late:
                raise self._timeout_error(rid, ctx) from None
            raise
        finally:
            self.inflight.discard(rid)
        if retryable_abort and getattr(res, "finish_reason", None) == "abort":  # the engine dropped it, not us
            raise BackendError("the engine aborted the request", retryable=True, program=self.program.program_id,
                               step=ctx.step, branch=ctx.branch)
        self._count(res, kind)
        if listening:
            events.emit("request_done", self.program.program_id, ctx.step, ctx.branch, rid=rid, token_kind=kind,
                        tokens=res.tokens)
        return res

    def timed(self, work: Awaitable[T], rid: str, ctx) -> Awaitable[T]:
        """``work`` bounded by ``RuntimeLimits.request_timeout``: every backend request awaits
        through here (``guard``, opening a sequence); past it, RequestTimeoutError (CT208)."""
        return self.runtime.deadlines.bound(work, self.runtime.limits.request_timeout,
                                             lambda: self._timeout_error(rid, ctx))

    def _timeout_error(self, rid: str, ctx) -> RequestTimeoutError:
        return RequestTimeoutError(f"no answer to request {rid} within {self.runtime.limits.request_timeout:g}s",
                                   retryable=self.runtime.retry.retry_timeouts, program=self.program.program_id,
                                   step=ctx.step, branch=ctx.branch,
                                   hint="raise RuntimeLimits.request_timeout for slow backends")

    def _count(self, res: GenResult | ScoreResult, kind: TokenKind) -> None:
        usage = self.program.tokens
        usage.requests += 1
        usage.add(kind, res.tokens)
        usage.prompt += max(0, res.prompt_tokens - getattr(res, "cached_prompt_tokens", 0))
        if self.parent is None:  # a sub-program's tokens reach its root when it finishes
            self.info.tokens = usage.total
        if not self.info.prefix_tokens and getattr(res, "prompt_tokens", 0):
            self.info.prefix_tokens = int(res.prompt_tokens)  # the program's shared prompt: KV budget accounting

    async def _admitted(self, ticket: Ticket) -> None:
        """Wait until the scheduler admits ``ticket`` (when limits make it wait)."""
        sched = self.runtime.scheduler
        try:
            await sched.acquire(ticket)
        except asyncio.CancelledError:
            # admitted while our cancel was in flight (the waiter was cancelled first, so
            # acquire cannot tell): give the slot back; release is a no-op otherwise
            sched.release(ticket)
            raise

    async def _retrying(self, req: GenRequest | ScoreRequest, est: int, hint: str | None,
                        make: Callable[[], Awaitable[Any]], kind: TokenKind, ctx) -> Any:
        """Send ``req``; retry retryable backend errors (bounded, jittered) under a fresh rid.

        The request has ONE scheduling ticket for all its attempts: the scheduler admits it,
        an engine that orders its own batches (llama.cpp) orders it by it (it looks it up by
        rid), and backends with native priority (SGLang) get the policy's priority from it.
        Tokens count only for the attempt that succeeds; a failed attempt's rid is aborted.
        """
        if self.pacer is not None and kind == "main":
            await self.pacer.gate()
        sched = self.runtime.scheduler
        ticket = sched.ticket(req.rid, self.info, est, hint)
        if self.backend.capabilities.priority:
            req.priority = sched.policy.priority(ticket, sched.clock())
        retry, rng = self.runtime.retry, self.runtime.rng
        for attempt in itertools.count():
            try:  # one attempt, once admitted; its slot is freed when it ends
                if not sched.admit_now(ticket):
                    await self._admitted(ticket)
                try:
                    return await self.guard(ticket.rid, make(), kind, ctx, retryable_abort=True)
                finally:
                    sched.release(ticket)
            except BackendError as exc:
                if not exc.retryable or attempt + 1 >= retry.max_attempts:
                    tries = f" (gave up after {attempt + 1} attempts)" if exc.retryable else ""
                    raise type(exc)(exc.message + tries, retryable=False, program=req.program_id or None,
                                    step=req.step or None, branch=req.branch, hint=exc.hint) from exc
                await asyncio.sleep(retry.delay(attempt, rng))
                req.rid = ticket.rid = f"{req.rid.split('~')[0]}~r{attempt + 1}"
        raise AssertionError("unreachable")

    async def scheduled(self, rid: str, est: int, make: Callable[[], Awaitable[Any]], kind: TokenKind, ctx) -> Any:
        """Send one piece of a live sequence (a chunk or a probe) under its own scheduling ticket.

        Admitted, ordered and released like any request, so the scheduler sees (and orders)
        CoT chunks and probes too; not retried: the sequence's state lives on the engine.
        """
        sched = self.runtime.scheduler
        ticket = sched.ticket(rid, self.info, est, self.program.program_id)
        if not sched.admit_now(ticket):
            await self._admitted(ticket)
        try:
            return await self.guard(rid, make(), kind, ctx)
        finally:
            sched.release(ticket)

    def submit(self, req: GenRequest, ctx, on_text: Callable[[str, str], None] | None = None) -> Awaitable[GenResult]:
        """Send ``req`` (scheduled, retried, counted); ``on_text(rid, piece)``: stream its text,
        each attempt under its own rid (a retry streams again from its start). Returns the
        awaitable (not a coroutine of its own: one frame fewer on every request)."""
        if on_text is None:
            make: Callable[[], Awaitable[Any]] = lambda: self.backend.generate(req)  # noqa: E731
        else:
            def make() -> Awaitable[Any]:
                rid = req.rid  # this attempt's: a late piece of a failed attempt names its own rid
                return self.backend.generate_stream(req, lambda piece: on_text(rid, piece))
        return self._retrying(req, req.max_tokens, req.prefix_hint, make, req.kind, ctx)

    def submit_score(self, req: ScoreRequest, ctx) -> Awaitable[ScoreResult]:
        return self._retrying(req, 1, self.program.program_id, lambda: self.backend.score(req), "score", ctx)

"""The Runtime: runs Programs on a backend through the scheduler, with early exit.

Example:
    >>> import asyncio
    >>> from certa.runtime import Runtime, Program, Knob
    >>> class Echo(Program):
    ...     knob = Knob("iterations", cap=1)
    ...     def __init__(self, q): super().__init__(); self.state = {"q": q, "answer": None}
    ...     async def execute(self, ctx):
    ...         self.state["answer"] = (await ctx.gen(self.state["q"])).text; self.knob_used += 1
    ...         return False
    >>> rt = Runtime(backend="scripted")
    >>> asyncio.run(rt.run(Echo, q="hi")).tokens.main > 0
    True
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from certa.runtime.backends.base import Backend
from certa.runtime.checkpoint import Checkpoint, Checkpointer, Command
from certa.runtime.context import Context
from certa.runtime.deadlines import Deadlines
from certa.runtime.driver import drive
from certa.runtime.errors import CallDepthError, CertaError, ConfigError, StepFailedError
from certa.runtime.events import EventBus
from certa.runtime.program import Program, instantiate
from certa.runtime.limits import RetryPolicy, RuntimeLimits
from certa.runtime.policy import ExitReason
from certa.runtime.program_run import ProgramRun
from certa.runtime.result import Result, result_of
from certa.runtime.scheduling.scheduler import Scheduler
from certa.runtime.scheduling.policies import remaining_steps
from certa.runtime.threads import ThreadRun
from certa.runtime.streaming import ProgramStream, StreamMode, values_emitter
from certa.runtime.subprogram import Child, Pacer
from certa.runtime.types import CertaindexPoint


_START_SLICE = 32  # run_many starts at most this many programs per event-loop iteration


class Runtime:
    """Runs programs on one backend with one scheduler.

    Args:
        backend: a :class:`Backend` or a registered name (``"llamacpp"``, ``"scripted"``, ...; ``"auto"``:
            the installed engine, logged). Required: ``Runtime()`` refuses with a hint, never a fake.
        scheduler: a :class:`Scheduler` (default FCFS with no admission limits).
        limits: input limits; ``retry``: retry policy for retryable backend errors.
        checkpointer: where ``run(..., thread_id=...)`` saves a checkpoint per step (a
            :class:`~certa.runtime.checkpoint.MemoryCheckpointer` or
            :class:`~certa.runtime.checkpoint_sqlite.SqliteCheckpointer`); see :meth:`run`.
    """

    def __init__(self, backend: Backend | str | None = None, *, scheduler: Scheduler | None = None,
                 limits: RuntimeLimits | None = None, retry: RetryPolicy | None = None, seed: int = 0,
                 checkpointer: Checkpointer | None = None, **backend_options: Any) -> None:
        if backend is None or isinstance(backend, str):  # None: refused with a hint, never a silent fake
            from certa.runtime.backends.registry import make_backend
            backend = make_backend(backend, **backend_options)
        elif backend_options:
            raise ConfigError(f"backend options {sorted(backend_options)} given with a backend instance")
        self.backend: Backend = backend
        self.scheduler = scheduler or Scheduler()
        attach = getattr(backend, "attach_scheduler", None)
        if callable(attach):  # engines that form their own batches order them with our policy
            attach(self.scheduler)
        self.limits = limits or RuntimeLimits()
        self.retry = retry or RetryPolicy()
        self.rng = random.Random(seed)
        self.events = EventBus()
        self._ids = itertools.count()
        self._active: dict[str, ProgramRun] = {}
        self._closing: set[str] = set()  # programs being cancelled: their subtrees start nothing new
        self.deadlines = Deadlines()  # RuntimeLimits.request_timeout, one watchdog for all requests
        self.checkpointer = checkpointer
        self._thread_programs: dict[str, Any] = {}  # thread id -> the program last run on it (update_state)

    # ---- public API -----------------------------------------------------------------
    @property
    def active_programs(self) -> dict[str, Program]:
        return {pid: r.program for pid, r in self._active.items()}

    async def run(self, program: Any, /, *, return_errors: bool = False, thread_id: str | None = None,
                  interrupt_before: Sequence[str] | None = None, interrupt_after: Sequence[str] | None = None,
                  command: Command | None = None, **inputs: Any) -> Result:
        """Run ``program`` (a Program, a Program class, or a compiled graph) with ``inputs``.

        A program that ends with an error raises it: the coded :class:`CertaError` (bad inputs
        CT300, a step's exception CT201, a limit CT205, ...) naming program, step and branch,
        chained (``__cause__``) to the exception that caused it. ``return_errors=True`` returns
        the :class:`Result` carrying it instead (``exit_reason="error"``, ``Result.error``): what
        batch runs (``run_many``, datasets, the server) use so one failed problem does not stop
        the rest. Cancellation always raises ``CancelledError``.

        ``thread_id``: run on a checkpointed thread (``Runtime(checkpointer=...)``; CT300
        without one): a checkpoint is saved per completed step, and a later run of the same
        ``thread_id`` — after a crash, an error or an interrupt, in this process or another —
        resumes from the newest without repeating a completed step (inputs may be omitted; if
        given they must be the thread's, CT220). A finished thread returns its result again.
        ``interrupt_before`` / ``interrupt_after``: step names that pause the run (exit reason
        ``interrupted``, an :class:`~certa.runtime.checkpoint.InterruptedResult` naming the
        step) for :meth:`update_state`; a run resumed after a crash keeps its run's interrupts
        unless given others. ``command``: a :class:`~certa.runtime.checkpoint.Command` resuming a
        thread whose step paused in ``ctx.interrupt(value)`` (``resume=``: what it returns) or
        editing its state first (``update=``). See docs/concepts.md "Checkpoints and interrupts".
        """
        if thread_id is None and not interrupt_before and not interrupt_after and command is None:
            result = await self.run_program(program, inputs, parent=None)  # plain: one frame fewer than run_root
        else:
            result = await self.run_root(program, inputs, thread_id, interrupt_before, interrupt_after, command)
        if result.error is not None and not return_errors:
            raise result.error from result.error.__cause__
        return result

    async def run_root(self, program: Any, inputs: dict[str, Any], thread_id: str | None = None,
                     before: Sequence[str] | None = None, after: Sequence[str] | None = None,
                     command: Command | None = None) -> Result:
        """A root program's run (``run``, ``stream``): on its thread when it has one. Never raises
        the program's error: it is on the Result (``run`` raises it unless ``return_errors``)."""
        if thread_id is None and not before and not after and command is None:
            return await self.run_program(program, inputs, parent=None)
        try:
            thread = ThreadRun(self, thread_id, before, after, command).__enter__()
        except CertaError as exc:  # no checkpointer, a bad thread id or command, the thread already running
            name = getattr(program, "name", None) or getattr(program, "__name__", type(program).__name__)
            return Result.refused(name, f"{name}@{thread_id}", exc)
        try:
            self._thread_programs[thread_id] = program  # type: ignore[index]
            return await self.run_program(program, inputs, parent=None, thread=thread)
        finally:
            thread.__exit__()

    def spawn(self, program: Any, inputs: dict[str, Any], *, parent: ProgramRun) -> Child:
        """Start ``program`` as a live sub-program of ``parent`` (``Context.spawn``): bad inputs
        raise here, in the parent's step."""
        self._check_call(parent)
        prog = instantiate(program, inputs)
        child = Child(prog, lambda pacer: self.run_program(prog, {}, parent=parent, pacer=pacer))
        parent.children.append(child)
        return child

    async def run_program(self, program: Any, inputs: dict[str, Any], *, parent: ProgramRun | None,
                   thread: ThreadRun | None = None, salt: int | None = None,
                   pacer: Pacer | None = None) -> Result:
        """Every run goes through here, and its errors are on the Result. With ``parent``: a
        sub-program (``Context.call``; ``salt``
        salts its seeds, :mod:`certa.runtime.seeds`; ``Context.spawn``: ``pacer`` steps it); with
        ``thread`` restored from and checkpointed to its thread."""
        if parent is not None:
            self._check_call(parent)
        try:
            prog = thread.open(program, inputs, instantiate) if thread else instantiate(program, inputs)
            if prog.policy is not None:
                prog.policy.validate(prog)  # a policy that cannot decide on it fails before a token is spent
        except CertaError as exc:  # bad inputs fail this program only, like any other error
            name = getattr(program, "name", None) or getattr(program, "__name__", type(program).__name__)
            exc.program = exc.program or f"{name}-{next(self._ids)}"
            return Result.refused(name, exc.program, exc)
        base = prog.display_name
        # a sub-program's id is its root's id and its own (ids stay short at any depth; the counter keeps them unique)
        prog.program_id = f"{_root(parent).program.program_id}/{base}-{next(self._ids)}" if parent \
            else f"{base}-{next(self._ids)}"
        run = ProgramRun(self, prog, parent, salt, pacer)
        self._active[prog.program_id] = run
        self.scheduler.register(run.info, as_id=prog.program_id)
        self.events.emit("program_start", prog.program_id, name=base, knob_cap=prog.knob_cap)
        t0 = time.perf_counter()
        reason: ExitReason = "done"
        error: CertaError | None = None
        try:
            reason = await self._drive(run, thread)
        except asyncio.CancelledError:
            reason = "cancelled"
            self._closing.add(prog.program_id)  # its subtree may start no new sub-program while it unwinds
            try:
                await self._unwind(run)
            finally:
                self._closing.discard(prog.program_id)
            self.events.emit("exit", prog.program_id, reason=reason, tokens=prog.tokens.total, tokens_saved=0,
                             error=None)
            raise
        except CertaError as exc:
            reason, error = "error", exc
            if exc.program is None:
                exc.program = prog.program_id
        except Exception as exc:  # a bug in user code: name the program
            reason = "error"
            error = StepFailedError(f"{type(exc).__name__}: {exc}", program=prog.program_id)
            error.__cause__ = exc
        finally:
            if reason != "cancelled":
                await self._cleanup(run)
        result = result_of(run, reason, error, time.perf_counter() - t0)
        result = thread.result(result, prog) if thread is not None else result
        self.events.emit("exit", prog.program_id, reason=result.exit_reason, tokens=prog.tokens.total,
                         tokens_saved=result.tokens_saved, error=None if result.error is None else str(result.error))
        if prog.on_result is not None:  # e.g. a self-calibrating program learning from its explored runs
            prog.on_result(result)
        return result

    def stream(self, program: Any, /, mode: StreamMode | Sequence[StreamMode] = "updates", *,
               thread_id: str | None = None, interrupt_before: Sequence[str] | None = None,
               interrupt_after: Sequence[str] | None = None, command: Command | None = None,
               **inputs: Any) -> ProgramStream:
        """Run ``program`` with ``inputs`` and iterate what it does: ``async for part in
        runtime.stream(prog, mode="updates", question=q)``. Modes: ``updates``, ``tokens``,
        ``certaindex``, ``values``, ``events``, or a tuple of them (parts come as ``(mode, part)``);
        see :mod:`certa.runtime.streaming`. ``stream.result`` is the Result once it ends.
        ``thread_id``, the interrupts and ``command`` run it on a thread, as :meth:`run` does."""
        thread = {"thread_id": thread_id, "before": interrupt_before, "after": interrupt_after, "command": command}
        return ProgramStream(self, program, mode, inputs, thread)

    async def run_many(self, items: Iterable[Any], *, concurrency: int | None = None,
                       on_result: Callable[[int, Result], None] | None = None) -> list[Result]:
        """Run many programs at once. ``items``: Programs or ``(program, inputs_dict)`` pairs.

        Results come back in input order; a batch never raises for one program: a failing
        program yields a Result with ``error`` (``run(..., return_errors=True)``) and the others
        run on.
        """
        pairs = [(it, {}) if not isinstance(it, tuple) else it for it in items]
        limit = concurrency or self.limits.max_concurrent_programs
        sem = asyncio.Semaphore(limit) if limit else None
        results: list[Result | None] = [None] * len(pairs)

        async def one(i: int, prog: Any, inputs: dict) -> None:
            if sem is None:
                results[i] = await self.run(prog, return_errors=True, **inputs)
            else:
                async with sem:
                    results[i] = await self.run(prog, return_errors=True, **inputs)
            if on_result is not None:
                on_result(i, results[i])

        tasks: list[asyncio.Future] = []
        try:
            for i, (p, inp) in enumerate(pairs):
                tasks.append(asyncio.ensure_future(one(i, p, inp)))
                if i % _START_SLICE == _START_SLICE - 1:
                    await asyncio.sleep(0)  # start a big batch in slices: bounds event-loop lag
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return results  # type: ignore[return-value]

    def run_sync(self, program: Any, /, *, return_errors: bool = False, **inputs: Any) -> Result:
        """Blocking ``run`` that also works inside a running event loop (Jupyter); raises the
        program's coded error unless ``return_errors=True`` (see :meth:`run`)."""
        return run_blocking(self.run(program, return_errors=return_errors, **inputs))

    def run_many_sync(self, items: Iterable[Any], **kw: Any) -> list[Result]:
        """Blocking :meth:`run_many` (a failing program yields a Result with ``error``)."""
        return run_blocking(self.run_many(items, **kw))

    # ---- threads: checkpoints, interrupts, state history ------------------------------
    def get_state(self, thread_id: str) -> Checkpoint | None:
        """The thread's newest checkpoint (its state, status, next steps), or None."""
        return self._saver("get_state").latest(thread_id)

    def state_history(self, thread_id: str, *, limit: int | None = None) -> list[Checkpoint]:
        """The thread's checkpoints, newest first: the input, one per completed step, edits."""
        return self._saver("state_history").history(thread_id, limit=limit)

    get_state_history = state_history

    def update_state(self, thread_id: str, values: dict[str, Any], *, program: Any = None,
                     overwrite: bool = False) -> Checkpoint:
        """Edit a paused (or crashed) thread's state; the next ``run`` on it resumes from the edit.

        ``values`` is validated like a step's update (CT106 unknown field, CT113 wrong type) and
        merged through the fields' reducers (``overwrite=True``: set as given). ``program``: needed
        only when this Runtime has not run the thread. Returns the ``source="update"`` checkpoint.
        """
        from certa.runtime.threads import update_state
        return update_state(self, thread_id, values, program if program is not None else
                            self._thread_programs.get(thread_id), overwrite)

    def _saver(self, what: str) -> Checkpointer:
        if self.checkpointer is None:
            raise ConfigError(f"{what} needs a checkpointer", hint="Runtime(..., checkpointer=...)")
        return self.checkpointer

    async def close(self) -> None:
        await self.backend.close()

    # ---- internals ------------------------------------------------------------------
    def _check_call(self, parent: ProgramRun) -> None:
        """Refuse a sub-program under a program being cancelled, or deeper than ``max_call_depth``.

        Walks the parent chain (a loop, no recursion): O(depth), and depth is bounded.
        """
        chain: list[str] = []
        run: ProgramRun | None = parent
        while run is not None:
            if run.program.program_id in self._closing:
                raise asyncio.CancelledError()  # the tree is unwinding: growing it would outrun the cancel
            chain.append(run.program.program_id)
            run = run.parent
        limit = self.limits.max_call_depth
        if limit is not None and len(chain) > limit:
            raise CallDepthError(f"sub-program nested {len(chain)} deep, over max_call_depth={limit}: "
                                 + " -> ".join(reversed(chain)), program=parent.program.program_id,
                                 hint="a step that ctx.calls its own graph needs a base case; or raise "
                                      "RuntimeLimits.max_call_depth")

    async def _drive(self, run: ProgramRun, thread: ThreadRun | None = None) -> ExitReason:
        """The one driving loop (:func:`~certa.runtime.driver.drive`) plus the runtime's bookkeeping;
        a thread's run saves a checkpoint per step and its exit (a finished thread does not run)."""
        if thread is not None and thread.finished:
            return thread.latest.status  # type: ignore[union-attr]
        values = values_emitter(self, run.program)  # stream mode "values" only: nothing per step otherwise
        on_step = None if thread is None else functools.partial(thread.save, run.program)
        if values is not None:
            on_step = values if on_step is None else (lambda save=on_step: (save(), values()) and None)
        try:
            reason = await drive(run.program, Context(run, "execute"),
                                 on_certaindex=functools.partial(self._on_certaindex, run),
                                 max_steps=self.limits.max_steps, on_step=on_step)
        finally:
            if run.pacer is not None:
                run.pacer.stop()  # now, before the cleanup yields: a steering parent sees it ended
        if values is not None:
            values()  # drive() calls on_step for the steps it continues past: this is the last one's state
        return reason if thread is None else thread.finish(run.program, reason)

    def _on_certaindex(self, run: ProgramRun, point: CertaindexPoint) -> None:
        """After a certaindex point: refresh the scheduler's estimate (root programs) and emit the event."""
        prog = run.program
        if run.parent is None:  # a sub-program shares its root's info: the root's estimate rules
            info = run.info
            info.certaindex, info.knob_used, info.tokens = point.value, point.knob, point.tokens
            per_unit = point.tokens / (point.knob or 1)
            info.tokens_per_step = per_unit
            info.est_remaining_tokens = per_unit * remaining_steps(prog.policy, prog)
            self.scheduler.rekey(info)  # its waiting tickets' keys may have moved
        if self.events.may_listen and self.events.active:
            self.events.emit("certaindex", prog.program_id, value=point.value, signals=point.signals,
                             knob=point.knob, tokens=point.tokens)

    async def _unwind(self, run: ProgramRun) -> None:
        """A cancelled program's cleanup, run to its end as a task of its own behind a shield.

        A repeated cancel (a second Ctrl-C, ``run_many`` cancelling everything) then stops here
        instead of travelling down the program tree: unshielded, each level's ``gather`` over its
        branches cancels the next level's, one Python frame chain per level (RecursionError at a
        few thousand levels). Each level is cancelled once, by its parent's ``aclose``.
        """
        job = asyncio.ensure_future(self._cleanup(run))
        while True:
            try:
                await asyncio.shield(job)
                return
            except asyncio.CancelledError:
                if job.done():
                    raise  # the cleanup itself was cancelled (the loop is closing)

    async def _cleanup(self, run: ProgramRun) -> None:
        prog = run.program
        try:
            await prog.aclose()
        finally:
            for child in run.children:  # spawned sub-programs still running end with their parent
                await child.cancel()
            for seq in list(run.sequences):
                await seq.close()
            for rid in list(run.inflight):
                await run.abort(rid)
            self.scheduler.unregister(prog.program_id)
            self._active.pop(prog.program_id, None)
            if run.parent is not None:
                run.parent.program.tokens.merge(prog.tokens)


def _root(run: ProgramRun) -> ProgramRun:
    while run.parent is not None:
        run = run.parent
    return run


def run_blocking(coro: Awaitable[Any]) -> Any:
    """Run ``coro`` to completion from sync code, even inside a running loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)  # type: ignore[arg-type]
    with ThreadPoolExecutor(1, thread_name_prefix="certa-sync") as pool:
        return pool.submit(asyncio.run, coro).result()  # type: ignore[arg-type]

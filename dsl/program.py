"""GraphProgram: a compiled graph running as a Program, with per-branch asynchronous progress.

Each branch of a step is its own task; ``execute()`` processes ONE finished branch (merges
its update through the reducers, counts the knob, launches its successors) so a fast
branch never waits for a slow sibling. The runtime reads certaindex and the policy after
every ``execute()``; on early exit ``aclose()`` cancels every branch, which aborts their
in-flight requests on the backend.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from certa.runtime.context import Context
from certa.dsl.errors import UnknownStepError
from certa.runtime.errors import CertaError, ConfigError, LimitExceededError, StepFailedError
from certa.runtime.checkpoint import StepInterrupt
from certa.runtime.program import Program

from certa.dsl import checkpointing
from certa.dsl.graph import END, START, Send, StepSpec
from certa.dsl.lanes import Book, Lanes
from certa.dsl.state import apply_update
from certa.dsl.tasks import Finished, task_maker

if TYPE_CHECKING:  # pragma: no cover
    from certa.dsl.compiler import CompiledGraph


class GraphProgram(Lanes, Program):
    """One run of a compiled graph. Create with ``compiled.new(**inputs)`` or let the Runtime do it."""

    def __init__(self, compiled: "CompiledGraph", inputs: dict[str, Any]) -> None:
        super().__init__()
        self.compiled = compiled
        self.name = compiled.name
        self.knob = compiled.graph.knob
        self.policy = compiled.policy
        try:
            self.state = compiled.graph.state(**inputs)
        except ValidationError as exc:
            raise ConfigError(f"bad inputs for program {compiled.name!r}: {exc.errors()[0]['msg']} "
                              f"({'.'.join(map(str, exc.errors()[0]['loc']))})", program=compiled.name) from None
        self.hit_cap = False
        self.launches: Counter[str] = Counter()
        self.history: list[tuple[str, int]] = []  # (step, branch) in completion order
        self._tasks: dict[int, asyncio.Task] = {}  # branch -> its running task
        self._done = Finished()
        self.book = Book()  # branches, lanes, join groups: what a checkpoint saves (certa.dsl.lanes.Book)
        self._ctx: Context | None = None
        self._new_task: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]] = asyncio.ensure_future
        self._joins: dict[str, list[str]] = {}  # fan-out step -> the steps that join it
        for after, step in compiled.graph.joins:
            self._joins.setdefault(after, []).append(step)
        self.held = checkpointing.Held()  # interrupts: branches and routes held while paused (checkpointing's)
        self.interrupt: tuple[str, str] | None = None  # (step, "before" | "after" | "during") once paused
        self.cancelled: list[tuple[str, int]] = []  # (step, branch) the exit cancelled (aclose)

    # ---- Program interface ----------------------------------------------------------
    async def execute(self, ctx: Context) -> bool:
        if not self.book.started:
            self.book.started = True
            self._ctx, self._new_task = ctx, task_maker()
            g = self.compiled.graph
            if any(s == START for s, _ in g.edges) or any(b.source == START for b in g.branches):
                self._route(START, None)
            else:
                self._enter(g.entry_step or next(iter(g.steps)), None)
        elif self._ctx is None:  # restored from a checkpoint: relaunch its pending branches
            self._ctx, self._new_task = ctx, task_maker()
            checkpointing.resume(self)
        if not self._tasks:
            return self._more()
        done = self._done
        step, branch, update, exc = done.ready() or await done.get()  # ready(): no coroutine when one waits
        self._tasks.pop(branch, None)
        pending = self.book.pending.pop(branch, None)
        if exc is not None:
            if type(exc) is StepInterrupt:  # ctx.interrupt: the branch waits for Command(resume=...)
                checkpointing.hold_ask(self, step, branch, pending or (step, None), exc)
                return bool(self._tasks) or self._more()
            if isinstance(exc, CertaError):
                exc.program, exc.step, exc.branch = exc.program or self.program_id, exc.step or step, exc.branch if exc.branch is not None else branch
                raise exc
            raise StepFailedError(f"{type(exc).__name__}: {exc}", program=self.program_id, step=step,
                                  branch=branch) from exc
        if update:
            if not isinstance(update, dict):
                awaitable = inspect.isawaitable(update)
                if inspect.iscoroutine(update):
                    update.close()
                raise StepFailedError(f"step returned {type(update).__name__}; expected a dict of state updates or None",
                                      program=self.program_id, step=step, branch=branch,
                                      hint="did you forget await?" if awaitable else None)
            self._check_conflicts(step, branch, update)
            apply_update(self.state, update, self.compiled.reducers, program=self.program_id, step=step, branch=branch)
        self.history.append((step, branch))
        if step == self.compiled.knob_step:
            self.knob_used += 1
        payload = pending[1] if pending is not None else None
        if self.held.idle or not checkpointing.hold_route(self, step, branch, payload):  # held: routed on resume
            self.route_finished(step, branch, payload)
        return bool(self._tasks) or self._more()

    def route_finished(self, step: str, branch: int, payload: Any = None) -> None:
        """Route a finished, merged branch: launch its successors, then count it out of its join."""
        self._route(step, branch, payload)
        self.book.lanes.pop(branch, None)
        self._finish_in_group(branch)

    def _more(self) -> bool:
        """Whether branches are still running; when none is and an interrupt holds some, pause."""
        if self._tasks:
            return True
        self.interrupt = self.held.pause()
        return False

    def cap_reached(self) -> bool:
        """Never between steps: the graph enforces its cap when launching (:meth:`_launch`), so
        branches in flight and steps after the knob step still finish (docs/concepts.md, Knob)."""
        return False

    def update_certaindex(self) -> dict[str, float] | None:
        signals = self.compiled.graph.signals
        if not signals:
            return None
        out: dict[str, float] = {}
        for s in signals:
            try:
                out[s.name] = float(s.fn(self.state))
            except CertaError:
                raise
            except Exception as exc:
                raise self._failed(f"certaindex {s.name!r}", exc) from exc
        return out

    def answer(self) -> Any:
        """The ``@answer`` function's value (else the ``answer`` field); an exception in it, or an
        awaitable returned, raises CT201 naming it (the Runtime puts it on ``Result.error``)."""
        fn = self.compiled.graph.answer_fn
        if fn is None:
            return getattr(self.state, "answer", None)
        try:
            out = fn(self.state)
        except CertaError:
            raise
        except Exception as exc:
            raise self._failed(f"@answer {getattr(fn, '__name__', 'answer')!r}", exc) from exc
        if inspect.isawaitable(out):
            if inspect.iscoroutine(out):
                out.close()
            raise StepFailedError(f"@answer {getattr(fn, '__name__', 'answer')!r} returned a {type(out).__name__}, "
                                  "not a value", program=self.program_id, hint="did you forget await? "
                                  "(@answer is called synchronously: compute the answer in a step)")
        return out

    def _failed(self, what: str, exc: Exception, step: str | None = None) -> StepFailedError:
        """CT201 for user code other than a step body (certaindex, router, answer) that raised."""
        last = step or (self.history[-1][0] if self.history else None)
        return StepFailedError(f"{what} raised {type(exc).__name__}: {exc}", program=self.program_id, step=last)

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        if tasks:  # what the exit cancels (Result.cancelled)
            self.cancelled = [(self.book.pending[b][0], b) for b, t in self._tasks.items()
                              if not t.done() and b in self.book.pending]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._ctx = None  # its run is over: the context (and through it the run) is freed without the cycle collector

    def draw(self):
        return self.compiled.draw()

    # ---- checkpoints and interrupts (certa.dsl.checkpointing) ------------------------
    def checkpoint_state(self) -> str:
        return checkpointing.state_json(self)

    def checkpoint_data(self) -> dict[str, Any]:
        return checkpointing.snapshot(self)

    def restore_checkpoint(self, state_json: str, data: dict[str, Any]) -> None:
        checkpointing.restore(self, state_json, data)

    def set_interrupts(self, before: Any = (), after: Any = ()) -> None:
        checkpointing.set_interrupts(self, before, after)

    def edit_state(self, values: dict[str, Any], *, overwrite: bool = False) -> None:
        checkpointing.edit_state(self, values, overwrite=overwrite)

    def interrupt_step(self, step: str, branch: int, value: Any) -> Any:
        """``ctx.interrupt(value)`` of branch ``branch`` (see :func:`checkpointing.ask`)."""
        return checkpointing.ask(self, step, branch, value)

    def resume_interrupts(self, value: Any) -> None:
        checkpointing.resume_interrupts(self, value)

    # ---- scheduling of branches -----------------------------------------------------
    def _route(self, step: str, branch: int | None, payload: Any = None) -> None:
        """Launch what follows a finished branch; its successors join its join group (a join
        after a fan-out waits for every later step of the fan-out's lanes). A loop continues
        the branch's lane with its ``payload``; a router taking ``(state, ctx)`` sees the
        finished branch's context (its ``payload``, ``branch``, ``lane``)."""
        g = self.compiled.graph
        outer = self.book.group_of.get(branch) if branch is not None else None
        for src, dst in g.edges:
            if src == step and dst != END:
                self._enter(dst, step, branch, payload)
        for b in g.branches:
            if b.source != step:
                continue
            try:
                if b.takes_ctx:
                    assert self._ctx is not None
                    out = b.router(self.state, self._ctx.child(step, -1 if branch is None else branch, payload))
                else:
                    out = b.router(self.state)
            except CertaError:
                raise
            except Exception as exc:
                raise self._failed(f"router {getattr(b.router, '__name__', 'router')!r} after {step!r}", exc,
                                   step) from exc
            items = out if isinstance(out, (list, tuple)) else [out]
            sends = sum(isinstance(x, Send) for x in items)
            limit = self._ctx.max_fanout if self._ctx else None
            for bound, what in ((b.max_fanout, "max_fanout"), (limit, "the runtime's max_fanout")):
                if bound is not None and sends > bound:
                    raise LimitExceededError(f"router returned {sends} Sends, over {what}={bound}",
                                             program=self.program_id, step=step)
            fanout = next(self.book.fanouts) if sends > 1 else None  # several Sends: one fan-out
            groups: dict[str, int | None] = {}  # per target step: the Sends of one call are one join group
            for i, x in enumerate(items):
                if x is None or x == END:
                    continue
                if isinstance(x, Send):
                    self._check_step(x.step, step)
                    if x.step not in groups:
                        groups[x.step] = self._new_group(x.step, outer)
                    own = groups[x.step]
                    self._launch(g.steps[x.step], x.payload, None if fanout is None else (fanout, i),
                                 outer if own is None else own)
                else:
                    self._check_step(x, step)
                    self._enter(x, step, branch, payload)  # a route back to its own step continues the lane
            for group in groups.values():
                self._drop_if_empty(group)

    def _check_step(self, name: str, source: str) -> None:
        if name not in self.compiled.graph.steps:
            raise UnknownStepError(f"router after {source!r} returned unknown step {name!r}",
                                   program=self.program_id, step=source)

    def _enter(self, name: str, source: str | None, parent: int | None = None, payload: Any = None, *,
               group: int | None = None) -> None:
        """Enter step ``name`` after a ``parent`` branch of ``source`` (in its lane's join group),
        or in ``group`` (a join entered by :meth:`_release`); a loop (``source == name``) keeps
        the lane's ``payload``."""
        spec = self.compiled.graph.steps[name]
        if source == name:  # a loop continues its own lane (in its fan-out): one new branch per finished branch
            n = 1
        else:
            n = spec.fanout(self.state) if callable(spec.fanout) else spec.fanout
            if spec.max_fanout is not None and n > spec.max_fanout:
                raise LimitExceededError(f"fanout {n} over max_fanout={spec.max_fanout}", program=self.program_id,
                                         step=name)
        limit = self._ctx.max_fanout if self._ctx else None
        if limit is not None and n > limit:
            raise LimitExceededError(f"fanout {n} over the runtime limit {limit}", program=self.program_id, step=name)
        if source == name:
            book = self.book
            lane, group = (book.lanes.get(parent), book.group_of.get(parent)) if parent is not None else (None, None)
            if spec.elastic and lane is not None and self._ctx is not None:
                self._continue_elastic(spec, lane, group, payload)
            else:
                self._launch(spec, payload, lane, group)
            return
        fanout = next(self.book.fanouts) if n > 1 else None
        outer = self.book.group_of.get(parent) if parent is not None else group
        own = self._new_group(name, outer)
        for i in range(n):
            self._launch(spec, None, None if fanout is None else (fanout, i), outer if own is None else own)
        self._drop_if_empty(own)

    def _continue_elastic(self, spec: StepSpec, lane: tuple[int, int], group: int | None, payload: Any = None) -> None:
        """Continue a lane of an elastic fan-out (``Graph.step(elastic=True)``): beside it, up to
        ``fanout`` new lanes while the scheduler has idle capacity beyond one more fan-out's width
        and nobody waits, for work the program is expected to still do (``Context.spare_slots``:
        the slot this lane just freed counts); a lane added that way ends instead once that no
        longer holds, so the fan-out shrinks back to its width."""
        assert self._ctx is not None
        width = spec.fanout if isinstance(spec.fanout, int) else 1
        spare = self._ctx.spare_slots(keep=width)
        if lane[1] < 0 and spare <= 0:  # an added lane, and the room is wanted
            return
        self._launch(spec, payload, lane, group)
        for _ in range(min(spare - 1, width)):
            if self.hit_cap:
                return
            self._launch(spec, payload, (lane[0], None), group)

    def _launch(self, spec: StepSpec, payload: Any, lane: tuple[int, int | None] | None = None,
                group: int | None = None) -> None:
        """Start one branch of ``spec``; ``lane``: its (fan-out, lane) when it is one of several
        (lane ``None``: a new lane of that fan-out, numbered ``-1 - branch``); ``group``: the
        join group it belongs to (see :meth:`_finish_in_group`)."""
        knob_step = self.compiled.knob_step
        if self.knob.cap is not None and (spec.name == knob_step or spec.name in self.compiled.feeds_knob):
            spent = self.tokens.main if self.knob.unit == "tokens" else self.launches[knob_step]
            if spent >= self.knob.cap:  # the cap is spent: no knob unit, nor work only for one, starts
                self.hit_cap = True
                return
        if spec.max_visits is not None and self.launches[spec.name] >= spec.max_visits:
            return
        self.launches[spec.name] += 1
        branch = next(self.book.branch_ids)
        if lane is not None:
            self.book.lanes[branch] = lane if lane[1] is not None else (lane[0], -1 - branch)
        if group is not None:
            self.book.groups[group][1] += 1
            self.book.group_of[branch] = group
        self.book.pending[branch] = (spec.name, payload)
        if self.held.idle or not checkpointing.hold_launch(self, spec.name, branch):  # held: started on resume
            self.start_branch(spec, branch, payload)

    def start_branch(self, spec: StepSpec, branch: int, payload: Any) -> None:
        """Start the task of an allocated branch."""
        assert self._ctx is not None
        ctx = self._ctx.child(spec.name, branch, payload)
        self._tasks[branch] = self._new_task(self._run_step(spec, ctx))

    async def _run_step(self, spec: StepSpec, ctx: Context) -> None:
        events = ctx.run.runtime.events
        listening = events.may_listen and events.active  # emit only when someone listens: ~6% of a step otherwise
        if listening:  # read once: a branch's step_start/step_end come in pairs
            ctx.emit("step_start")
        try:
            if spec.is_async:
                out = await (spec.fn(self.state, ctx) if spec.takes_ctx else spec.fn(self.state))
            else:  # a plain def may block (time.sleep, CPU work): run it off the event loop so
                # other programs keep progressing; on cancel the thread finishes in the background
                out = await (asyncio.to_thread(spec.fn, self.state, ctx) if spec.takes_ctx
                             else asyncio.to_thread(spec.fn, self.state))
            item = (spec.name, ctx.branch, out, None)
        except asyncio.CancelledError:
            raise
        except (Exception, StepInterrupt) as exc:  # delivered to execute(), which names program/step/branch
            item = (spec.name, ctx.branch, None, exc)
        if listening:
            ctx.emit("step_end", ok=item[3] is None, update=item[2])
        self._done.put(item)

"""Live sub-programs: a step starts programs it steers round by round and reads while they run.

``ctx.call(program)`` runs a sub-program to its end and shows only its Result. Some
compositions need more: Self-Consistency over CoT chains stops *all* chains as soon as their
current answers agree, so it must see each chain's answer while the chain is still thinking.
``ctx.spawn(program, **inputs)`` starts a sub-program and returns a :class:`Child`:

* ``await child.advance()`` lets it run until its knob moves (one CoT chunk, one SC round) or
  it ends: each main request it sends (a chunk of a sequence, a generation) waits for the
  parent's permit, so it never runs ahead; the parent advancing several children with
  ``asyncio.gather`` runs them in lock-step, their requests batched by the engine like any
  others (a sub-program that sends no main request runs freely);
* ``child.answer`` (its ``answer()`` on the current state; its Result's once ended),
  ``child.certaindex`` (its latest value), ``child.done``, ``child.result``, ``child.tokens``;
* ``await child.finish()`` runs it to its end unpaced; ``await child.cancel()`` stops it (its
  requests are aborted, its tokens so far are counted).

A child keeps its own certaindex and policy (it may exit early on its own), schedules in its
root program's gang, and its tokens reach the parent when it ends. Children still running
when the parent's run ends are cancelled with it.

Example:
    >>> import asyncio, certa as ct
    >>> class Count(ct.Program):
    ...     knob = ct.Knob("iterations", cap=5)
    ...     async def execute(self, ctx):
    ...         await ctx.gen("one more")
    ...         self.knob_used += 1
    ...         return True
    ...     def update_certaindex(self):
    ...         return self.knob_used / 5
    ...     def answer(self):
    ...         return self.knob_used
    >>> class Parent(ct.Program):
    ...     knob = ct.Knob("iterations", cap=1)
    ...     seen: list = []
    ...     async def execute(self, ctx):
    ...         child = ctx.spawn(Count)
    ...         while await child.advance():
    ...             self.seen.append((child.answer, child.certaindex))
    ...         self.knob_used = 1
    ...         return False
    >>> p = Parent()
    >>> r = ct.Runtime("scripted").run_sync(p)
    >>> p.seen
    [(1, 0.2), (2, 0.4), (3, 0.6), (4, 0.8)]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from certa.runtime.program import Program

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.result import Result

__all__ = ["Child", "Pacer"]


class Pacer:
    """Lets a sub-program send one main request per permit: it awaits :meth:`gate` before each;
    :meth:`step` grants one permit and returns once it waits at the gate again (the work that
    request fed is done: its certaindex recorded, its policy asked) or has ended. The runtime
    calls :meth:`stop` the moment its driving loop returns."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._parked = 0  # times the loop has reached the gate
        self._waiting = False
        self._permits = 0
        self.free = False  # True: the gate no longer waits (run to the end)
        self.ended = False

    async def gate(self) -> None:
        async with self._cond:
            self._parked += 1
            self._waiting = True
            self._cond.notify_all()
            await self._cond.wait_for(lambda: self._permits > 0 or self.free)
            self._waiting = False
            if not self.free:
                self._permits -= 1

    async def step(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._waiting or self.ended)
            if self.ended:
                return
            parked = self._parked
            self._permits += 1
            self._cond.notify_all()
            await self._cond.wait_for(lambda: self._parked > parked or self.ended)

    def stop(self) -> None:
        """The loop has returned: whoever waits in :meth:`step` takes it as ended at its next wake-up."""
        self.ended = True

    async def release(self, *, ended: bool = False) -> None:
        """Stop pacing (the loop runs freely from now on); ``ended``: the loop is over."""
        async with self._cond:
            self.free = True
            self.ended = self.ended or ended
            self._cond.notify_all()


class Child:
    """A running sub-program a step steers (see the module docstring)."""

    def __init__(self, program: Program, start: Callable[[Pacer], Coroutine[Any, Any, "Result"]]) -> None:
        self.program = program
        self.result: Result | None = None
        self._pacer = Pacer()
        self._task = asyncio.ensure_future(self._main(start))

    async def _main(self, start) -> None:
        try:
            self.result = await start(self._pacer)
        finally:
            await asyncio.shield(self._pacer.release(ended=True))

    @property
    def done(self) -> bool:
        return self._task.done()

    async def advance(self) -> bool:
        """Run until the knob moves or the sub-program ends; True while it still runs. A sub-program
        that failed raises its error here (as ``ctx.call`` does)."""
        used = self.program.knob_value
        while not self.done and self.program.knob_value == used:
            await self._pacer.step()
            if self._pacer.ended:
                await asyncio.wait([self._task])
        self._raise_error()
        return not self.done

    async def finish(self) -> "Result | None":
        """Run to the end without pacing; the Result (None if it was cancelled; its error raised)."""
        await self._pacer.release()
        await asyncio.wait([self._task])
        self._raise_error()
        return self.result

    def _raise_error(self) -> None:
        error = self.result.error if self.result is not None else None
        if error is not None and not isinstance(error, asyncio.CancelledError):
            raise error

    async def cancel(self) -> None:
        """Stop it now (its in-flight requests are aborted; its tokens so far are counted)."""
        if not self._task.done():
            self._task.cancel()
        await asyncio.wait([self._task])

    @property
    def answer(self) -> Any:
        """The answer so far: the Result's once ended, else ``answer()`` on the current state."""
        if self.result is not None:
            return self.result.answer
        try:
            return self.program.answer()
        except Exception:  # noqa: BLE001 - a half-built state may not have an answer yet
            return None

    @property
    def exit_reason(self) -> str | None:
        """How it ended (its Result's ``exit_reason``; ``"cancelled"`` when stopped); None while it runs."""
        if not self.done:
            return None
        return self.result.exit_reason if self.result is not None else "cancelled"

    @property
    def certaindex(self) -> float:
        """The latest certaindex value (0.0 before the first)."""
        return self.program.trajectory[-1].value if self.program.trajectory else 0.0

    @property
    def tokens(self):
        return self.program.tokens

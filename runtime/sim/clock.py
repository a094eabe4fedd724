"""A virtual clock for the SIMULATOR: an asyncio event loop whose time only moves when it is idle.

:class:`VirtualClockLoop` is a real asyncio loop (tasks, futures, ``call_at``, ``sleep``
behave as usual) except that ``time()`` is virtual: when no callback is ready, instead of
waiting it first runs the callbacks registered with :meth:`~VirtualClockLoop.call_when_idle`
(a simulated engine steps here, once every program has reacted to the current instant), and
if none is registered it jumps straight to the earliest timer. So the real
:class:`~certa.runtime.Runtime` and :class:`~certa.runtime.scheduling.scheduler.Scheduler` run
programs in simulated time, as fast as the CPU allows. :meth:`~VirtualClockLoop.next_deadline`
tells an engine how far it may run before an outside event (an arrival) is due.

A loop that would wait forever (no ready callback, no timer, nothing idle-pending) raises a
:class:`~certa.runtime.errors.ConfigError` ("simulation stalled") instead of hanging.

Example:
    >>> import asyncio
    >>> async def main():
    ...     loop = asyncio.get_running_loop()
    ...     await asyncio.sleep(3600.0)             # returns at once in real time
    ...     return loop.time()
    >>> run_virtual(main())
    3600.0
"""

from __future__ import annotations

import asyncio
import heapq
import selectors
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from certa.runtime.errors import ConfigError

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real file descriptors without blocking; idle time is spent by the loop instead."""

    loop: "VirtualClockLoop"

    def select(self, timeout: float | None = None):  # type: ignore[override]
        events = super().select(0)
        if events or timeout == 0:
            return events
        self.loop._idle(timeout)
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time (starts at ``start``; see the module docstring)."""

    def __init__(self, start: float = 0.0) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = float(start)
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._timer_seq = 0
        self._on_idle: list[Callable[[], None]] = []

    def time(self) -> float:
        return self._now

    def call_at(self, when, callback, *args, context=None) -> asyncio.TimerHandle:  # type: ignore[override]
        handle = super().call_at(when, callback, *args, context=context)
        self._timer_seq += 1
        heapq.heappush(self._timers, (handle.when(), self._timer_seq, handle))
        return handle

    def call_when_idle(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once, the next time nothing is ready at the current instant."""
        self._on_idle.append(callback)

    def next_deadline(self) -> float | None:
        """When the earliest pending timer is due (None: no timer). Call it when idle."""
        timers = self._timers
        while timers and (timers[0][2].cancelled() or timers[0][0] <= self._now):
            heapq.heappop(timers)  # cancelled, or fired: when idle, every timer due by now has run
        return timers[0][0] if timers else None

    def _idle(self, timeout: float | None) -> None:
        if self._on_idle:
            callbacks, self._on_idle = self._on_idle, []
            for cb in callbacks:
                cb()
            return  # they may have scheduled work at this instant: the loop looks again
        due = self.next_deadline()
        if due is None:
            if timeout is None:
                raise ConfigError("simulation stalled: every task waits and nothing is scheduled",
                                             hint="a request larger than the admission limits?")
            due = self._now + timeout
        self._now = max(self._now, due)


def run_virtual(coro: Coroutine[Any, Any, T], start: float = 0.0) -> T:
    """Run ``coro`` to completion on a fresh :class:`VirtualClockLoop` (like ``asyncio.run``).

    Called where a loop already runs (Jupyter), the simulation gets a thread of its own, as
    :func:`~certa.runtime.runtime.run_blocking` does for live runs.
    """
    def run() -> T:
        with asyncio.Runner(loop_factory=lambda: VirtualClockLoop(start)) as runner:
            return runner.run(coro)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with ThreadPoolExecutor(1, thread_name_prefix="certa-sim") as pool:
        return pool.submit(run).result()


__all__ = ["VirtualClockLoop", "run_virtual"]

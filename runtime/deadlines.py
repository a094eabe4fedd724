"""Request deadlines: ``RuntimeLimits.request_timeout`` enforced by one watchdog per runtime.

A timer per request (``loop.call_later``, ``asyncio.timeout``) costs ~10 µs per request on
the hot path; here a request only enters and leaves a dict, and one watchdog — a timer that
re-arms itself while requests are in flight — wakes every ``timeout / 4`` (at most 1 s) and
cancels the tasks whose requests are overdue. A request therefore times out between ``timeout`` and
``1.25 × timeout`` after it was sent. Only a cancel the watchdog caused becomes the
timeout; one from outside (early exit, Ctrl-C) stays a CancelledError (3.11+: ``uncancel``).
Not ``asyncio.wait_for``: on 3.10/3.11 it can swallow a cancel that lands as the work ends.

Example:
    >>> import asyncio
    >>> async def main():
    ...     d = Deadlines()
    ...     try:
    ...         await d.bound(asyncio.sleep(10), 0.05, lambda: TimeoutError("late"))
    ...     except TimeoutError as exc:
    ...         return str(exc), d.live
    >>> asyncio.run(main())
    ('late', 0)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Deadlines"]

T = TypeVar("T")


class Deadlines:
    """In-flight requests' deadlines and the watchdog that enforces them."""

    def __init__(self) -> None:
        self._live: dict[int, list] = {}  # key -> [deadline, task, fired]
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's (run_sync: a new loop per run)
        self._period = 1.0

    @property
    def live(self) -> int:
        return len(self._live)

    async def bound(self, work: Awaitable[T], timeout: float | None, expired: Callable[[], BaseException]) -> T:
        """Await ``work``; if it takes over ``timeout`` seconds, cancel it and raise ``expired()``."""
        entry = self.enter(timeout)
        try:
            return await work
        except asyncio.CancelledError:
            if self.fired(entry):
                raise expired() from None
            raise
        finally:
            self.leave(entry)

    def enter(self, timeout: float | None) -> list | None:
        """Start a deadline for the current task (None: no timeout); :meth:`leave` ends it.
        The hot path's form of :meth:`bound`: no coroutine of its own."""
        if timeout is None:
            return None
        loop = asyncio.get_running_loop()
        entry = [time.monotonic() + timeout, asyncio.current_task(loop), False]
        self._live[id(entry)] = entry  # the id is unique while the entry is live
        if self._timer is None or timeout < 4.0 * self._period or self._loop is not loop:
            self._arm(min(1.0, timeout / 4))  # checked at a quarter of the shortest timeout, at most every 1 s
        return entry

    def leave(self, entry: list | None) -> None:
        if entry is not None:
            self._live.pop(id(entry), None)

    @staticmethod
    def fired(entry: list | None) -> bool:
        """After a CancelledError in its task: True when this deadline's cancel caused it and
        no other cancel is pending (that one then stays a CancelledError)."""
        if entry is None or not entry[2]:
            return False
        uncancel = getattr(entry[1], "uncancel", None)
        return not (uncancel is not None and uncancel() > 0)

    def _arm(self, period: float) -> None:
        """The watchdog is a self-re-arming timer, not a task: nothing outlives a run."""
        if self._timer is not None:
            self._timer.cancel()
        self._period = period
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(period, self._check)

    def _check(self) -> None:
        self._timer = None
        if not self._live:
            return  # idle: the next request re-arms it
        now = time.monotonic()
        for entry in list(self._live.values()):
            if not entry[2] and entry[0] <= now:
                entry[2] = True
                entry[1].cancel()
        self._arm(self._period)

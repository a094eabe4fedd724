"""Client-side routing over several workers: program affinity, health checks, failover.

A request's affinity key (its program) ranks the workers by rendezvous hashing
(:func:`~certa.runtime.backends.http_common.rank_workers`); it goes to the first worker of
that ranking that is not marked down, so a program's requests share one prefix cache and,
when its worker fails, move together to the next worker of ITS ranking (the other programs
stay where they are). A worker is marked down when a request cannot reach it or its stream
breaks, or after ``fail_after`` failed health probes in a row; a background probe (every
``interval`` seconds, only with two or more workers) re-admits it after one good probe.

Example:
    >>> pool = WorkerPool(["http://a:1", "http://b:1", "http://c:1"])
    >>> first, second, _ = pool.ranked("prog-7")
    >>> pool.route("prog-7") == first
    True
    >>> pool.mark_down(first, "connect refused"); pool.route("prog-7") == second
    True
    >>> pool.mark_up(first); pool.route("prog-7") == first
    True
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from collections import Counter

from certa.runtime.backends.http_common import rank_workers

log = logging.getLogger("certa.runtime.backends")

Probe = Callable[[str], Awaitable[bool]]


class WorkerPool:
    """Workers with up/down state; routes an affinity key to its first healthy worker."""

    def __init__(self, workers: Sequence[str], *, probe: Probe | None = None, interval: float | None = 2.0,
                 fail_after: int = 2) -> None:
        self.workers = list(workers)
        self.down: set[str] = set()
        self.probe = probe
        self.interval = interval
        self.fail_after = max(1, fail_after)
        # the pool's counters (part of the backend's ``metrics()``), by their metric names
        self.stats: Counter[str] = Counter(dict.fromkeys(("failovers", "workers_marked_down", "workers_readmitted",
                                                          "health_probes_failed"), 0))
        self._misses: dict[str, int] = {}
        self._task: asyncio.Task | None = None

    # ---- routing -------------------------------------------------------------------------------
    def ranked(self, key: str) -> list[str]:
        """Every worker, in ``key``'s failover order."""
        return rank_workers(key, self.workers)

    def route(self, key: str, exclude: Sequence[str] = ()) -> str | None:
        """The worker for ``key``: its first healthy one not in ``exclude``. With every worker
        down the first not excluded is still tried (it may be back); None once all are excluded."""
        order = [w for w in self.ranked(key) if w not in exclude]
        healthy = [w for w in order if w not in self.down]
        return (healthy or order or [None])[0]

    # ---- health --------------------------------------------------------------------------------
    def mark_down(self, worker: str, reason: str) -> None:
        if worker in self.down:
            return
        self.down.add(worker)
        self.stats["workers_marked_down"] += 1
        if len(self.workers) > 1:
            log.warning("worker %s marked down (%s); its programs fail over to the next worker", worker, reason)

    def mark_up(self, worker: str) -> None:
        self._misses.pop(worker, None)
        if worker in self.down:
            self.down.discard(worker)
            self.stats["workers_readmitted"] += 1
            log.warning("worker %s is back: re-admitted", worker)

    async def check(self, worker: str) -> bool:
        """Probe one worker now and update its state; True when it answered well."""
        if self.probe is None:
            return worker not in self.down
        try:
            ok = bool(await self.probe(worker))
        except Exception:  # noqa: BLE001 - any probe failure means "not healthy"
            ok = False
        if ok:
            self.mark_up(worker)
        else:
            self.stats["health_probes_failed"] += 1
            self._misses[worker] = self._misses.get(worker, 0) + 1
            if self._misses[worker] >= self.fail_after or worker in self.down:
                self.mark_down(worker, f"{self._misses[worker]} failed health probe(s)")
        return ok

    def start(self) -> None:
        """Start the background prober in the running loop (no-op for one worker or no probe)."""
        if self.probe is None or not self.interval or len(self.workers) < 2:
            return
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._task.get_loop() is loop:
            return
        self._task = loop.create_task(self._monitor())

    async def _monitor(self) -> None:
        while True:
            await asyncio.gather(*(self.check(w) for w in self.workers))
            await asyncio.sleep(self.interval or 1.0)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await task

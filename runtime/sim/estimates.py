"""HistoryScheduler: admission estimates from each program's history (the simulator's experiments).

The runtime's :class:`~certa.runtime.scheduling.scheduler.Scheduler` estimates a request's
decode tokens by its ``max_tokens`` and its KV footprint by the same number: safe, but it
over-reserves for reasoning requests that declare 8k tokens and use 1k. The simulator's
online experiments admit on expectation instead: a request's output estimate is its
program's mean decode tokens per finished request so far (``prior_output`` before the
first), and its KV estimate half of that — its average footprint over its life. Everything
else (ordering, gangs, head-of-line, prefix accounting) is the Scheduler's own.

Example:
    >>> from certa.runtime.scheduling.scheduler import ProgramInfo
    >>> s = HistoryScheduler(prior_output=1000, clock=lambda: 0.0)
    >>> p = ProgramInfo("p", arrival=0.0); s.register(p)
    >>> t = s.ticket("p:0", p, est_tokens=8192); (t.est_tokens, t.kv)
    (1000, 500)
    >>> s._take(t); p.tokens = 300; s.release(t)       # its first request decoded 300 tokens
    >>> t2 = s.ticket("p:1", p, est_tokens=8192); (t2.est_tokens, t2.kv)
    (300, 150)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from certa.runtime.scheduling.admission import AdmissionLimits
from certa.runtime.scheduling.scheduler import ProgramInfo, Scheduler, SchedulingPolicy, Ticket

__all__ = ["HistoryScheduler"]


class HistoryScheduler(Scheduler):
    """A Scheduler whose tickets estimate tokens from program history (see the module docstring)."""

    def __init__(self, policy: SchedulingPolicy | None = None, limits: AdmissionLimits | None = None,
                 clock: Callable[[], float] = time.monotonic, *, prior_output: int = 1000) -> None:
        super().__init__(policy, limits, clock)
        self.prior_output = prior_output
        self._finished: dict[str, int] = {}  # program id -> requests it got back

    def expected_output(self, program: ProgramInfo) -> int:
        """Mean decode tokens per finished request of ``program`` so far, else the prior."""
        n = self._finished.get(program.program_id, 0)
        return int(program.tokens / n) if n else self.prior_output

    def ticket(self, rid: str, program: ProgramInfo, est_tokens: int = 0, prefix_hint: str | None = None,
               kv_tokens: int | None = None) -> Ticket:
        est = self.expected_output(program)
        return super().ticket(rid, program, est, prefix_hint, est // 2 if kv_tokens is None else kv_tokens)

    def release(self, t: Ticket) -> None:
        before = self.ledger.requests
        super().release(t)
        if self.ledger.requests < before:  # it was in flight: one more request came back
            pid = t.program.program_id
            self._finished[pid] = self._finished.get(pid, 0) + 1

    def unregister(self, program_id: str) -> None:
        super().unregister(program_id)
        self._finished.pop(program_id, None)

"""The inter-program scheduler: admission control plus an ordering policy.

Every request a program sends becomes a :class:`Ticket`. The scheduler admits tickets to
the backend while the admission limits allow, in the order its :class:`SchedulingPolicy`
gives. The SAME policy object also orders the llama.cpp engine's per-iteration batch
(``order``), maps to SGLang priorities (``rank``) and drives the simulator.

Example:
    >>> s = Scheduler()                     # FCFS, no limits: tickets pass straight through
    >>> s.policy.name
    'fcfs'
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ProgramInfo:
    """What the scheduler knows of one running program (kept current by the runtime)."""

    program_id: str
    arrival: float
    tokens: int = 0
    knob_used: int = 0
    knob_cap: int | None = None
    certaindex: float | None = None
    est_remaining_tokens: float | None = None
    tokens_per_step: float | None = None
    deadline: float | None = None
    inflight: int = 0
    attained: float = 0.0  # service received (decode tokens), for LAS-style aging


@dataclass(slots=True)
class Ticket:
    """One pending request of one program."""

    rid: str
    program: ProgramInfo
    enqueued: float
    est_tokens: int = 0
    prefix_hint: str | None = None
    seq: int = 0
    waiter: Any = field(default=None, repr=False)


class SchedulingPolicy:
    """Orders tickets; smaller ``key`` runs first. Subclasses override ``key`` (or ``order``)."""

    name = "fcfs"

    def key(self, ticket: Ticket, now: float) -> tuple:
        return (ticket.enqueued, ticket.seq)

    def order(self, tickets: list[Ticket], now: float) -> list[Ticket]:
        """Tickets in the order they should run (used by engines forming a batch)."""
        return sorted(tickets, key=lambda t: self.key(t, now))

    def priority(self, ticket: Ticket, now: float) -> float:
        """A scalar urgency for backends with native priority (lower = sooner)."""
        k = self.key(ticket, now)
        return float(k[0]) if k and isinstance(k[0], (int, float)) else 0.0


FCFS = SchedulingPolicy


@dataclass(slots=True)
class AdmissionLimits:
    """Caps on what is in flight at the backend at once (``None`` = unlimited)."""

    max_requests: int | None = None
    max_tokens: int | None = None


class Scheduler:
    """Admission control + ordering. With no limits it never queues (zero overhead path)."""

    def __init__(self, policy: SchedulingPolicy | None = None, limits: AdmissionLimits | None = None,
                 clock=time.monotonic) -> None:
        self.policy = policy or SchedulingPolicy()
        self.limits = limits or AdmissionLimits()
        self.clock = clock
        self.programs: dict[str, ProgramInfo] = {}
        self._inflight_requests = 0
        self._inflight_tokens = 0
        self._waiting: list[Ticket] = []
        self._seq = itertools.count()

    # ---- program registry -----------------------------------------------------------
    def register(self, info: ProgramInfo) -> None:
        self.programs[info.program_id] = info

    def unregister(self, program_id: str) -> None:
        self.programs.pop(program_id, None)

    # ---- admission ------------------------------------------------------------------
    @property
    def unlimited(self) -> bool:
        return self.limits.max_requests is None and self.limits.max_tokens is None

    def ticket(self, rid: str, program: ProgramInfo, est_tokens: int = 0, prefix_hint: str | None = None) -> Ticket:
        return Ticket(rid=rid, program=program, enqueued=self.clock(), est_tokens=est_tokens,
                      prefix_hint=prefix_hint, seq=next(self._seq))

    def _fits(self, t: Ticket) -> bool:
        lim = self.limits
        if lim.max_requests is not None and self._inflight_requests >= lim.max_requests:
            return False
        if (lim.max_tokens is not None and self._inflight_requests > 0
                and self._inflight_tokens + t.est_tokens > lim.max_tokens):
            return False
        return True

    async def acquire(self, t: Ticket) -> None:
        """Wait until ``t`` may go to the backend."""
        if self.unlimited or (not self._waiting and self._fits(t)):
            self._take(t)
            return
        t.waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(t)
        try:
            await t.waiter
        except asyncio.CancelledError:
            if t in self._waiting:
                self._waiting.remove(t)
            elif t.waiter.done() and not t.waiter.cancelled():
                self.release(t)  # admitted just as we were cancelled
            raise

    def _take(self, t: Ticket) -> None:
        self._inflight_requests += 1
        self._inflight_tokens += t.est_tokens
        t.program.inflight += 1

    def release(self, t: Ticket) -> None:
        """``t`` left the backend; admit whoever is next."""
        self._inflight_requests -= 1
        self._inflight_tokens -= t.est_tokens
        t.program.inflight -= 1
        self._pump()

    def _pump(self) -> None:
        if not self._waiting:
            return
        now = self.clock()
        ordered = self.policy.order(self._waiting, now)
        for t in ordered:
            if not self._fits(t):
                break
            self._waiting.remove(t)
            self._take(t)
            if not t.waiter.done():
                t.waiter.set_result(None)

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def inflight(self) -> int:
        return self._inflight_requests


__all__ = ["AdmissionLimits", "FCFS", "ProgramInfo", "Scheduler", "SchedulingPolicy", "Ticket"]

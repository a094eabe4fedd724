"""What the scheduler orders: :class:`ProgramInfo`, :class:`Ticket` and the policy base class.

A :class:`Ticket` is one pending request of one program; :class:`ProgramInfo` is what the
scheduler knows of that program; a :class:`SchedulingPolicy` orders tickets (FCFS here, the
others in :mod:`certa.runtime.scheduling.policies`). The :class:`~certa.runtime.scheduling.scheduler.Scheduler`
admits tickets in the policy's order.

Example:
    >>> p = ProgramInfo("p1", arrival=0.0)
    >>> a, b = Ticket("p1-a", p, enqueued=1.0), Ticket("p1-b", p, enqueued=0.5)
    >>> [t.rid for t in FCFS().order([a, b], now=2.0)]
    ['p1-b', 'p1-a']
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

@dataclass(slots=True)
class ProgramInfo:
    """What the scheduler knows of one running program (kept current by the runtime/simulator).

    ``est_remaining_tokens`` is the certaindex-informed estimate of decode tokens still to
    come (tokens per step × remaining steps implied by the stop policy); ``prefix_tokens`` is
    the program's shared prompt length (KV budget accounting; 0 = unknown).
    """

    program_id: str
    arrival: float
    tokens: int = 0
    knob_used: int = 0
    knob_cap: int | None = None
    certaindex: float | None = None
    est_remaining_tokens: float | None = None
    tokens_per_step: float | None = None
    inflight: int = 0
    name: str = ""
    prefix_tokens: int = 0
    prefix_resident: bool = False
    last_active: float = 0.0


@dataclass(slots=True)
class Ticket:
    """One pending request of one program.

    ``cached``: prompt tokens already in the engine's prefix cache (engines set it; LPM
    reads it). ``kv_tokens``: the request's own KV estimate (default ``est_tokens``).
    """

    rid: str
    program: ProgramInfo
    enqueued: float
    est_tokens: int = 0
    prefix_hint: str | None = None
    seq: int = 0
    waiter: Any = field(default=None, repr=False)
    cached: int = 0
    kv_tokens: int | None = None
    qpos: int = field(default=-1, repr=False, compare=False)  # position in the wait queue; -1 = not waiting
    qver: int = field(default=0, repr=False, compare=False)  # bumps when re-keyed (stale heap entries)
    past_check: int | None = field(default=None, repr=False, compare=False)  # see SchedulingPolicy.stamp

    @property
    def kv(self) -> int:
        return self.est_tokens if self.kv_tokens is None else self.kv_tokens


class SchedulingPolicy:
    """Orders tickets; smaller ``key`` runs first. FCFS here; see :mod:`certa.runtime.scheduling.policies`.

    Subclasses override ``key`` (or ``order``) and may set ``gang = True`` (the scheduler then
    admits a program's pending tickets as one unit; ``key`` must keep them contiguous).
    Convention: :meth:`priority` is lower = sooner (certa's, as ``GenRequest.priority``; the
    SGLang backends map it to SGLang's integers: ``backends.sglang.http.sglang_priority``);
    :meth:`rank` gives dense integer ranks where, by default, a HIGHER value is scheduled first
    (SGLang's default, unless the server runs with ``--schedule-low-priority-values-first``).
    """

    name = "fcfs"
    gang = False
    widen = False
    """Whether elastic fan-outs may add lanes into idle capacity (:meth:`Scheduler.spare`)."""
    key_stability = "ticket"
    """What ``key`` depends on: ``"ticket"`` (fixed once queued), ``"program"`` (changes only with
    the ticket's ProgramInfo, see :meth:`Scheduler.rekey`, or in ``observe_finish``) or
    ``"dynamic"``. Stable keys let admission use a heap (O(log n) per request) instead of
    sorting every waiting ticket; see :mod:`certa.runtime.scheduling.queue`. A subclass that
    overrides ``key``/``order`` without declaring it again is treated as ``"dynamic"``."""

    def key(self, ticket: Ticket, now: float) -> tuple:
        return (ticket.enqueued, ticket.seq)

    def wanted_requests(self, info: ProgramInfo) -> int:
        """Requests (knob units) the program is expected to still use, in flight included: the
        most a widening policy lets its elastic fan-out run at once."""
        return 0

    def stamp(self, ticket: Ticket) -> None:
        """Called once by an engine that orders its own queue with this policy, for each request it
        queues (the ticket carries the scheduler's ProgramInfo): a policy may note the program's
        state at that moment on the ticket (certa: ``past_check``, a request past a likely stop)."""

    def order(self, tickets: Iterable[Ticket], now: float) -> list[Ticket]:
        """Tickets in the order they should run (used by engines forming a batch)."""
        return sorted(tickets, key=lambda t: self.key(t, now))

    def priority(self, ticket: Ticket, now: float) -> float:
        """A scalar urgency for backends with native priority (lower = sooner)."""
        k = self.key(ticket, now)
        return float(k[0]) if k and isinstance(k[0], (int, float)) else 0.0

    def rank(self, tickets: Iterable[Ticket], now: float, *, low_first: bool = False) -> dict[str, int]:
        """Dense integer ranks by rid over ``tickets`` (gang policies: one rank per program).

        With ``low_first=False`` (SGLang's default) the most urgent ticket gets the highest rank.
        """
        ordered = self.order(tickets, now)
        ranks: dict[str, int] = {}
        level, last = -1, object()
        for t in ordered:
            unit = t.program.program_id if self.gang else t.rid
            if unit != last:
                level, last = level + 1, unit
            ranks[t.rid] = level
        top = level
        return ranks if low_first else {rid: top - r for rid, r in ranks.items()}

    def observe_finish(self, info: ProgramInfo) -> None:
        """Called when a program leaves the scheduler (policies that learn from history)."""

    def observe_progress(self, info: ProgramInfo) -> bool:
        """Called at each certaindex point (:meth:`Scheduler.rekey`); True: every key may have moved."""
        return False

    def observe_request(self, info: ProgramInfo) -> bool:
        """Called for each new ticket of a program (:meth:`Scheduler.ticket`); True: every key may have moved."""
        return False


FCFS = SchedulingPolicy


__all__ = ["FCFS", "ProgramInfo", "SchedulingPolicy", "Ticket"]

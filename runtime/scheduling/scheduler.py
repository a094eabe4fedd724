"""The inter-program scheduler: admission control plus an ordering policy.

Every request a program sends becomes a :class:`Ticket`. The scheduler admits tickets to
the backend while the :class:`AdmissionLimits` allow, in the order its
:class:`SchedulingPolicy` gives. Gang policies (``policy.gang``) admit a program's pending
tickets together; admission is work-conserving with a bounded backfill (:meth:`Scheduler.admit`). The SAME policy object also orders an engine's per-iteration batch
(``order``, over the admitted tickets: :meth:`Scheduler.lookup`), gives backends with native
priority their priority (``priority``, ``rank``) and orders the simulator's queues. Policies live in :mod:`certa.runtime.scheduling.policies`.

Two ways to drive it:

* async (the Runtime): ``t = s.ticket(...)``; ``await s.acquire(t)``; ...; ``s.release(t)``;
* sync (the simulator, engines with their own loop): ``s.submit(t)``; ``s.admit()`` returns
  the tickets to start now; ``s.release(t)`` when one ends; ``s.discard(t)`` drops a waiting one.

Example:
    >>> s = Scheduler(limits=AdmissionLimits(max_requests=1), clock=lambda: 0.0)
    >>> p = ProgramInfo("p1", arrival=0.0); s.register(p)
    >>> a, b = s.ticket("p1-a", p), s.ticket("p1-b", p)
    >>> s.submit(a); s.submit(b)
    >>> [t.rid for t in s.admit()]          # FCFS, one slot
    ['p1-a']
    >>> s.release(a); [t.rid for t in s.admit()]
    ['p1-b']
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

from certa.runtime.errors import ConfigError
from certa.runtime.scheduling.admission import AdmissionLimits, Ledger
from certa.runtime.scheduling.queue import WaitQueue
from certa.runtime.scheduling.tickets import FCFS, ProgramInfo, SchedulingPolicy, Ticket


class Scheduler:
    """Admission control + ordering. With no limits it never queues (zero overhead path).

    Args:
        policy: the ordering policy (default FCFS). ``limits``: admission caps.
        clock: time source (the simulator passes its own). ``on_evict``: called with a
            program id when its idle prefix is evicted to make KV room.
        reserve_after: seconds a blocked head unit lets later units backfill before its
            capacity is reserved (see :meth:`admit`); 0 = strict head-of-line, ``math.inf`` =
            unbounded backfill (may starve a large unit).
        backfill_depth: units looked at behind a blocked head per admission (bounds its cost).
    """

    def __init__(self, policy: SchedulingPolicy | None = None, limits: AdmissionLimits | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_evict: Callable[[str], None] | None = None, *, reserve_after: float = 5.0,
                 backfill_depth: int = 16) -> None:
        if not reserve_after >= 0 or backfill_depth < 0:
            raise ConfigError(f"reserve_after and backfill_depth must be >= 0, not {reserve_after}, {backfill_depth}")
        self.reserve_after, self.backfill_depth = float(reserve_after), int(backfill_depth)
        self._blocked: dict[str, float] = {}  # unit (program id under a gang policy, else rid) -> blocked since
        self._waiting = WaitQueue(policy or SchedulingPolicy())
        self.ledger = Ledger(limits or AdmissionLimits(), on_evict)
        self.clock = clock
        self.programs: dict[str, ProgramInfo] = {}
        self._running: dict[str, Ticket] = {}
        self._seq = itertools.count()
        self._pump_scheduled = False

    @property
    def policy(self) -> SchedulingPolicy:
        return self._waiting.policy

    @policy.setter
    def policy(self, value: SchedulingPolicy) -> None:  # waiting tickets re-queue in arrival order
        waiting, self._waiting = list(self._waiting), WaitQueue(value)
        self._blocked.clear()
        for t in waiting:
            self._waiting.push(t, self.clock())

    @property
    def limits(self) -> AdmissionLimits:
        return self.ledger.limits

    @limits.setter
    def limits(self, value: AdmissionLimits) -> None:
        self.ledger.limits = value

    # ---- program registry -----------------------------------------------------------
    def register(self, info: ProgramInfo, *, as_id: str | None = None) -> None:
        """Know a program; ``as_id`` registers a sub-program under its root's info (one gang)."""
        self.programs[as_id or info.program_id] = info

    def unregister(self, program_id: str) -> None:
        info = self.programs.pop(program_id, None)
        self._blocked.pop(program_id, None)
        if info is not None and info.program_id == program_id:  # the owner, not a sub-program's alias
            self.ledger.drop_prefix(info)
            self.policy.observe_finish(info)
            self._waiting.rekey_all()  # a policy that learns from history may re-key everyone

    def rekey(self, info: ProgramInfo) -> None:
        """``info`` changed (certaindex, estimates): re-key its program's waiting tickets.

        Whoever updates a ProgramInfo the policy keys on calls this (the Runtime does after each
        certaindex point); policies with ``key_stability = "ticket"`` or ``"dynamic"`` ignore it.
        """
        waiting = self._waiting  # per certaindex point: attribute reads, not the properties
        if waiting.policy.observe_progress(info):
            waiting.rekey_all()
        if waiting:  # nothing waits (no limits, or none reached): no key to move
            waiting.rekey(info.program_id, self.clock())

    def pending(self, program_id: str) -> list[Ticket]:
        """The waiting tickets of one program, oldest first (the gang the policy moves)."""
        return self._waiting.of_program(program_id)

    # ---- tickets --------------------------------------------------------------------
    @property
    def unlimited(self) -> bool:
        return self.ledger.unlimited

    def ticket(self, rid: str, program: ProgramInfo, est_tokens: int = 0, prefix_hint: str | None = None,
               kv_tokens: int | None = None) -> Ticket:
        if self._waiting.policy.observe_request(program):  # per request: not through the property
            self._waiting.rekey_all()
        return Ticket(rid=rid, program=program, enqueued=self.clock(), est_tokens=est_tokens,
                      prefix_hint=prefix_hint, seq=next(self._seq), kv_tokens=kv_tokens)

    def submit(self, t: Ticket) -> None:
        """Queue ``t`` without admitting it (sync drivers call :meth:`admit` next)."""
        self._waiting.push(t, self.clock())

    def discard(self, t: Ticket) -> bool:
        """Drop a waiting ticket (its program exited). True if it was waiting."""
        if not self._waiting.remove(t):
            return False
        if self._blocked:
            self._unblock(t)
        return True

    # ---- admission ------------------------------------------------------------------
    def _take(self, t: Ticket) -> None:
        self.ledger.take(t, self.clock())
        self._running[t.rid] = t

    def _unit(self, t: Ticket) -> str:
        return t.program.program_id if self.policy.gang else t.rid

    def _unblock(self, t: Ticket) -> None:
        """``t`` left the queue: its unit's blocked-since mark goes once the unit has no ticket waiting."""
        unit = self._unit(t)
        if unit in self._blocked and not (self.policy.gang and self._waiting.has_program(unit)):
            del self._blocked[unit]

    def _start(self, t: Ticket, snapshot: bool, admitted: list[Ticket]) -> None:
        self._waiting.remove(t)
        if self._blocked:
            self._unblock(t)
        if not snapshot:
            t.cached = t.program.prefix_tokens if t.program.prefix_resident else 0
        self._take(t)
        admitted.append(t)

    def admit(self) -> list[Ticket]:
        """Admit waiting tickets in policy order while the limits allow; returns them in order.

        Work-conserving with a bounded backfill, so aging keeps its no-starvation promise:

        1. Units (a ticket, or a gang policy's program) go in policy order. The first unit
           whose tickets do not all fit — the *head* — is admitted in part: its tickets, in
           order, while each fits. (A gang of 4 with 2 slots free starts 2 now: its round
           ends when its last branch does, no later than if it had waited for 4 free slots,
           and the slots do not sit idle.) What stops the head is one ticket that does not fit.
        2. Behind a blocked head, later units that fit *whole* in what is free now are
           admitted (backfill; at most ``backfill_depth`` units looked at), while the head has
           been blocked for less than ``reserve_after`` seconds. After that nothing passes it
           (its capacity is reserved) until all its tickets are admitted. Under a request cap
           alone step 1 already fills every free slot, so backfill only acts on token/KV limits.

        Bound: a unit at the head waits at most ``reserve_after`` plus the time the requests
        in flight when its reservation starts take to free its room — the head-of-line bound
        plus ``reserve_after`` — and aging makes every waiting unit the head eventually.
        Policies with a stable key take the next unit from a heap: O(log n) per admission
        (plus O(log n) per unit passed over).
        """
        q = self._waiting
        if not q or self.ledger.full:
            return []
        now = self.clock()
        snapshot = q.sorting  # a dynamic order (LPM) is computed from the prefixes resident now
        if snapshot:
            for t in q:
                t.cached = t.program.prefix_tokens if t.program.prefix_resident else 0
        admitted: list[Ticket] = []
        programs, fits, unlimited = self.programs.values(), self.ledger.fits, self.unlimited
        head: Ticket | None = None
        looked = 0
        units = q.groups(now)
        try:
            for group in units:
                if head is None:
                    for t in group:
                        if not unlimited and not fits([t], programs):
                            head = t
                            break
                        self._start(t, snapshot, admitted)
                    if head is not None:
                        since = self._blocked.setdefault(self._unit(head), now)
                        if now - since >= self.reserve_after:
                            break  # reserved: nothing passes the head
                elif looked >= self.backfill_depth:
                    break
                else:
                    looked += 1
                    if fits(group, programs):
                        for t in group:
                            self._start(t, snapshot, admitted)
                if self.ledger.full:
                    break
        finally:
            units.close()
        return admitted

    def release(self, t: Ticket) -> None:
        """``t`` left the backend (done, failed or aborted): free its capacity at once."""
        if self._running.pop(t.rid, None) is None:
            return
        self.ledger.free(t, self.clock())
        if self._waiting.with_waiter:
            self._pump()

    def spare(self, info: ProgramInfo, keep: int = 0) -> int:
        """Requests ``info``'s program may start now beside its own in flight, for policies that
        ``widen`` (else 0): while nobody waits, the free room less ``keep``, and no more than the
        policy expects the program to still use (``wanted_requests``). What an elastic fan-out may
        run (``Graph.step(elastic=True)``)."""
        if not self.policy.widen or len(self._waiting) or self.ledger.unlimited:
            return 0
        return max(0, min(self.ledger.room() - keep, self.policy.wanted_requests(info) - info.inflight))

    # ---- async path (the Runtime) ---------------------------------------------------
    def admit_now(self, t: Ticket) -> bool:
        """Admit ``t`` at once when nothing limits admission (no await on that path); False:
        ``await acquire(t)``."""
        if self.ledger.unlimited:  # per request: an attribute, not properties
            self._take(t)
            return True
        return False

    async def acquire(self, t: Ticket) -> None:
        """Wait until ``t`` may go to the backend."""
        if self.admit_now(t):
            return
        loop = asyncio.get_running_loop()
        t.waiter = loop.create_future()
        self._waiting.push(t, self.clock())
        if self.policy.gang:  # let the rest of a fan-out burst arrive before deciding
            if not self._pump_scheduled:
                self._pump_scheduled = True
                loop.call_soon(self._deferred_pump)
        else:
            self._pump()
        try:
            await t.waiter
        except asyncio.CancelledError:
            if not self.discard(t) and t.waiter.done() and not t.waiter.cancelled():
                self.release(t)  # admitted just as we were cancelled
            raise

    def _deferred_pump(self) -> None:
        self._pump_scheduled = False
        self._pump()

    def _pump(self) -> None:
        for t in self.admit():
            if t.waiter is not None and not t.waiter.done():
                t.waiter.set_result(None)

    # ---- engines forming their own batches --------------------------------------------
    def lookup(self, rid: str) -> Ticket | None:
        """The admitted ticket with this rid, if any: an engine ordering its own batch (llama.cpp)
        orders a runtime request by the ticket the scheduler admitted (one ticket per request)."""
        return self._running.get(rid)

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def inflight(self) -> int:
        return self.ledger.requests

    @property
    def kv_in_use(self) -> int:
        """Estimated KV tokens: in-flight tickets plus resident prefixes."""
        return self.ledger.kv + self.ledger.prefix_kv


__all__ = ["AdmissionLimits", "FCFS", "ProgramInfo", "Scheduler", "SchedulingPolicy", "Ticket"]

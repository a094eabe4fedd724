"""The scheduler's wait queue: waiting tickets in arrival order, by program, and in a heap by key.

Admission asks "which waiting unit is most urgent?" once per admitted request. Sorting every
waiting ticket for that costs O(n log n) per request; for a policy whose key does not drift
while a ticket waits, a heap keyed by the policy's own ``key`` answers in O(log n) and gives
the same order (ties broken by arrival, as the stable sort did). Entries are invalidated
lazily: a ticket that leaves, or is re-keyed, leaves its old entry behind, skipped on pop.
Under a gang policy the heap holds one entry per program, its oldest waiting ticket: a gang
key keeps a program's tickets contiguous, so any one of them places the program, and
re-keying everyone (certa's SJF learning from a finished program) costs O(programs waiting).

What a policy promises is its :attr:`~certa.runtime.scheduling.scheduler.SchedulingPolicy.key_stability`:

* ``"ticket"`` — ``key(t, now)`` is fixed once ``t`` is queued (FCFS, app-FIFO);
* ``"program"`` — it changes only when the ticket's :class:`ProgramInfo` is updated (the runtime
  then calls :meth:`Scheduler.rekey`) or when the policy learns from a finished program
  (``observe_finish``: the queue re-keys everything; certa's SJF);
* ``"dynamic"`` — anything else (LPM reads the live prefix cache): every admission re-sorts the
  waiting tickets with ``policy.order``, as before. A policy subclass that overrides ``key`` or
  ``order`` without declaring its own ``key_stability`` is treated as ``"dynamic"``.

A dynamic, non-gang policy may declare a stable fallback, as LPM does (SGLang's: plain FCFS when
more than ``fallback_above`` requests wait): ``fallback_above`` and ``fallback_key(t)``, a key
fixed once ``t`` is queued, which ``order`` must follow when more than ``fallback_above`` tickets
are given. The queue then keeps a second heap by ``fallback_key``: above the threshold an
admission pops it (O(log n) per request), at or below it sorts at most ``fallback_above``
tickets (a bounded cost, O(f log f) with f = 128 for LPM). The order is the sort's exactly. LPM
with ``fallback_above=None`` stays on the sort path: its key moves whenever a program's prefix
becomes resident or is evicted — which the ledger does in the middle of an admission, while
that admission's order must stay the one computed at its start (the sort's snapshot) — so a
heap would need every such move re-keyed after the admission and a way to tell it which
programs moved; not worth it for a mode SGLang itself does not have.

Admission may pass over a unit it cannot admit (backfill, see ``Scheduler.admit``): the heap
units ``groups`` yields are popped as they are yielded and the ones still waiting are pushed
back when the iteration ends (``close()`` it), so passing over k units costs O(k log n).

Example:
    >>> from certa.runtime.scheduling.scheduler import ProgramInfo, SchedulingPolicy, Ticket
    >>> q = WaitQueue(SchedulingPolicy())
    >>> p = ProgramInfo("p", 0.0)
    >>> for i, at in enumerate((2.0, 1.0, 3.0)): q.push(Ticket(f"t{i}", p, at, seq=i))
    >>> [g[0].rid for g in itertools.islice(q.groups(0.0), 1)], q.mode
    (['t1'], 'ticket')
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.scheduling.scheduler import SchedulingPolicy, Ticket

__all__ = ["WaitQueue", "key_mode"]

_MODES = ("ticket", "program", "dynamic")


def key_mode(policy: "SchedulingPolicy") -> str:
    """The policy's declared ``key_stability``, or ``"dynamic"`` when a subclass overrides
    ``key``/``order`` below the class that declared it (its promise does not cover them)."""
    mro = type(policy).__mro__

    def owner(name: str) -> type:
        return next((c for c in mro if name in c.__dict__), object)

    declared = owner("key_stability")
    mode = getattr(policy, "key_stability", "dynamic")
    if mode not in _MODES or any(not issubclass(declared, owner(n)) for n in ("key", "order")):
        return "dynamic"
    return mode


class WaitQueue:
    """Waiting tickets of one scheduler (see the module docstring)."""

    def __init__(self, policy: "SchedulingPolicy") -> None:
        self.policy = policy
        self.mode = key_mode(policy)
        self._gang = bool(policy.gang)  # heap entries: one per program (its oldest waiting ticket stands for it)
        self._items: dict[int, "Ticket"] = {}  # queue position -> ticket, in arrival order
        self._by_program: dict[str, dict[int, "Ticket"]] = {}
        self._heap: list[tuple[Any, int, int, "Ticket"]] = []  # (key, position, version, ticket)
        self._positions = itertools.count()
        self._stale = False  # every key may have changed: rebuild the heap before the next pop
        fallback = getattr(policy, "fallback_above", None) if self.mode == "dynamic" and not self._gang else None
        self._fallback: int | None = fallback if callable(getattr(policy, "fallback_key", None)) else None
        self._fifo: list[tuple[Any, int, "Ticket"]] = []  # (fallback_key, position, ticket), when declared
        self.with_waiter = 0  # waiting tickets with an async waiter (release pumps only then)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator["Ticket"]:
        return iter(list(self._items.values()))

    @property
    def heap(self) -> bool:
        return self.mode != "dynamic"

    @property
    def sorting(self) -> bool:
        """The next admission sorts every waiting ticket (a dynamic policy, not past its fallback)."""
        return not self.heap and (self._fallback is None or len(self._items) <= self._fallback)

    def has_program(self, program_id: str) -> bool:
        """Does ``program_id`` have a waiting ticket?"""
        return program_id in self._by_program

    def push(self, t: "Ticket", now: float = 0.0) -> None:
        t.qpos = pos = next(self._positions)
        t.qver = 0
        self._items[pos] = t
        mine = self._by_program.setdefault(t.program.program_id, {})
        mine[pos] = t
        if t.waiter is not None:
            self.with_waiter += 1
        if self.heap and not self._stale and (not self._gang or len(mine) == 1):
            self._enter(t, now)
        elif self._fallback is not None:
            heapq.heappush(self._fifo, (self.policy.fallback_key(t), pos, t))  # type: ignore[attr-defined]

    def remove(self, t: "Ticket") -> bool:
        """Take ``t`` out (admitted or discarded). False if it was not waiting."""
        pos = t.qpos
        if pos < 0 or self._items.get(pos) is not t:
            return False
        del self._items[pos]
        mine = self._by_program[t.program.program_id]
        first = next(iter(mine)) == pos
        del mine[pos]
        t.qpos = -1
        if not mine:
            del self._by_program[t.program.program_id]
        elif self._gang and first and self.heap and not self._stale:
            self._enter(next(iter(mine.values())), 0.0)  # the program's next oldest stands for it now
        if t.waiter is not None:
            self.with_waiter -= 1
        if self.heap and len(self._heap) > 2 * len(self._items) + 64:
            self._stale = True  # mostly dead entries: rebuild (amortized O(1) per removal)
        elif self._fallback is not None and len(self._fifo) > 2 * len(self._items) + 64:
            self._fifo[:] = [e for e in self._fifo if e[2].qpos == e[1]]  # drop dead entries (amortized O(1))
            heapq.heapify(self._fifo)  # in place: an admission iterating it keeps the same list
        return True

    def of_program(self, program_id: str) -> list["Ticket"]:
        """One program's waiting tickets, oldest first."""
        return list(self._by_program.get(program_id, {}).values())

    def rekey(self, program_id: str, now: float = 0.0) -> None:
        """The program's info changed: re-key its waiting tickets (``"program"`` policies)."""
        if self.mode != "program" or self._stale:
            return
        mine = self._by_program.get(program_id, {})
        for t in (list(mine.values())[:1] if self._gang else mine.values()):
            self._enter(t, now)

    def rekey_all(self) -> None:
        """Every key may have changed (the policy learned something): rebuild before the next pop."""
        if self.mode == "program":
            self._stale = True

    def _enter(self, t: "Ticket", now: float) -> None:
        """(Re-)enter ``t`` in the heap under its current key; its older entries go stale."""
        t.qver += 1
        heapq.heappush(self._heap, (self.policy.key(t, now), t.qpos, t.qver, t))

    def _rebuild(self, now: float) -> None:
        key = self.policy.key
        heads = [next(iter(m.values())) for m in self._by_program.values()] if self._gang \
            else list(self._items.values())
        for t in heads:
            t.qver += 1
        self._heap = [(key(t, now), t.qpos, t.qver, t) for t in heads]
        heapq.heapify(self._heap)
        self._stale = False

    def _top(self, now: float) -> "Ticket | None":
        if self._stale:
            self._rebuild(now)
        heap = self._heap
        while heap:
            _, pos, ver, t = heap[0]
            if t.qpos == pos and t.qver == ver:
                return t
            heapq.heappop(heap)
        return None

    def groups(self, now: float) -> Iterator[list["Ticket"]]:
        """Admission units in policy order: single tickets, or a gang policy's whole program.

        After each unit the consumer takes (``remove``) its tickets, some of them, or none (it
        passes over the unit: backfill), then asks for the next or stops; it must ``close()``
        the iterator when done (a unit passed over goes back in the heap then). A program
        already yielded is not yielded again. A sorting policy's order is computed once per call.
        """
        gang = self.policy.gang
        if self.sorting:
            ordered = self.policy.order(list(self._items.values()), now)
            if not gang:
                yield from ([t] for t in ordered)
                return
            units: dict[str, list[Ticket]] = {}
            for t in ordered:
                units.setdefault(t.program.program_id, []).append(t)
            yield from units.values()
            return
        if not self.heap:  # past the fallback threshold: its stable key, from its own heap
            yield from self._fallback_units()
            return
        key = self.policy.key
        popped: list[tuple[Any, int, int, Ticket]] = []
        seen: set[Any] = set()
        try:
            while (t := self._top(now)) is not None:
                popped.append(heapq.heappop(self._heap))
                unit = t.program.program_id if gang else t.qpos
                if unit in seen:
                    continue  # a gang partly taken re-entered under its next ticket
                seen.add(unit)
                if not gang:
                    yield [t]
                    continue
                mine = self._by_program[t.program.program_id].values()
                yield sorted(mine, key=lambda m: (key(m, now), m.qpos)) if len(mine) > 1 else [t]
        finally:
            for entry in popped:  # units passed over keep their place
                _, pos, ver, t = entry
                if t.qpos == pos and t.qver == ver:
                    heapq.heappush(self._heap, entry)

    def _fallback_units(self) -> Iterator[list["Ticket"]]:
        fifo, popped = self._fifo, []
        try:
            while fifo:
                entry = heapq.heappop(fifo)
                t = entry[2]
                if t.qpos != entry[1]:
                    continue  # it left the queue
                popped.append(entry)
                yield [t]
        finally:
            for entry in popped:
                if entry[2].qpos == entry[1]:
                    heapq.heappush(fifo, entry)

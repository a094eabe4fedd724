"""Admission accounting: what is in flight against :class:`AdmissionLimits`.

The :class:`Ledger` counts in-flight requests, their token estimates and a KV estimate
(in-flight tickets' ``kv`` plus the resident prefixes of programs). When the KV budget is
short it evicts the prefixes of idle programs (no request in flight), least recently active
first, and tells the engine through ``on_evict``. The scheduler decides *who* goes next;
the ledger only answers *whether it fits*.

Example:
    >>> from certa.runtime.scheduling.scheduler import ProgramInfo, Ticket
    >>> led = Ledger(AdmissionLimits(max_requests=1))
    >>> t = Ticket("r1", ProgramInfo("p", 0.0), 0.0)
    >>> led.fits([t]), led.take(t, now=0.0), led.fits([t])
    (True, None, False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.scheduling.scheduler import ProgramInfo, Ticket


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """Caps on what is in flight at the backend at once (``None`` = unlimited); immutable
    (the ledger reads ``unlimited`` once per limits, not per request: assign new limits to change them).

    ``inflight_tokens`` caps the sum of in-flight tickets' ``est_tokens``; ``kv_tokens`` caps the
    KV estimate: in-flight tickets' ``kv`` plus the resident prefixes of programs (idle
    programs' prefixes are evicted first, least recently active first).
    """

    max_requests: int | None = None
    inflight_tokens: int | None = None
    kv_tokens: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.max_requests is None and self.inflight_tokens is None and self.kv_tokens is None


class Ledger:
    """In-flight requests, tokens and KV against the limits; evicts idle prefixes on demand."""

    def __init__(self, limits: AdmissionLimits, on_evict: Callable[[str], None] | None = None) -> None:
        self.limits = limits  # sets ``unlimited``: read per request, a plain attribute
        self.on_evict = on_evict
        self.requests = 0
        self.tokens = 0
        self.kv = 0
        self.prefix_kv = 0

    @property
    def limits(self) -> AdmissionLimits:
        return self._limits

    @limits.setter
    def limits(self, value: AdmissionLimits) -> None:
        self._limits, self.unlimited = value, value.unlimited

    @property
    def full(self) -> bool:
        """No further request can start (the request cap is reached)."""
        lim = self._limits
        return lim.max_requests is not None and self.requests >= lim.max_requests

    def room(self) -> int:
        """Requests that could start now beside those in flight: the request cap's free slots and the
        free token and KV budgets, each in units of the mean in-flight request's (0 when unlimited)."""
        lim, n = self._limits, self.requests
        rooms = [] if lim.max_requests is None else [lim.max_requests - n]
        if n and lim.inflight_tokens is not None and self.tokens > 0:
            rooms.append((lim.inflight_tokens - self.tokens) * n // self.tokens)
        if n and lim.kv_tokens is not None and self.kv > 0:
            rooms.append((lim.kv_tokens - self.kv - self.prefix_kv) * n // self.kv)
        return max(0, min(rooms)) if rooms else 0

    def fits(self, tickets: list["Ticket"], programs: Iterable["ProgramInfo"] = ()) -> bool:
        """Would ``tickets`` fit together now? Evicts idle prefixes among ``programs`` if KV is short.

        An oversized unit (tokens/KV) still fits when nothing is in flight, so it cannot block forever.
        """
        lim, idle = self._limits, self.requests == 0
        if lim.max_requests is not None and self.requests + len(tickets) > lim.max_requests:
            return False
        if lim.inflight_tokens is not None and not idle and \
                self.tokens + sum(t.est_tokens for t in tickets) > lim.inflight_tokens:
            return False
        if lim.kv_tokens is None:
            return True
        own = {t.program.program_id: t.program for t in tickets}
        need = sum(t.kv for t in tickets) + sum(0 if p.prefix_resident else p.prefix_tokens for p in own.values())
        free = lim.kv_tokens - self.kv - self.prefix_kv
        if need > free:
            free += self.evict_idle(need - free, programs, keep=own)
        return need <= free or idle

    def evict_idle(self, amount: int, programs: Iterable["ProgramInfo"], keep: dict) -> int:
        """Evict resident prefixes of idle programs (least recently active first); tokens freed."""
        freed = 0
        idle = sorted((p for p in programs if p.prefix_resident and p.inflight == 0 and p.program_id not in keep),
                      key=lambda p: (p.last_active, p.program_id))
        for p in idle:
            if freed >= amount:
                break
            freed += p.prefix_tokens
            self.drop_prefix(p)
            if self.on_evict is not None:
                self.on_evict(p.program_id)
        return freed

    def drop_prefix(self, p: "ProgramInfo") -> None:
        if p.prefix_resident:
            self.prefix_kv -= p.prefix_tokens
            p.prefix_resident = False

    def take(self, t: "Ticket", now: float) -> None:
        p = t.program
        self.requests += 1
        self.tokens += t.est_tokens
        self.kv += t.est_tokens if t.kv_tokens is None else t.kv_tokens  # Ticket.kv, inline: per request
        if not p.prefix_resident and p.prefix_tokens:
            p.prefix_resident = True
            self.prefix_kv += p.prefix_tokens
        p.inflight += 1
        p.last_active = now

    def free(self, t: "Ticket", now: float) -> None:
        self.requests -= 1
        self.tokens -= t.est_tokens
        self.kv -= t.est_tokens if t.kv_tokens is None else t.kv_tokens  # as in take
        t.program.inflight -= 1
        t.program.last_active = now


__all__ = ["AdmissionLimits", "Ledger"]

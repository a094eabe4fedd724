"""Where and how often programs stop on certaindex, learned online: certa's SJF estimates.

:class:`StopCalibration` replaces a stop policy's own remaining-work estimate once it has seen
enough outcomes, and tells which waiting requests are *speculative* (past a check where their
program will likely stop). :class:`~certa.runtime.scheduling.policies.CertaSJF` (``certa``)
owns one; the Scheduler feeds it through the policy hooks (``observe_progress`` at each
certaindex point, ``observe_request`` for each new ticket, ``observe_finish``).

Example:
    >>> from certa.runtime.scheduling.scheduler import ProgramInfo
    >>> cal = StopCalibration(min_samples=1)
    >>> p = ProgramInfo("p", 0.0, knob_cap=16, knob_used=4, certaindex=0.9)
    >>> cal.point(p); cal.finished(p)       # it stopped at knob 4 with certaindex 0.9
    False
    >>> cal.checks, cal.bins
    ({4}, {9: [1, 0]})
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.scheduling.scheduler import ProgramInfo

__all__ = ["SPECULATIVE", "StopCalibration"]

SPECULATIVE = 1e9
"""Added to a speculative program's priority (its waiting requests run after all other work)."""


class StopCalibration:
    """Where and how often programs stop on certaindex, learned online (``certa``).

    A stop policy's own estimate (``Threshold.expected_remaining``: a program below the
    threshold by a fraction ``x`` continues with probability ``x``) is optimistic for programs
    that hover just below it and never pass. Here the *check positions* are the knob values at
    which programs have stopped below their cap, and each certaindex point at a check position
    is resolved as *continued* when its program asks for another request (or reaches another
    point) and as *stopped* when it leaves below its cap — known one request later, with no
    need to wait for long programs to finish — counted per certaindex tenth (bin). With
    ``min_samples`` outcomes in a bin, a waiting program at knob ``k`` has ``(n − k) + p·(cap − n)``
    knob units left: ``n`` the next check position (else the cap), ``p`` the continue rate of its current
    certaindex's bin (persistence: its next check looks like its last point).
    """

    def __init__(self, min_samples: int = 5) -> None:
        self.min_samples = min_samples
        self.bins: dict[int, list[int]] = {}  # bin -> [stopped, continued], at check positions
        self.checks: set[int] = set()  # knob values at which programs stopped below their cap
        self._open: dict[str, tuple[int, int]] = {}  # program -> (knob, bin) of its last point, unresolved
        self._inflight: dict[str, int] = {}  # program -> its requests in flight at its last point

    @staticmethod
    def bin(c: float | None) -> int:
        return -1 if c is None else min(10, max(0, int(c * 10 + 1e-9)))

    def _resolve(self, pid: str, continued: bool) -> bool:
        point = self._open.pop(pid, None)
        if point is None:
            return False
        knob, b = point
        moved = False
        if not continued and knob not in self.checks:
            self.checks.add(knob)
            moved = True
        if knob not in self.checks:
            return moved  # not a place where programs stop: nothing learned about stopping
        before = self.rate(b)
        self.bins.setdefault(b, [0, 0])[1 if continued else 0] += 1
        after = self.rate(b)
        return moved or (before is None) != (after is None) or \
            (before is not None and after is not None and abs(after - before) > 0.05)

    def rate(self, b: int) -> float | None:
        """The bin's continue rate, or None with fewer than ``min_samples`` outcomes."""
        st = self.bins.get(b)
        return st[1] / (st[0] + st[1]) if st and st[0] + st[1] >= self.min_samples else None

    def point(self, info: ProgramInfo) -> bool:
        """A certaindex point: the previous one was continued past. True if what is learned moved."""
        moved = self._resolve(info.program_id, True)
        self._open[info.program_id] = (info.knob_used, self.bin(info.certaindex))
        self._inflight[info.program_id] = info.inflight
        return moved

    def request(self, info: ProgramInfo) -> bool:
        return self._resolve(info.program_id, True)  # asking for more work: it continued past its last point

    def finished(self, info: ProgramInfo) -> None:
        if info.knob_cap is None or info.knob_used < info.knob_cap:
            self._resolve(info.program_id, False)
        self._open.pop(info.program_id, None)
        self._inflight.pop(info.program_id, None)

    def next_check(self, knob: int) -> int | None:
        later = [c for c in self.checks if c > knob]
        return min(later) if later else None

    def remaining_steps(self, info: ProgramInfo) -> float | None:
        """Calibrated knob units still to run, or None (too few outcomes in its bin, no cap)."""
        p = self.rate(self.bin(info.certaindex))
        if p is None or info.knob_cap is None:
            return None
        n = min(self.next_check(info.knob_used) or info.knob_cap, info.knob_cap)  # no check ahead: the cap
        return (n - info.knob_used) + p * max(0.0, info.knob_cap - n)

    def likely_steps(self, info: ProgramInfo) -> int | None:
        """Knob units the program runs with probability at least 1/2 (the next check's distance
        for sure, then check by check while the chance of continuing past them all stays at least
        1/2, its current bin's rate at each), or None (too few outcomes in its bin, no cap)."""
        p = self.rate(self.bin(info.certaindex))
        cap = info.knob_cap
        if p is None or cap is None:
            return None
        k, reach = info.knob_used, 1.0
        while k < cap:
            k = min(self.next_check(k) or cap, cap)
            reach *= p
            if reach < 0.5:
                break
        return k - info.knob_used

    def speculative(self, info: ProgramInfo) -> bool:
        """Are the program's waiting requests past its next check, likely wasted?

        True when the requests in flight at its last point already take it to the next check
        position and its certaindex's bin stops there at least half the time (or is not
        calibrated yet): an SC lane that starts branch 5 while branches 2-4 run, for a program
        that will stop at 4. (Read at points only, so a key moves only where the Scheduler
        re-keys: a request that ends before its point changes nothing.)
        """
        return self.past_check(info) is not None

    def past_check(self, info: ProgramInfo) -> int | None:
        """The check position (a knob value) the program's waiting requests run past when they are
        :meth:`speculative`, else None."""
        inflight = self._inflight.get(info.program_id, 0)
        if not inflight:
            return None
        n = self.next_check(info.knob_used)
        if n is None and info.est_remaining_tokens is not None and info.tokens_per_step:
            n = info.knob_used + info.est_remaining_tokens / info.tokens_per_step - 1e-9  # the stop policy's
            # own estimate: exactly the next check when it expects a stop there, later otherwise (cold start)
        if n is None or info.knob_used + inflight < n or not self.likely_stop(info):
            return None
        return math.ceil(n)

    def likely_stop(self, info: ProgramInfo) -> bool:
        """Its certaindex's bin stops at a check at least half the time (or is not calibrated yet)."""
        p = self.rate(self.bin(info.certaindex))
        return p is None or p <= 0.5

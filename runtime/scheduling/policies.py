"""Inter-program scheduling policies: ``fcfs``, ``lpm``, ``app-fifo``, ``certa-nocd``, ``certa``.

One :class:`~certa.runtime.scheduling.scheduler.SchedulingPolicy` object orders the runtime's admission
queue, the llama.cpp engine's batch, SGLang priorities and the simulator's queues.

* ``fcfs`` — request-level first come first served (SGLang's default ``--schedule-policy``).
* ``lpm`` — longest prefix match first (``Ticket.cached``), FCFS among equals; like SGLang it
  falls back to FCFS when more than ``fallback_above`` (128) requests wait.
* ``app-fifo`` — Parrot-style: programs FIFO by arrival, a program's requests as one gang.
* ``certa`` — gang + approximate shortest-job-first + aging. A program's key is
  ``remaining + aging × arrival + aging_pace × fair_share``: remaining decode tokens (the
  certaindex-informed ``ProgramInfo.est_remaining_tokens``, see :func:`remaining_steps`) plus
  aging credits that make every older program eventually beat every newer one, so none
  starves. ``fair_share`` is a virtual clock, as in fair queueing: the decode tokens one
  program would have received by the time this one arrived had the engine been shared
  equally (each reported token counts 1/the programs then in the system). So a later program
  passes an earlier one only if it needs ``aging_pace`` × one program's share of the service
  between their arrivals fewer tokens, on any engine speed (paced aging: a credit in seconds
  alone is negligible on a fast engine and decisive on a slow one; without it SJF kept the
  longest programs of the KV-limited H100 32B regime waiting past their SLO where app-FIFO did
  not, docs/scheduling.md).
  The key does not drift while a request waits, so SGLang priorities set at submission stay valid.
  Learned online (:class:`StopCalibration`): how often programs at a given certaindex
  actually stop at a point, so one hovering below the threshold (which the stop policy's own
  estimate expects to pass soon) is seen to run on; before a program's first point, the
  finished programs' mean steps (capped by its knob cap) rather than the cap.
  Requests past a check where the program will likely stop (``speculative``, on by default)
  wait behind all other work while they wait for admission. In an engine that orders its own
  queue and preemption victims with this policy the mark is per request (:meth:`CertaSJF.stamp`:
  noted as the request reaches the engine, held until its program reaches that check), so the
  program's admitted branches that decide its stop are never put behind everyone else's (the
  per-program mark did until 2026-12-04, which is what made it lose max rate on the KV-limited
  regimes of ``benchmarks/online_slo.py``; docs/scheduling.md). ``widen`` (on) lets elastic
  fan-outs (SC's lanes) add lanes into idle capacity while nobody waits, only for work the
  program likely still does (``wanted_requests``).
* ``certa-nocd`` — the same without certaindex: remaining work from history only
  (tokens per step × (historical steps per program − steps done)).

Example:
    >>> from certa.runtime.scheduling.scheduler import ProgramInfo, Ticket
    >>> pol = make_policy("certa", aging=0.0)
    >>> short = ProgramInfo("s", arrival=1.0, est_remaining_tokens=100.0)
    >>> long = ProgramInfo("l", arrival=0.0, est_remaining_tokens=5000.0)
    >>> ts = [Ticket("l-0", long, 0.0, seq=0), Ticket("s-0", short, 1.0, seq=1)]
    >>> [t.rid for t in pol.order(ts, now=2.0)]
    ['s-0', 'l-0']
    >>> sorted(POLICIES)
    ['app-fifo', 'certa', 'certa-nocd', 'fcfs', 'lpm']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from certa.runtime.errors import ConfigError
from certa.runtime.registry import Registry
from certa.runtime.scheduling.calibration import SPECULATIVE, StopCalibration
from certa.runtime.scheduling.scheduler import ProgramInfo, SchedulingPolicy, Ticket

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.policy import Policy
    from certa.runtime.program import Program


class LPM(SchedulingPolicy):
    """Longest cached prefix first (``Ticket.cached``), then FCFS.

    Args:
        fallback_above: with more waiting tickets than this, plain FCFS (SGLang does the same).
    """

    name = "lpm"

    def __init__(self, fallback_above: int | None = 128) -> None:
        self.fallback_above = fallback_above

    def key(self, ticket: Ticket, now: float) -> tuple:
        return (-ticket.cached, ticket.enqueued, ticket.seq)

    def fallback_key(self, ticket: Ticket) -> tuple:
        """The FCFS key used past ``fallback_above`` (fixed once queued: the wait queue heaps it)."""
        return (ticket.enqueued, ticket.seq)

    def order(self, tickets, now: float) -> list[Ticket]:
        tickets = list(tickets)
        if self.fallback_above is not None and len(tickets) > self.fallback_above:
            return sorted(tickets, key=self.fallback_key)
        return sorted(tickets, key=lambda t: self.key(t, now))

    def priority(self, ticket: Ticket, now: float) -> float:
        return ticket.enqueued  # SGLang ignores priority under lpm; FCFS rank is the useful part


class AppFIFO(SchedulingPolicy):
    """Parrot's app-FIFO: the earliest-arrived program first, its requests as one gang."""

    name = "app-fifo"
    gang = True
    key_stability = "ticket"  # arrival and id: fixed (admission uses a heap)

    def key(self, ticket: Ticket, now: float) -> tuple:
        p = ticket.program
        return (p.arrival, p.program_id, ticket.seq)

    def priority(self, ticket: Ticket, now: float) -> float:
        return ticket.program.arrival


class History:
    """Running means over finished programs: tokens per step and steps per program."""

    def __init__(self) -> None:
        self.n = 0
        self.steps = 0.0
        self.tokens = 0.0

    def add(self, info: ProgramInfo) -> None:
        if info.knob_used > 0:
            self.n += 1
            self.steps += info.knob_used
            self.tokens += info.tokens

    @property
    def tokens_per_step(self) -> float | None:
        return self.tokens / self.steps if self.steps else None

    @property
    def steps_per_program(self) -> float | None:
        return self.steps / self.n if self.n else None


class CertaSJF(SchedulingPolicy):
    """Gang scheduling + approximate SJF on remaining work + aging (``certa``/``certa-nocd``).

    Args:
        aging: tokens of priority credit per second of age (key = remaining + aging·arrival).
            0 = pure SJF (may starve long programs); large = app-FIFO.
        aging_pace: tokens of priority credit per token of one program's fair share of the
            service before the program arrived (0 = off; large = app-FIFO).
        use_certaindex: read ``est_remaining_tokens`` (``certa``) or estimate from history
            only (``certa-nocd``).
        prior_tokens_per_step / prior_steps: estimates before any history exists.
        min_history: finished programs (and outcomes per certaindex bin) before history and
            calibration replace the cap and the stop policy's estimate (``certa`` only).
        speculative: queue requests past a likely stop behind all other work while they wait
            for admission, and in an engine's queue from the moment they reach it (``certa`` only;
            see the module docstring).
        widen: let elastic fan-outs (SC's lanes) add lanes into idle capacity while nobody
            waits (:meth:`~certa.runtime.scheduling.scheduler.Scheduler.spare`), as far as
            :meth:`wanted_requests` allows (``certa`` only: it reads the stop calibration).
    """

    gang = True
    key_stability = "program"  # changes with the program's estimate (Scheduler.rekey) or the history

    def __init__(self, aging: float = 50.0, use_certaindex: bool = True, prior_tokens_per_step: float = 1000.0,
                 prior_steps: float = 4.0, min_history: int = 5, speculative: bool = True,
                 widen: bool = True, aging_pace: float = 0.25) -> None:
        if aging < 0 or aging_pace < 0:
            raise ConfigError(f"aging and aging_pace must be >= 0, not {aging}, {aging_pace}")
        self.aging = aging
        self.aging_pace = aging_pace
        self.fair_share = 0.0  # virtual clock: tokens per program in the system, summed as reported
        self._reported: dict[str, float] = {}  # program id -> its tokens as last seen
        self._share_at: dict[str, float] = {}  # program id -> ``fair_share`` when it was first seen
        self.use_certaindex = use_certaindex
        self.speculative = speculative and use_certaindex
        self.widen = widen and use_certaindex
        self.prior_tokens_per_step = prior_tokens_per_step
        self.prior_steps = prior_steps
        self.history = History()
        self.min_history = min_history
        self.calibration = StopCalibration(min_samples=min_history)
        self.name = "certa" if use_certaindex else "certa-nocd"
        self._epoch: float | None = None  # first arrival seen: keeps keys (and SGLang ints) small

    def tokens_per_step(self, info: ProgramInfo) -> float:
        """The program's own tokens per step, else the history's, else the prior."""
        return info.tokens_per_step or self.history.tokens_per_step or self.prior_tokens_per_step

    def remaining(self, info: ProgramInfo) -> float:
        """Estimated decode tokens still to come for this program."""
        if self.use_certaindex and info.est_remaining_tokens is not None:
            calibrated = self.calibration.remaining_steps(info)
            if calibrated is not None:
                return self.tokens_per_step(info) * calibrated
            return max(0.0, info.est_remaining_tokens)
        tps = self.tokens_per_step(info)
        if self.use_certaindex:  # no certaindex yet: to the cap, or as far as finished programs went on average
            steps = info.knob_cap if info.knob_cap is not None else self.prior_steps
            if self.history.n >= self.min_history:
                steps = min(steps, self.history.steps_per_program)  # type: ignore[type-var]
        else:
            steps = self.history.steps_per_program or info.knob_cap or self.prior_steps
            if info.knob_cap is not None:
                steps = min(steps, info.knob_cap)
        left = steps - info.knob_used
        return tps * (left if left > 0 else 1.0)  # still asking for work: at least one more step

    def wanted_requests(self, info: ProgramInfo) -> int:
        """Knob units the program runs with probability at least 1/2 (:meth:`StopCalibration.likely_steps`;
        0 before its bin is calibrated, and always for ``certa-nocd``, whose calibration is never fed):
        an elastic fan-out adds lanes only for work the program likely still does."""
        return self.calibration.likely_steps(info) or 0

    def program_key(self, info: ProgramInfo) -> float:
        """``remaining + aging × arrival + aging_pace × fair_share`` (arrival counted from the
        first one seen; the virtual clock read when this program was first seen)."""
        if self._epoch is None:
            self._epoch = info.arrival
        share = self._share_at.get(info.program_id)
        if share is None:
            share = self._share_at[info.program_id] = self.fair_share
        return self.remaining(info) + self.aging * (info.arrival - self._epoch) + self.aging_pace * share

    def _account(self, info: ProgramInfo) -> None:
        """Advance the virtual clock by the tokens ``info``'s program decoded since it last
        reported, shared among the programs in the system."""
        before = self._reported.get(info.program_id, 0.0)
        if info.tokens > before:
            self.fair_share += (info.tokens - before) / max(1, len(self._share_at))
            self._reported[info.program_id] = float(info.tokens)

    def key(self, ticket: Ticket, now: float) -> tuple:
        p = ticket.program
        if not self.speculative:
            spec = False
        elif ticket.qpos >= 0:  # waiting for admission: the program's state now marks all its waiting requests
            spec = self.calibration.speculative(p)
        else:  # in an engine's queue or batch: only a request that was past a likely stop when it got
            # there, until the program reaches that check (its stop-deciding branches are never marked)
            spec = ticket.past_check is not None and p.knob_used < ticket.past_check and \
                self.calibration.likely_stop(p)
        return (spec, self.program_key(p), p.arrival, p.program_id, ticket.seq)

    def stamp(self, ticket: Ticket) -> None:
        """Note on an engine's ticket the check its request runs past, if it is speculative now."""
        if self.speculative:
            ticket.past_check = self.calibration.past_check(ticket.program)

    def priority(self, ticket: Ticket, now: float) -> float:
        # computed once per request, as it is submitted (before admission): the mark is its own
        spec = self.speculative and self.calibration.speculative(ticket.program)
        return self.program_key(ticket.program) + (SPECULATIVE if spec else 0.0)

    def observe_finish(self, info: ProgramInfo) -> None:
        self._account(info)
        self._reported.pop(info.program_id, None)
        self._share_at.pop(info.program_id, None)
        self.history.add(info)
        if self.use_certaindex:
            self.calibration.finished(info)

    def observe_progress(self, info: ProgramInfo) -> bool:
        self._account(info)
        return self.use_certaindex and self.calibration.point(info)

    def observe_request(self, info: ProgramInfo) -> bool:
        if info.program_id not in self._share_at:
            self._share_at[info.program_id] = self.fair_share
        return self.use_certaindex and self.calibration.request(info)


POLICIES: Registry[SchedulingPolicy] = Registry("scheduling policy")
"""Every scheduling policy by name (``--scheduler``, ``Sweep.policies``), with its ``color`` in plots."""
POLICIES.register("fcfs", SchedulingPolicy, help="request-level first come first served", color="#6b7280")
POLICIES.register("lpm", LPM, help="longest cached prefix first, then FCFS", color="#0891b2")
POLICIES.register("app-fifo", AppFIFO, help="programs FIFO by arrival, each program's requests as one gang",
                  color="#ca8a04")
POLICIES.register("certa-nocd", lambda **kw: CertaSJF(use_certaindex=False, **kw),
                  help="gang + shortest remaining work first (from history) + aging", color="#9333ea")
POLICIES.register("certa", lambda **kw: CertaSJF(use_certaindex=True, **kw),
                  help="gang + shortest remaining work first (certaindex-informed) + aging", color="#dc2626")


def make_policy(name: str, **kw: Any) -> SchedulingPolicy:
    """A fresh policy object by name (see :data:`POLICIES`); ``kw`` go to its constructor."""
    factory = POLICIES.get(name)
    try:
        return factory(**kw)
    except TypeError as exc:
        raise ConfigError(f"bad options for scheduling policy {name!r}: {exc}") from None


def remaining_steps(policy: "Policy | None", program: "Program") -> float:
    """Knob units still to run as implied by the program's certaindex and stop policy:
    ``policy.expected_remaining(program)`` (:meth:`~certa.runtime.policy.Threshold.expected_remaining`
    reads the certaindex); with no policy, until the knob cap. Multiply by tokens per step for
    ``ProgramInfo.est_remaining_tokens``.
    """
    if policy is None:
        cap = program.knob.cap  # per certaindex point: the attribute, not the knob_cap property
        k = program.knob_value
        return float(cap - k) if cap and cap > k else 0.0
    return float(policy.expected_remaining(program))


__all__ = ["AppFIFO", "CertaSJF", "History", "LPM", "POLICIES", "StopCalibration", "make_policy", "remaining_steps"]

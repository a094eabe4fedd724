"""The discrete-event serving simulator: programs → certa Scheduler → simulated engine.

This is a SIMULATOR (no model runs). Two layers, as in a real deployment:

1. certa's :class:`~certa.runtime.scheduling.scheduler.Scheduler` (the same class the Runtime uses,
   driven through its sync API) admits program requests under :class:`AdmissionLimits`,
   in the order of the policy object;
2. :class:`~.engine.SimEngine` batches admitted requests continuously, ordering its own
   queue and preemptions with the SAME policy object (SGLang priority scheduling).

Times come from the cost model. A run returns one :class:`ProgramRecord` per program.

Example:
    >>> from certa.runtime.sim.presets import get_preset
    >>> from certa.runtime.sim.synth import synth_traces
    >>> from certa.runtime.sim.workload import make_workload
    >>> pre = get_preset("h200-r1-distill-qwen-7b")
    >>> specs = make_workload(synth_traces(4, seed=0), n=6, rate=0.2, seed=0)
    >>> res = simulate(specs, "certa", EngineConfig(pre.kv_capacity), pre.cost, early_exit=True)
    >>> len(res.records), all(r.latency > 0 for r in res.records)
    (6, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from certa.runtime.errors import ConfigError
from certa.runtime.scheduling.scheduler import AdmissionLimits, Scheduler, SchedulingPolicy
from certa.runtime.scheduling.policies import make_policy
from certa.runtime.sim.cost_model import CostModel
from certa.runtime.sim.engine import EngineConfig, EngineStats, SimEngine, SimRequest
from certa.runtime.sim.workload import ProgramConfig, ProgramSpec, SimProgram, make_program


@dataclass(frozen=True, slots=True)
class ProgramRecord:
    """The outcome of one simulated program."""

    pid: str
    kind: str
    arrival: float
    finish: float
    deadline: float | None
    tokens: int  # decode tokens of every kind (main + probe)
    main_tokens: int
    requests: int
    knob_used: int
    exit_reason: str
    correct: bool
    preemptions: int

    @property
    def latency(self) -> float:
        return self.finish - self.arrival

    @property
    def met(self) -> bool:
        return self.deadline is None or self.finish <= self.deadline + 1e-9


@dataclass(slots=True)
class SimResult:
    """Everything one simulator run produced."""

    policy: str
    early_exit: bool
    records: list[ProgramRecord]
    stats: EngineStats
    end: float
    extra: dict = field(default_factory=dict)


def default_limits(engine: EngineConfig) -> AdmissionLimits:
    """Admission limits matched to the engine: its batch size and KV pool."""
    return AdmissionLimits(max_requests=engine.max_running, kv_tokens=engine.kv_capacity)


def simulate(specs: list[ProgramSpec], policy: SchedulingPolicy | str, engine: EngineConfig, cost: CostModel, *,
             limits: AdmissionLimits | None = None, config: ProgramConfig | None = None, early_exit: bool = True,
             record: bool = False) -> SimResult:
    """Run ``specs`` to completion under ``policy`` and return per-program records.

    ``limits``: certa's admission limits (None = pass everything to the engine, as SGLang
    does by default). ``early_exit``: programs stop on certaindex (else run to budget).
    ``record``: keep one :class:`IterationRecord` per engine iteration in ``stats.records``.
    """
    pol = make_policy(policy) if isinstance(policy, str) else policy
    cfg = config or ProgramConfig()
    clock = [0.0]
    sched = Scheduler(pol, limits, clock=lambda: clock[0])
    eng = SimEngine(engine, cost, pol, record=record)
    arrivals = sorted(specs, key=lambda s: (s.arrival, s.pid))
    if len({s.pid for s in arrivals}) != len(arrivals):
        raise ConfigError("program ids in a workload must be unique")
    live: dict[str, SimProgram] = {}
    waiting_req: dict[str, SimRequest] = {}
    records: list[ProgramRecord] = []
    preempt: dict[str, int] = {}
    ai = 0

    def submit(prog: SimProgram, reqs: list[SimRequest]) -> None:
        est = prog.est_output()
        for r in reqs:
            own = r.prompt - r.shared + est // 2  # a request's KV averaged over its life
            r.ticket = sched.ticket(r.rid, prog.info, est_tokens=est, prefix_hint=prog.spec.pid, kv_tokens=own)
            waiting_req[r.rid] = r
            sched.submit(r.ticket)

    def finish(prog: SimProgram, now: float) -> None:
        for r in list(prog.outstanding.values()):  # early exit: abort what is still out
            if r.rid in waiting_req:
                sched.discard(r.ticket)  # type: ignore[arg-type]
                waiting_req.pop(r.rid)
            else:
                eng.abort(r)
                sched.release(r.ticket)  # type: ignore[arg-type]
                prog.charge(r)
            preempt[prog.spec.pid] = preempt.get(prog.spec.pid, 0) + r.preemptions
        eng.drop_program(prog.spec.pid)
        sched.unregister(prog.spec.pid)
        del live[prog.spec.pid]
        u = prog.prog.tokens
        records.append(ProgramRecord(prog.spec.pid, prog.spec.kind, prog.spec.arrival, now, prog.spec.deadline,
                                     u.total, u.main, u.requests, prog.prog.knob_value, prog.exit_reason,
                                     prog.correct, preempt.pop(prog.spec.pid, 0)))

    while ai < len(arrivals) or live:
        now = clock[0]
        while ai < len(arrivals) and arrivals[ai].arrival <= now:
            prog = make_program(arrivals[ai], cfg, early_exit)
            live[prog.spec.pid] = prog
            sched.register(prog.info)
            submit(prog, prog.start())
            ai += 1
        for t in sched.admit():
            eng.add(waiting_req.pop(t.rid), now)
        nxt = arrivals[ai].arrival if ai < len(arrivals) else math.inf
        if eng.idle:
            if nxt == math.inf:
                if live:
                    raise ConfigError(f"simulation stalled with {len(live)} programs waiting "
                                      f"(a request larger than the admission limits?)")
                break
            clock[0] = nxt
            continue
        now, done = eng.step(now, nxt)
        clock[0] = now
        for r in done:
            sched.release(r.ticket)  # type: ignore[arg-type]
            prog = live.get(r.pid)
            if prog is None:  # its program exited on a request that finished in the same iteration
                continue
            preempt[r.pid] = preempt.get(r.pid, 0) + r.preemptions
            new = prog.on_done(r)
            if prog.finished:
                finish(prog, now)
            else:
                submit(prog, new)
    records.sort(key=lambda r: (r.arrival, r.pid))
    return SimResult(pol.name, early_exit, records, eng.stats, clock[0])


def standalone_latency(spec: ProgramSpec, engine: EngineConfig, cost: CostModel, *,
                       config: ProgramConfig | None = None, early_exit: bool = False) -> float:
    """Latency of ``spec`` alone on an idle engine (the reference for SLO deadlines)."""
    alone = ProgramSpec(spec.pid, 0.0, spec.problem, spec.kind, spec.prompt_tokens)
    res = simulate([alone], "fcfs", engine, cost, config=config, early_exit=early_exit)
    return res.records[0].latency


__all__ = ["ProgramRecord", "SimResult", "default_limits", "simulate", "standalone_latency"]

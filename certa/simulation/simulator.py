"""The serving SIMULATOR: trace programs → the real Runtime and Scheduler → a simulated engine.

This is a SIMULATOR (no model runs). :func:`simulate` starts each :class:`ProgramSpec`'s
program at its arrival time with :meth:`certa.runtime.Runtime.run` — the runtime's own
driving loop, certaindex updates, stopping policy and abort-on-exit — on a
:class:`~certa.runtime.sim.clock.VirtualClockLoop` (simulated time). Two layers, as in a real
deployment:

1. certa's Scheduler (:class:`~certa.runtime.sim.estimates.HistoryScheduler`: the real
   Scheduler with history-based token estimates) admits requests under ``limits`` in the
   policy's order;
2. :class:`~certa.runtime.sim.backend.SimBackend` serves them on the simulated engine,
   whose queue and preemptions the SAME policy object orders; what each request returns
   comes from the traces (:class:`~certa.eval.replay_backend.ReplayBackend`).

A run returns one :class:`ProgramRecord` per program.

Example:
    >>> from certa.runtime.sim.presets import get_preset
    >>> from certa.simulation.synth import synth_traces
    >>> from certa.simulation.workload import make_workload
    >>> pre = get_preset("h200-r1-distill-qwen-7b")
    >>> specs = make_workload(synth_traces(4, seed=0), n=6, rate=0.2, seed=0)
    >>> res = simulate(specs, "certa", EngineConfig(pre.kv_capacity), pre.cost, early_exit=True)
    >>> len(res.records), all(r.latency > 0 for r in res.records)
    (6, True)
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from certa.eval.replay_backend import ReplayBackend
from certa.eval.traces import TraceProblem
from certa.runtime.errors import ConfigError
from certa.runtime.limits import RuntimeLimits
from certa.runtime.policy import ExitReason
from certa.runtime.result import Result
from certa.runtime.build import make_runtime
from certa.runtime.scheduling.policies import make_policy
from certa.runtime.scheduling.scheduler import AdmissionLimits, SchedulingPolicy
from certa.runtime.sim.backend import SimBackend
from certa.runtime.sim.clock import run_virtual
from certa.runtime.sim.cost_model import CostModel
from certa.runtime.sim.engine import EngineConfig, EngineStats
from certa.runtime.sim.estimates import HistoryScheduler
from certa.runtime.types import TokenUsage

from certa.simulation.programs import make_program, program_correct
from certa.simulation.workload import ProgramConfig, ProgramSpec

__all__ = ["ProgramRecord", "SimResult", "default_limits", "simulate", "standalone_latency"]


@dataclass(frozen=True, slots=True)
class ProgramRecord:
    """The outcome of one simulated program."""

    pid: str
    kind: str
    arrival: float
    finish: float
    deadline: float | None
    tokens: int  # decode tokens of every kind (main + probe), aborted requests' included
    main_tokens: int
    requests: int
    knob_used: int
    exit_reason: ExitReason
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


def _problems(specs: list[ProgramSpec]) -> list[TraceProblem]:
    by_idx: dict[str, TraceProblem] = {}
    for s in specs:
        seen = by_idx.setdefault(str(s.problem.idx), s.problem)
        if seen is not s.problem and seen != s.problem:
            raise ConfigError(f"two different trace problems share idx {s.problem.idx!r}")
    return list(by_idx.values())


def _prompt_lengths(specs: list[ProgramSpec]) -> dict[str, int]:
    """Prompt tokens by problem idx (the replay keys name problems, not programs)."""
    out: dict[str, int] = {}
    for s in specs:
        if out.setdefault(str(s.problem.idx), s.prompt_tokens) != s.prompt_tokens:
            raise ConfigError(f"programs on trace problem {s.problem.idx!r} declare different prompt lengths")
    return out


def _record(spec: ProgramSpec, prog, res: Result, finish: float, backend: SimBackend) -> ProgramRecord:
    if res.error is not None:
        raise res.error
    pid = prog.program_id
    spent = TokenUsage()
    spent.merge(res.tokens)
    spent.merge(backend.wasted.get(pid, TokenUsage()))
    return ProgramRecord(spec.pid, spec.kind, spec.arrival, finish, spec.deadline, spent.total, spent.main,
                         res.tokens.requests, res.knob_used, res.exit_reason, program_correct(prog),
                         backend.preemptions.get(pid, 0))


async def _serve(specs: list[ProgramSpec], pol: SchedulingPolicy, backend: SimBackend,
                 limits: AdmissionLimits | None, cfg: ProgramConfig, early_exit: bool) -> list[ProgramRecord]:
    loop = asyncio.get_running_loop()
    sched = HistoryScheduler(pol, limits, clock=loop.time, prior_output=cfg.prior_output)
    # no request timeout: its watchdog keeps wall-clock deadlines, meaningless in simulated time
    rt = make_runtime(backend, scheduler=sched, limits=RuntimeLimits(max_tokens_per_request=None, request_timeout=None))
    records: list[ProgramRecord] = []

    async def one(spec: ProgramSpec) -> None:
        arrived = loop.create_future()
        loop.call_at(spec.arrival, arrived.set_result, None)
        await arrived
        prog = make_program(spec, cfg, early_exit)
        res = await rt.run(prog, return_errors=True)
        records.append(_record(spec, prog, res, loop.time(), backend))

    await asyncio.gather(*(one(s) for s in specs))
    return records


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
    arrivals = sorted(specs, key=lambda s: (s.arrival, s.pid))
    if len({s.pid for s in arrivals}) != len(arrivals):
        raise ConfigError("program ids in a workload must be unique")
    content = ReplayBackend(_problems(arrivals))
    prompts = _prompt_lengths(arrivals)
    backend = SimBackend(content, engine, cost, prompt_tokens=lambda req: prompts[str(content.lookup(req)[0].idx)],
                         record=record)
    records = run_virtual(_serve(arrivals, pol, backend, limits, cfg, early_exit))
    records.sort(key=lambda r: (r.arrival, r.pid))
    return SimResult(pol.name, early_exit, records, backend.engine.stats, max((r.finish for r in records), default=0.0))


def standalone_latency(spec: ProgramSpec, engine: EngineConfig, cost: CostModel, *,
                       config: ProgramConfig | None = None, early_exit: bool = False) -> float:
    """Latency of ``spec`` alone on an idle engine (the reference for SLO deadlines)."""
    alone = ProgramSpec(spec.pid, 0.0, spec.problem, spec.kind, spec.prompt_tokens)
    res = simulate([alone], "fcfs", engine, cost, config=config, early_exit=early_exit)
    return res.records[0].latency

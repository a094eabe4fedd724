"""Online-serving experiment on the simulator: SLO attainment vs arrival rate and SLO scale.

For each policy, the same Poisson workload is simulated at a grid of arrival rates; the
largest rate with >= 90% of programs meeting their deadline is refined by bisection. The
SLO-scale sweep evaluates one run per policy (at ``slo_rate``) against tighter and looser
deadlines (no policy reads deadlines, so one run serves every scale) and finds each
policy's smallest SLO scale with >= 90% attainment (``min_scale``; ``tighter`` = ratios).

Deadlines: ``uniform`` (default, the paper's) — every program gets the same SLO,
``slo_scale × mean standalone latency`` of the workload's programs (each run alone at full
budget on the idle simulated engine); ``oracle`` — ``slo_scale ×`` the program's OWN
standalone latency (uses each program's true length: ORACLE information).

Which programs use certaindex early exit (``exit_mode``): ``system`` (default) — only
``certa`` (the baselines are systems without certaindex, and ``certa-nocd`` is certa's
scheduler without it); ``all`` — every policy (isolates scheduling); ``none``.
Gang policies (``app-fifo``, ``certa-nocd``, ``certa``) get certa's admission control
(engine batch size and KV pool, scaled by ``admission``; the KV budget also by ``kv_admission``:
the ledger counts each request at its AVERAGE footprint, half its expected output, so a budget
of the pool itself leaves the pool part-empty at the peaks; the engine's own KV admission and
preemption handle what is admitted beyond it); ``fcfs``/``lpm`` pass every
request to the engine as SGLang does.

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> out = run_sweep(synth_traces(6, seed=0), SweepSpec(policies=["fcfs", "certa"], n_programs=12,
    ...                 rates=[0.05, 0.1], slo_scales=[2.0], refine=0))
    >>> sorted(out["max_rate"]), out["simulator"]
    (['certa', 'fcfs'], True)
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from certa.runtime.errors import ConfigError
from certa.runtime.scheduling.policies import POLICIES
from certa.runtime.sim.engine import EngineConfig
from certa.runtime.sim.metrics import max_rate_at, summarize
from certa.runtime.sim.presets import get_preset
from certa.eval.traces import TraceProblem
from certa.simulation.simulator import SimResult, default_limits, simulate, standalone_latency
from certa.simulation.workload import ProgramConfig, ProgramSpec, make_workload

GANG = ("app-fifo", "certa-nocd", "certa")


@dataclass
class SweepSpec:
    """Everything that defines one online experiment (all of it lands in the JSON)."""

    preset: str = "h200-r1-distill-qwen-7b"
    policies: list[str] = field(default_factory=lambda: ["fcfs", "lpm", "app-fifo", "certa-nocd", "certa"])
    kind: Literal["sc", "cot", "mix"] = "sc"
    n_programs: int = 300
    prompt_tokens: int = 200
    rates: list[float] | None = None  # None: a grid around the estimated capacity
    slo_scale: float = 3.0
    rate_scales: list[float] = field(default_factory=lambda: [2.0, 3.0, 5.0, 8.0])  # max rate also at these
    slo_scales: list[float] = field(default_factory=lambda: [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0])
    slo_rate: float | None = None  # None: fcfs's max rate (else the lowest grid rate)
    deadline: Literal["uniform", "oracle"] = "uniform"
    exit_mode: Literal["system", "all", "none"] = "system"
    target: float = 0.9
    refine: int = 4  # bisection steps on each policy's max rate
    admission: float = 1.0  # gang policies' admission limits as a fraction of the engine's
    kv_admission: float = 1.0  # and their KV budget, further, as a multiple of the pool (see below)
    max_running: int = 256
    seed: int = 0
    program: ProgramConfig = field(default_factory=ProgramConfig)

    def check(self) -> None:
        bad = [p for p in self.policies if p not in POLICIES]
        if bad:
            raise ConfigError(f"unknown policies {bad}", hint=f"choose from {', '.join(POLICIES)}")
        if self.n_programs < 1 or self.slo_scale <= 0 or not 0 < self.target <= 1 or self.admission <= 0 \
                or self.kv_admission <= 0:
            raise ConfigError("n_programs, slo_scale, admission, kv_admission must be > 0 and target in (0, 1]")


class Experiment:
    """One workload on one simulated engine; runs policies at rates (with caching)."""

    def __init__(self, problems: list[TraceProblem], spec: SweepSpec,
                 workload: Callable[[float], list[ProgramSpec]] | None = None) -> None:
        """``workload(rate)`` (optional) builds the programs at a rate instead of :func:`make_workload`
        (the reasoning workloads of :mod:`.reasoning_workload`); it must vary only arrival times."""
        spec.check()
        self.spec, self.problems = spec, problems
        self._workload = workload
        self.preset = get_preset(spec.preset)
        self.engine = EngineConfig(self.preset.kv_capacity, max_running=spec.max_running)
        self.runs: dict[tuple[str, float], SimResult] = {}

    @functools.cached_property
    def alone(self) -> dict[str, float]:
        """Each program's latency alone on the idle engine at full budget (computed on first use)."""
        return {s.pid: standalone_latency(s, self.engine, self.preset.cost, config=self.spec.program)
                for s in self.workload(1.0)}

    @functools.cached_property
    def slo_ref(self) -> float:
        """The workload's mean standalone latency: the unit of uniform deadlines."""
        return statistics.fmean(self.alone.values())

    def early_exit(self, policy: str) -> bool:
        return {"system": policy == "certa", "all": True, "none": False}[self.spec.exit_mode]

    def workload(self, rate: float) -> list[ProgramSpec]:
        if self._workload is not None:
            return self._workload(rate)
        s = self.spec
        return make_workload(self.problems, n=s.n_programs, rate=rate, seed=s.seed, kind=s.kind,
                             prompt_tokens=s.prompt_tokens)

    def run(self, policy: str, rate: float) -> SimResult:
        key = (policy, rate)
        if key not in self.runs:
            lim = None
            if policy in GANG:
                d = default_limits(self.engine)
                lim = replace(d, max_requests=max(1, int(d.max_requests * self.spec.admission)),  # type: ignore[operator]
                              kv_tokens=int(d.kv_tokens * self.spec.admission * self.spec.kv_admission))  # type: ignore[operator]
            self.runs[key] = simulate(self.workload(rate), policy, self.engine, self.preset.cost, limits=lim,
                                       config=self.spec.program, early_exit=self.early_exit(policy))
        return self.runs[key]

    def slo(self, pid: str, scale: float) -> float:
        return scale * (self.alone[pid] if self.spec.deadline == "oracle" else self.slo_ref)

    def attainment(self, res: SimResult, scale: float) -> float:
        return sum(r.latency <= self.slo(r.pid, scale) + 1e-9 for r in res.records) / len(res.records)

    def min_scale(self, res: SimResult) -> float:
        """The smallest SLO scale at which ``target`` of the programs meet their deadline."""
        need = sorted(r.latency / self.slo(r.pid, 1.0) for r in res.records)
        return need[max(0, math.ceil(self.spec.target * len(need)) - 1)]

    def default_rates(self) -> list[float]:
        """A geometric grid from 0.1× to 4× a rough capacity estimate (full-budget programs)."""
        tokens = statistics.fmean(r.tokens for r in self.run("fcfs", 1e-3).records)
        cost, R = self.preset.cost, self.engine.max_running
        tps = R / cost.iteration_time(R, R * (self.spec.prompt_tokens + tokens / 16), 0.0)
        cap = tps / max(tokens, 1.0)
        return [round(cap * 0.1 * 40 ** (i / 13), 5) for i in range(14)]


def bisect_rate(exp: Experiment, policy: str, lo: float, hi: float, steps: int, scale: float, target: float) -> float:
    """The highest rate in ``[lo, hi]`` found to meet ``target`` attainment, by ``steps`` geometric bisections."""
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if exp.attainment(exp.run(policy, mid), scale) >= target:
            lo = mid
        else:
            hi = mid
    return lo


def max_rate(exp: Experiment, policy: str, rates: list[float], scale: float) -> tuple[float | None, bool]:
    """(max rate at the target attainment, censored = still meeting it at the grid's top)."""
    att = [exp.attainment(exp.run(policy, r), scale) for r in rates]
    coarse = max_rate_at(rates, att, exp.spec.target)
    above = [r for r in rates if coarse is not None and r > coarse]
    if coarse is None or not above or not exp.spec.refine:
        return coarse, coarse is not None and not above
    lo = max(r for r in rates if r <= coarse)
    return round(bisect_rate(exp, policy, lo, above[0], exp.spec.refine, scale, exp.spec.target), 6), False


def _named(v: Any) -> Any:
    """JSON-ready: a callable becomes its qualified name."""
    return f"{getattr(v, '__module__', '?')}.{getattr(v, '__qualname__', repr(v))}" if callable(v) else v


def _ratios(mr: dict[str, float | None]) -> dict[str, float]:
    return {f"certa/{b}": round(mr["certa"] / mr[b], 3)  # type: ignore[operator]
            for b in ("fcfs", "lpm", "app-fifo", "certa-nocd") if mr.get("certa") and mr.get(b)}


def run_sweep(problems: list[TraceProblem], spec: SweepSpec,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the whole experiment and return a JSON-ready dict (see docs/scheduling.md)."""
    exp = Experiment(problems, spec)
    say = progress or (lambda msg: None)
    rates = sorted(spec.rates or exp.default_rates())
    out: dict[str, Any] = {
        "simulator": True, "note": "SIMULATED serving; cost model = " + exp.preset.note,
        "spec": {**asdict(spec), "program": {k: _named(v) for k, v in asdict(spec.program).items()}},
        "preset": {"name": exp.preset.name, "hardware": exp.preset.hardware, "model": exp.preset.model,
                   "estimate": exp.preset.estimate, "cost": exp.preset.cost.as_dict(),
                   "kv_capacity": exp.preset.kv_capacity},
        "workload": {"problems": len(problems), "models": sorted({p.model for p in problems}),
                     "standalone_latency_s": {"mean": exp.slo_ref, "max": max(exp.alone.values())},
                     "uniform_slo_s": spec.slo_scale * exp.slo_ref if spec.deadline == "uniform" else None},
        "rates": rates, "rate_sweep": {}, "max_rate": {}, "max_rate_censored": {}, "ratios": {},
        "max_rate_by_scale": {}, "ratios_by_scale": {},
    }
    for pol in spec.policies:
        rows = []
        for rate in rates:
            res = exp.run(pol, rate)
            summ = summarize(res.records, cdf_points=20)
            summ["attainment"] = exp.attainment(res, spec.slo_scale)
            rows.append({"rate": rate, **summ, "preemptions": res.stats.preemptions})
            say(f"{pol:>10} rate {rate:.4g}/s attainment {summ['attainment']:.3f} "
                f"P90 latency {summ['latency']['p90']:.1f}s")
        out["rate_sweep"][pol] = rows
    for scale in sorted({spec.slo_scale, *spec.rate_scales}):
        best = {pol: max_rate(exp, pol, rates, scale) for pol in spec.policies}
        out["max_rate_by_scale"][str(scale)] = {p: r for p, (r, _) in best.items()}
        out["ratios_by_scale"][str(scale)] = _ratios({p: r for p, (r, _) in best.items()})
        if scale == spec.slo_scale:
            out["max_rate"] = {p: r for p, (r, _) in best.items()}
            out["max_rate_censored"] = {p: c for p, (_, c) in best.items()}
            out["ratios"] = _ratios(out["max_rate"])
            for p, (r, c) in best.items():
                say(f"{p:>10} max rate at >= {spec.target:.0%} attainment: {r}{' (top of grid)' if c else ''}")
    mr = out["max_rate"]
    slo_rate = spec.slo_rate or mr.get("fcfs") or rates[0]
    out["slo_sweep"] = {"rate": slo_rate, "scales": spec.slo_scales, "attainment": {}, "min_scale": {},
                        "fairness": {}}
    for pol in spec.policies:
        res = exp.run(pol, slo_rate)
        att = [exp.attainment(res, s) for s in spec.slo_scales]
        out["slo_sweep"]["attainment"][pol] = att
        out["slo_sweep"]["min_scale"][pol] = round(exp.min_scale(res), 4)
        out["slo_sweep"]["fairness"][pol] = summarize(res.records)["fairness"]
    ms = out["slo_sweep"]["min_scale"]
    out["slo_sweep"]["tighter"] = {f"{b}/certa": round(ms[b] / ms["certa"], 3)
                                   for b in ("fcfs", "lpm", "app-fifo", "certa-nocd") if b in ms and "certa" in ms}
    return out


__all__ = ["Experiment", "GANG", "SweepSpec", "bisect_rate", "max_rate", "run_sweep"]

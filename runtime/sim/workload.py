"""Simulator workloads: trace-replay programs (SC, CoT) and Poisson arrivals.

A program replays one trace problem, issuing the requests the real program would issue
and taking the real certaindex decisions from the trace's answers:

* ``sc`` — self-consistency: ``fanout`` samples in flight (one request each, all sharing
  the question prefix), each finished one replaced until ``budget`` samples; after each
  finished sample the certaindex is the normalised answer entropy
  (:func:`.certainty.entropy_certainty`) and a real :class:`~certa.runtime.policy.Threshold`
  (``tau``, ``detect_at``, ``every``, counted in finished samples) decides; on exit the
  samples still in flight are aborted (their tokens so far are spent).
* ``cot`` — one chain of thought (the first probed sample) grown ``interval`` tokens at a
  time; after each chunk a probe (prefix-cached context + suffix, ``probe_tokens`` decoded,
  rolled back) returns the trace's probe answer; certaindex = :func:`.certainty.probe_certainty`
  over the last ``window`` answers; exit at 1.0 (Dynasor-CoT). Without early exit: one request.

The signals default to the minimal ones in :mod:`.certainty` (this layer may not import
``certa.algorithms``); front ends pass the library's own through ``ProgramConfig.sc_signal``
/ ``cot_signal`` (``certa sim simulate`` and the benchmark do). With ``early_exit=False``
programs run to their budget (what a system without certaindex
does). Each program keeps its :class:`~certa.runtime.scheduling.scheduler.ProgramInfo` current exactly
as the Runtime does (``tokens_per_step``, ``certaindex``, ``est_remaining_tokens`` from
:func:`~certa.runtime.scheduling.policies.remaining_steps`).

Example:
    >>> from certa.runtime.sim.synth import synth_traces
    >>> specs = make_workload(synth_traces(5, seed=0), n=10, rate=0.5, seed=1)
    >>> len(specs), specs[0].pid, specs[1].arrival > specs[0].arrival
    (10, 'sc-0', True)
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Optional

from certa.runtime.errors import ConfigError
from certa.runtime.policy import Threshold
from certa.runtime.program import Program
from certa.runtime.scheduling.scheduler import ProgramInfo
from certa.runtime.scheduling.policies import remaining_steps
from certa.runtime.types import CertaindexPoint, Knob
from certa.runtime.sim.certainty import entropy_certainty, majority, normalize, probe_certainty
from certa.runtime.sim.engine import SimRequest
from certa.eval.traces import TraceProblem

Kind = Literal["sc", "cot"]
SCSignal = Callable[[Sequence[Optional[str]]], float]
CoTSignal = Callable[[Sequence[Optional[str]], int], float]


@dataclass(frozen=True, slots=True)
class ProgramConfig:
    """How trace programs run (shared by a whole workload)."""

    fanout: int = 4
    budget: int = 16
    tau: float = 0.55  # with detect_at=4: at least 3 of 4 answers agree
    detect_at: int = 4
    every: int | None = None
    window: int = 3
    interval: int | None = None  # CoT probe spacing; default: the trace's ``interval`` (else 64)
    probe_tokens: int = 20
    probe_suffix: int = 30
    max_tokens: int = 8192
    prior_output: int = 1000  # admission's per-request output estimate before any history
    sc_signal: SCSignal | None = None  # SC certaindex of the answers so far (default: certainty.entropy_certainty)
    cot_signal: CoTSignal | None = None  # CoT certaindex of probe answers, window k (default: probe_certainty)


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """One program instance of a workload: a trace problem, a kind, an arrival, a deadline."""

    pid: str
    arrival: float
    problem: TraceProblem
    kind: Kind = "sc"
    prompt_tokens: int = 200
    deadline: float | None = None  # absolute time; None = no SLO


class _Replay(Program):
    """The Program view that stop policies read; the simulator drives it, never ``execute``."""

    def __init__(self, knob: Knob) -> None:
        super().__init__()
        self.knob = knob

    async def execute(self, ctx) -> bool:  # pragma: no cover - never called
        raise NotImplementedError("trace-replay programs are driven by the simulator")


class SimProgram:
    """Base of the replay state machines: ``start()`` and ``on_done(req)`` return new requests."""

    def __init__(self, spec: ProgramSpec, cfg: ProgramConfig, early_exit: bool, knob: Knob) -> None:
        self.spec, self.cfg = spec, cfg
        self.prog = _Replay(knob)
        self.prog.program_id = spec.pid
        self.policy: Threshold | None = None
        self.info = ProgramInfo(spec.pid, arrival=spec.arrival, knob_cap=knob.cap, deadline=spec.deadline,
                                name=spec.kind, prefix_tokens=spec.prompt_tokens)
        self.early_exit = early_exit
        self.finished = False
        self.exit_reason = ""
        self.answer: str | None = None
        self.outstanding: dict[str, SimRequest] = {}
        self._n = itertools.count()

    def _req(self, prompt: int, output: int, shared: int, extends: bool = False, kind: str = "main",
             payload: object = None, max_tokens: int | None = None) -> SimRequest:
        r = SimRequest(f"{self.spec.pid}:{next(self._n)}", self.spec.pid, prompt=prompt, output=max(1, output),
                       shared=shared, extends_prefix=extends, kind=kind, payload=payload,
                       max_tokens=self.cfg.max_tokens if max_tokens is None else max_tokens)
        self.outstanding[r.rid] = r
        return r

    def est_output(self) -> int:
        """Per-request output estimate for admission (mean so far, else the prior)."""
        u = self.prog.tokens
        return int(u.total / u.requests) if u.requests else self.cfg.prior_output

    def _record(self, r: SimRequest) -> None:
        self.outstanding.pop(r.rid, None)
        self.prog.tokens.add("probe" if r.kind == "probe" else "main", r.generated)
        self.prog.tokens.requests += 1
        self.info.tokens = self.prog.tokens.total

    def charge(self, r: SimRequest) -> None:
        """Count the tokens an aborted request had generated (spent, though unused)."""
        self.prog.tokens.add("probe" if r.kind == "probe" else "main", r.generated)
        self.info.tokens = self.prog.tokens.total

    def _update(self, value: float) -> bool:
        """Record the certaindex like ``Runtime._update_certaindex``; True if the policy stops."""
        p, info = self.prog, self.info
        p.signals = {"certaindex": value}
        p.trajectory.append(CertaindexPoint(p.knob_value, value, p.signals, p.tokens.total))
        info.certaindex, info.knob_used, info.tokens = value, p.knob_value, p.tokens.total
        info.tokens_per_step = p.tokens.total / max(p.knob_value, 1)
        info.est_remaining_tokens = info.tokens_per_step * remaining_steps(self.policy, p)
        return self.policy is not None and self.policy.decide(p).stop

    def _finish(self, reason: str, answer: str | None) -> list[SimRequest]:
        self.finished, self.exit_reason, self.answer = True, reason, answer
        return []

    @property
    def correct(self) -> bool:
        gold = normalize(None if self.spec.problem.gold is None else str(self.spec.problem.gold))
        if gold is not None:
            return normalize(self.answer) == gold
        return any(s.correct and normalize(s.pred) == normalize(self.answer) for s in self.spec.problem.samples)


class SCProgram(SimProgram):
    """Self-consistency over the trace's samples: ``fanout`` in flight, each finished sample
    replaced at once (no round barrier); the knob counts finished samples."""

    def __init__(self, spec: ProgramSpec, cfg: ProgramConfig, early_exit: bool) -> None:
        cap = min(cfg.budget, len(spec.problem.samples))
        super().__init__(spec, cfg, early_exit, Knob("branches", cap=cap))
        if early_exit:
            self.policy = Threshold(cfg.tau, detect_at=cfg.detect_at, every=cfg.every)
        self.preds: list[str | None] = []
        self.launched = 0

    def start(self) -> list[SimRequest]:
        return self._launch(self.cfg.fanout)

    def _launch(self, n: int) -> list[SimRequest]:
        samples, P, cap = self.spec.problem.samples, self.spec.prompt_tokens, self.prog.knob.cap or 0
        reqs = []
        for i in range(self.launched, min(self.launched + n, cap)):
            reqs.append(self._req(P, min(samples[i].tokens, self.cfg.max_tokens), shared=P, payload=i))
        self.launched += len(reqs)
        return reqs

    def on_done(self, r: SimRequest) -> list[SimRequest]:
        self._record(r)
        sample = self.spec.problem.samples[r.payload]  # type: ignore[index]
        self.preds.append(sample.pred if sample.tokens <= self.cfg.max_tokens else None)
        self.prog.knob_used = len(self.preds)
        if self._update((self.cfg.sc_signal or entropy_certainty)(self.preds)):
            return self._finish("certaindex", majority(self.preds))
        if self.prog.knob_used >= (self.prog.knob.cap or 0):
            return self._finish("cap", majority(self.preds))
        return self._launch(1)


class CoTProgram(SimProgram):
    """One chain of thought, probed every ``interval`` tokens when early exit is on."""

    def __init__(self, spec: ProgramSpec, cfg: ProgramConfig, early_exit: bool) -> None:
        super().__init__(spec, cfg, early_exit, Knob("tokens", cap=cfg.max_tokens))
        prob = spec.problem
        self.sample = (prob.probed or prob.samples)[0]
        self.length = min(self.sample.tokens, cfg.max_tokens)
        self.interval = cfg.interval or prob.interval or 64
        if early_exit:
            self.policy = Threshold(1.0, detect_at=cfg.window * self.interval, every=self.interval)
        self.pos = 0
        self.probes: list[str | None] = []

    def _final(self) -> str | None:
        return self.sample.pred if self.sample.tokens <= self.cfg.max_tokens else None

    def start(self) -> list[SimRequest]:
        P = self.spec.prompt_tokens
        if not self.early_exit:
            return [self._req(P, self.length, shared=P)]
        return [self._req(P, min(self.interval, self.length), shared=P, extends=True, max_tokens=self.interval)]

    def on_done(self, r: SimRequest) -> list[SimRequest]:
        self._record(r)
        P = self.spec.prompt_tokens
        if r.kind == "main":
            self.pos += r.generated
            if self.pos >= self.length:
                self.prog.knob_used = self.pos
                return self._finish("done", self._final())
            ctx = P + self.pos
            return [self._req(ctx + self.cfg.probe_suffix, self.cfg.probe_tokens, shared=ctx, kind="probe",
                              max_tokens=self.cfg.probe_tokens)]
        self.probes.append(self.sample.probe_at(self.pos))
        if self._update((self.cfg.cot_signal or probe_certainty)(self.probes, self.cfg.window)):
            return self._finish("certaindex", self.probes[-1])
        ctx = P + self.pos
        return [self._req(ctx, min(self.interval, self.length - self.pos), shared=ctx, extends=True,
                          max_tokens=self.interval)]


def make_program(spec: ProgramSpec, cfg: ProgramConfig, early_exit: bool) -> SCProgram | CoTProgram:
    if spec.kind == "sc":
        return SCProgram(spec, cfg, early_exit)
    if spec.kind == "cot":
        return CoTProgram(spec, cfg, early_exit)
    raise ConfigError(f"unknown program kind {spec.kind!r}", hint="use 'sc' or 'cot'")


def poisson_arrivals(rate: float, n: int, rng: random.Random, start: float = 0.0) -> list[float]:
    """``n`` arrival times of a Poisson process with ``rate`` programs per second."""
    if rate <= 0:
        raise ConfigError(f"arrival rate must be > 0, not {rate}")
    t, out = start, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def make_workload(problems: list[TraceProblem], *, n: int, rate: float, seed: int = 0,
                  kind: Kind | Literal["mix"] = "sc", prompt_tokens: int = 200) -> list[ProgramSpec]:
    """``n`` programs over ``problems`` (shuffled, cycled) with Poisson arrivals at ``rate``.

    ``kind="mix"`` alternates SC and CoT programs at random (half each).
    """
    if not problems:
        raise ConfigError("a workload needs at least one trace problem")
    rng = random.Random(seed)
    order = list(range(len(problems)))
    rng.shuffle(order)
    times = poisson_arrivals(rate, n, rng)
    specs = []
    for i, t in enumerate(times):
        k: Kind = (rng.choice(["sc", "cot"]) if kind == "mix" else kind)  # type: ignore[assignment]
        specs.append(ProgramSpec(f"{k}-{i}", t, problems[order[i % len(order)]], k, prompt_tokens))
    return specs


__all__ = ["CoTProgram", "ProgramConfig", "ProgramSpec", "SCProgram", "SimProgram", "make_program",
           "make_workload", "poisson_arrivals"]

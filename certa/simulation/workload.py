"""Simulator workloads: which trace programs arrive when (Poisson), and how they are configured.

A :class:`ProgramSpec` names one program instance: a trace problem, a kind (``sc`` or
``cot``, see :mod:`.programs`), an arrival time and an optional deadline. A
:class:`ProgramConfig` holds what every program of a workload shares (fan-out, budget,
thresholds, CoT probe spacing, admission prior).

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> specs = make_workload(synth_traces(5, seed=0), n=10, rate=0.5, seed=1)
    >>> len(specs), specs[0].pid, specs[1].arrival > specs[0].arrival
    (10, 'sc-0', True)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from certa.eval.traces import TraceProblem
from certa.runtime.errors import ConfigError

__all__ = ["Kind", "ProgramConfig", "ProgramSpec", "make_workload", "poisson_arrivals"]

Kind = Literal["sc", "cot", "tree"]


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
    probe_tokens: int = 20  # CoT probe decode budget (a probe's cost is what the trace recorded)
    max_tokens: int = 8192
    prior_output: int = 1000  # admission's per-request output estimate before any history

    def __post_init__(self) -> None:
        if self.fanout < 1 or self.budget < 1 or self.detect_at < 1 or self.window < 1 or self.max_tokens < 1:
            raise ConfigError(f"bad program config {self}", hint="fanout, budget, detect_at, window, max_tokens >= 1")


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """One program instance of a workload: a trace problem, a kind, an arrival, a deadline."""

    pid: str
    arrival: float
    problem: TraceProblem
    kind: Kind = "sc"
    prompt_tokens: int = 200
    deadline: float | None = None  # absolute time; None = no SLO


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

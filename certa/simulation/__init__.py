"""certa.simulation: the trace-driven serving SIMULATOR (online SLO experiments; no model runs).

Trace programs (:mod:`.programs`: Self-Consistency in the DSL, CoT as
:class:`~certa.eval.replay.ReplayCoT`) arrive as a Poisson workload (:mod:`.workload`) and run
in the real :class:`~certa.runtime.Runtime` with certa's Scheduler and policies, on the
simulated engine of :mod:`certa.runtime.sim` in simulated time (:mod:`.simulator`);
:mod:`.sweep` is the online SLO experiment, :mod:`.synth` makes seeded SYNTHETIC traces.
The generic pieces — cost model, engine, simulated-engine backend, virtual clock, presets,
fit, metrics — live in :mod:`certa.runtime.sim`.

Example:
    >>> from certa.runtime.sim import EngineConfig, get_preset, summarize
    >>> from certa.simulation import make_workload, simulate, synth_traces
    >>> pre = get_preset("h100-llama-3.1-8b")
    >>> specs = make_workload(synth_traces(5, seed=0), n=5, rate=0.1, seed=0)
    >>> summarize(simulate(specs, "certa", EngineConfig(pre.kv_capacity), pre.cost).records)["n"]
    5
"""

from certa.simulation.programs import make_program, program_correct, trace_sc
from certa.simulation.simulator import ProgramRecord, SimResult, default_limits, simulate, standalone_latency
from certa.simulation.sweep import SweepSpec, run_sweep
from certa.simulation.synth import synth_traces, write_synth
from certa.simulation.workload import ProgramConfig, ProgramSpec, make_workload, poisson_arrivals

__all__ = [
    "ProgramConfig", "ProgramRecord", "ProgramSpec", "SimResult", "SweepSpec", "default_limits", "make_program",
    "make_workload", "poisson_arrivals", "program_correct", "run_sweep", "simulate", "standalone_latency",
    "synth_traces", "trace_sc", "write_synth",
]

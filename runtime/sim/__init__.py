"""certa.runtime.sim: a discrete-event SIMULATOR of LLM serving for reasoning programs.

No model runs here. Programs replay reasoning traces (their certaindex decisions are the
real ones, computed from the traces' answers and probes), pass through certa's own
:class:`~certa.runtime.scheduling.scheduler.Scheduler` and policy objects, and run on a simulated
continuous-batching engine whose iteration time is ``t = a + b·N + c·K + d·P``. Hardware
presets are ESTIMATES from public specs; fit them to a real engine with :mod:`.fit`.

Modules: ``cost_model`` (model, IterationRecord, JSONL log), ``presets``, ``fit`` (NNLS fit,
validate), ``traces`` (pydantic trace format), ``synth`` (seeded synthetic traces),
``certainty`` (replay signals), ``engine`` (simulated engine), ``workload`` (programs,
arrivals), ``simulator`` (the event loop), ``metrics``, ``sweep`` (online SLO experiment),
``plots``.

Example:
    >>> from certa.runtime.sim import EngineConfig, get_preset, make_workload, simulate, summarize, synth_traces
    >>> pre = get_preset("h100-llama-3.1-8b")
    >>> specs = make_workload(synth_traces(5, seed=0), n=5, rate=0.1, seed=0)
    >>> summarize(simulate(specs, "certa", EngineConfig(pre.kv_capacity), pre.cost).records)["n"]
    5
"""

from certa.runtime.sim.cost_model import CostModel, IterationRecord, RecordWriter, load_records, prefill_pairs, save_records
from certa.runtime.sim.engine import EngineConfig, SimEngine, SimRequest
from certa.runtime.sim.fit import FitReport, ValidationReport, fit_cost_model, validate
from certa.runtime.sim.metrics import max_rate_at, summarize
from certa.runtime.sim.presets import PRESETS, Preset, get_preset
from certa.runtime.sim.simulator import ProgramRecord, SimResult, default_limits, simulate, standalone_latency
from certa.runtime.sim.sweep import SweepSpec, run_sweep
from certa.runtime.sim.synth import synth_traces, write_synth
from certa.eval.traces import TraceProblem, dump_traces, load_traces
from certa.runtime.sim.workload import ProgramConfig, ProgramSpec, make_workload, poisson_arrivals

__all__ = [
    "CostModel", "EngineConfig", "FitReport", "IterationRecord", "PRESETS", "Preset", "ProgramConfig",
    "ProgramRecord", "ProgramSpec", "RecordWriter", "SimEngine", "SimRequest", "SimResult", "SweepSpec",
    "TraceProblem", "ValidationReport", "default_limits", "dump_traces", "fit_cost_model", "get_preset",
    "load_records", "load_traces", "make_workload", "max_rate_at", "poisson_arrivals", "prefill_pairs", "run_sweep",
    "save_records", "simulate", "standalone_latency", "summarize", "synth_traces", "validate", "write_synth",
]

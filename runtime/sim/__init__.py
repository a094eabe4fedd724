"""certa.runtime.sim: the generic pieces of a serving SIMULATOR (no model runs).

A simulated continuous-batching engine whose iteration time is ``t = a + b·N + c·K + d·P``
(``engine``, ``cost_model``), served to the Runtime as a Backend (``backend.SimBackend``:
content from any backend, time from the engine) on an event loop with a virtual clock
(``clock.VirtualClockLoop``), with history-based admission estimates
(``estimates.HistoryScheduler``). Hardware presets are ESTIMATES from public specs
(``presets``); fit them to a real engine with ``fit``; ``metrics`` summarises program records.
The trace-driven workloads and the online SLO experiment are :mod:`certa.simulation`.

Example:
    >>> from certa.runtime.sim import CostModel, EngineConfig, SimEngine, SimRequest
    >>> eng = SimEngine(EngineConfig(kv_capacity=10_000), CostModel(a=0.01, b=0.0, c=0.0, d=0.0))
    >>> eng.add(SimRequest("r1", "p1", prompt=100, output=2))
    >>> now, done = eng.step(0.0); now, done = eng.step(now)
    >>> round(now, 3), [r.rid for r in done]
    (0.02, ['r1'])
"""

from certa.runtime.sim.backend import SimBackend, SimSequence
from certa.runtime.sim.clock import VirtualClockLoop, run_virtual
from certa.runtime.sim.cost_model import CostModel, IterationRecord, RecordWriter, load_records, prefill_pairs, save_records
from certa.runtime.sim.engine import EngineConfig, SimEngine, SimRequest
from certa.runtime.sim.estimates import HistoryScheduler
from certa.runtime.sim.fit import FitReport, ValidationReport, fit_cost_model, validate
from certa.runtime.sim.metrics import max_rate_at, summarize
from certa.runtime.sim.presets import PRESETS, Preset, get_preset

__all__ = [
    "CostModel", "EngineConfig", "FitReport", "HistoryScheduler", "IterationRecord", "PRESETS", "Preset",
    "RecordWriter", "SimBackend", "SimEngine", "SimRequest", "SimSequence",
    "ValidationReport", "VirtualClockLoop", "fit_cost_model", "get_preset", "load_records", "max_rate_at",
    "prefill_pairs", "run_virtual", "save_records", "summarize", "validate",
]

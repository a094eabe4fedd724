"""``certa sim``: the serving SIMULATOR from the command line (simulate a workload, fit the cost model).

Plain functions for other front ends: :func:`simulate_workload` (the online SLO experiment
of :mod:`certa.simulation.sweep`, optionally writing JSON and PNG plots),
:func:`fit_records` (fit ``t = a + b·N + c·K + d·P`` to an iteration log); the plots are
:func:`certa.viz.plots.plot_sweep`.

Example:
    certa sim simulate --workload traces.jsonl --policies fcfs,lpm,app-fifo,certa --json out.json
    certa sim fit iterations.jsonl --json fit.json
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Optional

import typer

from certa.cli.errors import fail
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from certa.runtime.errors import CertaError, ConfigError
from certa.viz.plots import plot_sweep
from certa.runtime.sim.cost_model import load_records
from certa.runtime.sim.fit import FitReport, fit_cost_model
from certa.eval.traces import load_traces
from certa.simulation.sweep import SweepSpec, run_sweep
from certa.simulation.synth import synth_traces
from certa.simulation.workload import ProgramConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Serving SIMULATOR (cost-model estimates, no model runs): online SLO experiments and "
                       "cost-model fitting.\n\nExample: certa sim simulate --policies fcfs,certa --json out.json")
out = Console()
err = Console(stderr=True)

def simulate_workload(workload: str | pathlib.Path | None, policies: Sequence[str], *,
                      json_out: str | pathlib.Path | None = None, png_dir: str | pathlib.Path | None = None,
                      synthetic: int = 100, seed: int = 0, progress: Callable[[str], None] | None = None,
                      program: ProgramConfig | None = None, **spec: Any) -> dict[str, Any]:
    """Run the online SLO experiment on a trace file (or ``synthetic`` seeded synthetic problems).

    ``spec`` holds :class:`~certa.simulation.sweep.SweepSpec` fields (``preset``, ``rates``,
    ``slo_scale``, ``deadline``, ``exit_mode``, ...); ``program`` the programs' configuration.
    Returns the result dict; writes it as JSON to ``json_out`` and plots to ``png_dir`` when given.
    """
    if workload is not None:
        problems = load_traces(workload)
        source = str(workload)
    else:
        problems = synth_traces(synthetic, seed=seed)
        source = f"synthetic (certa.simulation.synth, n={synthetic}, seed={seed})"
    program = program or ProgramConfig()
    sweep = SweepSpec(policies=list(policies), seed=seed, program=program, **spec)
    result = run_sweep(problems, sweep, progress)
    result["workload"]["source"] = source
    if json_out is not None:
        path = pathlib.Path(json_out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if png_dir is not None:
        result["plots"] = [str(p) for p in plot_sweep(result, png_dir)]
    return result


def fit_records(records: str | pathlib.Path, json_out: str | pathlib.Path | None = None, *,
                wall: bool = False, tile: int | None = None, cells: bool = False) -> FitReport:
    """Fit the cost model to an :class:`~certa.runtime.sim.cost_model.IterationRecord` JSONL log.

    ``wall``: fit the whole iteration period (sampling included) instead of the forward pass;
    ``tile``: also fit the cost of tokens past the batch's last whole tile (CPU engine: 4);
    ``cells``: also fit ``e``, each token's attention over the KV cells the engine held.
    """
    report = fit_cost_model(load_records(records), target="wall_seconds" if wall else "seconds", tile=tile,
                            cells=cells)
    if json_out is not None:
        pathlib.Path(json_out).write_text(json.dumps(report.as_dict(), indent=1) + "\n", encoding="utf-8")
    return report


def _floats(text: str | None, what: str) -> list[float] | None:
    if text is None:
        return None
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not vals or min(vals) <= 0:
        raise ConfigError(f"{what} must be positive numbers, got {text!r}")
    return vals


def _fail(exc: BaseException, debug: bool) -> None:
    if not isinstance(exc, CertaError):
        raise exc
    fail(exc, debug)


def print_summary(result: dict[str, Any]) -> None:
    """The max-rate table and ratios, to stdout."""
    t = Table(title=f"SIMULATED max rate at >= {result['spec']['target']:.0%} SLO attainment "
                    f"({result['spec']['deadline']} deadlines, SLO scale {result['spec']['slo_scale']})")
    for col in ("policy", "max programs/s", "early exit", f"min SLO scale at {result['slo_sweep']['rate']:.3g}/s",
                "decode tokens (M)", "accuracy"):
        t.add_column(col)
    for p, rate in result["max_rate"].items():
        first = result["rate_sweep"][p][0]  # the workload is the same at every rate
        exit_ = {"system": p == "certa", "all": True, "none": False}[result["spec"]["exit_mode"]]
        cens = result["max_rate_censored"].get(p)
        t.add_row(p, "-" if rate is None else f"{'>= ' if cens else ''}{rate:.4g}", "yes" if exit_ else "no",
                  str(result["slo_sweep"]["min_scale"].get(p)), f"{first['tokens'] / 1e6:.2f}",
                  f"{first['accuracy']:.3f}")
    out.print(t)
    cens = result["max_rate_censored"]
    for k, v in result["ratios"].items():
        base = k.split("/", 1)[1]
        bound = " (a lower bound: certa met the target at the grid's top)" if cens.get("certa") else \
            " (an upper bound: the baseline met the target at the grid's top)" if cens.get(base) else ""
        out.print(f"{k}: {v}x{bound}", soft_wrap=True)


@app.command("simulate")
def simulate(
    workload: Optional[pathlib.Path] = typer.Option(None, "--workload", "-w", help="trace JSONL file (default: synthetic traces)"),
    policies: str = typer.Option("fcfs,lpm,app-fifo,certa-nocd,certa", help="comma-separated policy names"),
    json_out: Optional[pathlib.Path] = typer.Option(None, "--json", help="write the full result here"),
    png: Optional[pathlib.Path] = typer.Option(None, help="write PNG plots into this folder (needs matplotlib)"),
    preset: str = typer.Option("h200-r1-distill-qwen-7b", help="hardware × model cost preset (estimates)"),
    kind: str = typer.Option("sc", help="program kind: sc, cot or mix"),
    n_programs: int = typer.Option(300, help="programs per run"),
    rates: Optional[str] = typer.Option(None, help="arrival rates, e.g. 0.1,0.2,0.4 (default: a grid)"),
    slo_scale: float = typer.Option(3.0, help="SLO = scale × mean standalone latency (uniform)"),
    deadline: str = typer.Option("uniform", help="uniform, or oracle (per-program, uses true lengths)"),
    exit_mode: str = typer.Option("system", help="who exits early on certaindex: system (certa only), all, none"),
    synthetic: int = typer.Option(100, help="synthetic problems when no --workload is given"),
    fanout: int = typer.Option(4, help="SC samples in flight per program"),
    budget: int = typer.Option(16, help="SC sample budget (knob cap)"),
    tau: float = typer.Option(0.55, help="SC certaindex threshold"),
    detect_at: int = typer.Option(4, help="SC detection step (finished samples)"),
    refine: int = typer.Option(4, help="bisection steps on each max rate"),
    seed: int = typer.Option(0),
    debug: bool = typer.Option(False, help="show tracebacks"),
) -> None:
    """Simulate an online workload under several policies; report max rate at 90% SLO attainment.

    Example: certa sim simulate --workload traces.jsonl --policies fcfs,lpm,app-fifo,certa --json out.json
    """
    try:
        if kind not in ("sc", "cot", "mix") or deadline not in ("uniform", "oracle") or \
                exit_mode not in ("system", "all", "none"):
            raise ConfigError(f"bad option: kind={kind!r} deadline={deadline!r} exit_mode={exit_mode!r}",
                              hint="kind: sc|cot|mix, deadline: uniform|oracle, exit-mode: system|all|none")
        prog = replace(ProgramConfig(), fanout=fanout, budget=budget, tau=tau, detect_at=detect_at)
        result = simulate_workload(workload, [p.strip() for p in policies.split(",") if p.strip()],
                                   json_out=json_out, png_dir=png, synthetic=synthetic, seed=seed, program=prog,
                                   progress=lambda m: err.print(escape(m)), preset=preset, kind=kind,
                                   n_programs=n_programs, rates=_floats(rates, "--rates"), slo_scale=slo_scale,
                                   deadline=deadline, exit_mode=exit_mode, refine=refine)
    except (CertaError, ValueError, TypeError) as exc:
        _fail(ConfigError(str(exc)) if not isinstance(exc, CertaError) else exc, debug)
        return
    print_summary(result)


@app.command("fit")
def fit(
    records: pathlib.Path = typer.Argument(..., help="iteration records (JSONL of IterationRecord)"),
    json_out: Optional[pathlib.Path] = typer.Option(None, "--json", help="write the fit here"),
    wall: bool = typer.Option(False, "--wall", help="fit the whole iteration (batch formation, decode, "
                              "sampling: wall_seconds) instead of the forward pass"),
    tile: Optional[int] = typer.Option(None, "--tile", min=1, help="also fit r, the cost of each token past "
                                       "the batch's last whole tile (the CPU llama.cpp engine: 4)"),
    cells: bool = typer.Option(False, "--cells", help="also fit e, each token's cost per KV cell the engine "
                               "held (kv_cells; the CPU llama.cpp engine's unified cache)"),
    debug: bool = typer.Option(False, help="show tracebacks"),
) -> None:
    """Fit t = a + b·N + c·K + d·P (+ e·N·W) (+ r·(N mod tile)) (non-negative least squares) to
    measured engine iterations.

    Example: certa sim fit iterations.jsonl --wall --tile 4 --cells --json fit.json
    """
    try:
        rep = fit_records(records, json_out, wall=wall, tile=tile, cells=cells)
    except CertaError as exc:
        _fail(exc, debug)
        return
    m = rep.model
    out.print(f"records {rep.n}: a={m.a * 1e3:.4g} ms  b={m.b * 1e3:.4g} ms/token  c={m.c * 1e3:.4g} ms/KV token  "
              f"d={m.d * 1e3:.4g} ms/pair" + (f"  e={m.e * 1e6:.4g} µs/token/cell" if cells else "")
              + (f"  r={m.r * 1e3:.4g} ms/token past a tile of {m.tile}" if tile else "")
              + f"  MAPE {rep.mape:.1%} (max {rep.max_rel_err:.1%})", soft_wrap=True)


__all__ = ["app", "fit", "fit_records", "plot_sweep", "print_summary", "simulate", "simulate_workload"]

"""Online serving on the SIMULATOR: SLO attainment vs arrival rate and SLO scale, per policy.

Policies ``fcfs``, ``lpm``, ``app-fifo``, ``certa-nocd``, ``certa`` serve the same Poisson
workload of trace-replay programs (self-consistency by default) on the simulated engine
(cost-model presets are ESTIMATES from public specs). Reports each policy's max arrival rate
with >= 90% of programs meeting a uniform deadline (``slo_scale`` × the workload's mean
standalone latency), the ratios certa/baseline, the smallest SLO scale each meets at the
fcfs max rate, latency, throughput and finish-time fairness. Ablations: every policy with
certaindex early exit (scheduling alone), difficulty-aware (ORACLE) deadlines, another
preset (Llama-3.1-8B on H100), and an engine capped at 64 running requests (so requests
queue before the attainment knee, where ordering can matter).

Not a timed test: the simulator is deterministic for a seed; it writes JSON and PNGs.

usage: python benchmarks/online_slo.py [--workload TRACES.jsonl] [--out out/online_slo]
       [--preset h200-r1-distill-qwen-7b] [--n-programs 300] [--quick] [--no-ablations] [--jobs N]

``--jobs N`` runs the main run and the ablations in ``N`` processes (same results: each run
is deterministic and independent).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from certa.cli_sim import plot_sweep, print_summary, simulate_workload
from certa.runtime.errors import CertaError
from certa.runtime.scheduling.policies import POLICIES
from certa.simulation.workload import ProgramConfig

ABLATIONS = {
    "scheduling-only (every policy exits on certaindex)": {"exit_mode": "all"},
    "oracle deadlines (difficulty-aware, ORACLE)": {"deadline": "oracle"},
    "preset: Llama-3.1-8B on H100 (smaller KV pool)": {"preset": "h100-llama-3.1-8b"},
    "batch-capped engine (max 64 running): queues form before the knee": {"max_running": 64},
    "batch-capped engine (max 64 running), scheduling-only": {"max_running": 64, "exit_mode": "all"},
}


def _section(job: tuple) -> dict:
    """One run of the experiment (the main run or an ablation), with its plots and wall time."""
    workload, policies, synthetic, seed, out, name, prefix, spec = job
    t0 = time.perf_counter()
    print(f"== {name}", file=sys.stderr)
    res = simulate_workload(workload, policies, synthetic=synthetic, seed=seed, program=ProgramConfig(), **spec)
    res["plots"] = [str(p) for p in plot_sweep(res, out, prefix=prefix)]
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", type=Path, help="trace JSONL (default: seeded synthetic traces)")
    ap.add_argument("--out", type=Path, default=Path("out/online_slo"), help="folder for JSON and PNGs")
    ap.add_argument("--preset", default="h200-r1-distill-qwen-7b")
    ap.add_argument("--policies", default=",".join(["fcfs", "lpm", "app-fifo", "certa-nocd", "certa"]))
    ap.add_argument("--kind", default="sc", choices=["sc", "cot", "mix"])
    ap.add_argument("--n-programs", type=int, default=300)
    ap.add_argument("--synthetic", type=int, default=100, help="synthetic problems when no --workload")
    ap.add_argument("--slo-scale", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="100 programs, 2 bisection steps (a smoke run)")
    ap.add_argument("--no-ablations", action="store_true")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the main run and ablations")
    args = ap.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policies {unknown}; choose from {sorted(POLICIES)}")
    n, refine = (100, 2) if args.quick else (args.n_programs, 4)
    base = dict(preset=args.preset, kind=args.kind, n_programs=n, slo_scale=args.slo_scale, refine=refine)

    sections = [("main: uniform deadlines, certaindex exit for certa only", "", {})]
    if not args.no_ablations:
        sections += [(name, f"ablation{i}_", over) for i, (name, over) in enumerate(ABLATIONS.items(), 1)]
    jobs = [(args.workload, policies, args.synthetic, args.seed, args.out, name, prefix, {**base, **over})
            for name, prefix, over in sections]
    report: dict = {"benchmark": "online_slo", "simulator": True,
                    "command": "python benchmarks/online_slo.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    try:
        if args.jobs > 1:
            with ProcessPoolExecutor(max_workers=args.jobs) as pool:
                results = list(pool.map(_section, jobs))
        else:
            results = [_section(job) for job in jobs]
    except CertaError as exc:  # e.g. a malformed --workload file (TraceFormatError)
        print(f"error {exc}", file=sys.stderr)
        return 2
    for res in results:
        print_summary(res)
    report["main"] = results[0]
    if not args.no_ablations:
        report["ablations"] = {name: res for (name, _, _), res in zip(sections[1:], results[1:])}
    runs = [("main", report["main"]), *report.get("ablations", {}).items()]
    report["summary"] = {k: {"max_rate": v["max_rate"], "censored": v["max_rate_censored"], "ratios": v["ratios"],
                             "ratios_by_scale": v["ratios_by_scale"], "min_slo_scale": v["slo_sweep"]["min_scale"],
                             "tighter_slo": v["slo_sweep"]["tighter"]} for k, v in runs}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "online_slo.json"
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path} and {sum(len(v['plots']) for _, v in runs)} PNGs in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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
       python benchmarks/online_slo.py --workload reasoning --out DIR [--img DIR] [--regimes 0,1,...]
       [--n-programs 100] [--jobs N] [--seeds 10] [--resume]

``--jobs N`` runs the main run and the ablations (or the regimes) in ``N`` processes (same
results: each run is deterministic and independent).

``--workload reasoning``: the regimes of :data:`certa.simulation.regimes.REGIMES` — KV-limited
presets (A10 × 7B, H100 × 32B-FP8, estimates) and today's H200, reasoning-length workloads
from the real chains in ``data/traces/reasoning`` (SC-16 expanded per problem, CoT, a
CoT/SC/tree mix) and the 1.5B dev traces, Poisson and Gamma(CV 3) arrivals. Per regime and
policy, in two exit modes (``all``: every policy exits on certaindex, the ordering alone
differs; ``system``: only certa does): the max rate at 90% attainment of a uniform SLO
(bisection), mean/P90 latency and the latency CDF at one fixed rate (fcfs's max rate with
early exit), throughput at 3× that rate (while programs arrive, and over the whole span).
Writes ``DIR/online_slo_reasoning.json`` and one PNG per regime (attainment vs rate and
latency CDF, both modes) in ``--img`` (default DIR). Then, per regime, the never-worse
comparison (certa/fcfs mean latency at the fixed rate, throughput at 3× it while programs
arrive and over the whole span, early exit for both) is repeated over ``--seeds`` draws of the
workload (default 10; :mod:`certa.simulation.seed_spread`): per-seed ratios, mean and bootstrap
95% CI over seeds, seeds outside the 1.03×/0.97× lines, in the JSON (``seed_spread``,
``seed_table``), ``DIR/regime_<i>_seeds.json`` and ``online_slo_reasoning_seeds.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from certa.cli.sim import plot_sweep, print_summary, simulate_workload
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


def _map(fn, jobs: list, processes: int) -> list:
    """``[fn(job) for job in jobs]``, in ``processes`` worker processes when more than one."""
    if processes > 1:
        with ProcessPoolExecutor(max_workers=processes) as pool:
            return list(pool.map(fn, jobs))
    return [fn(job) for job in jobs]


def _regime_job(job: tuple) -> dict:
    """One regime of ``--workload reasoning`` (run in a worker process with ``--jobs``)."""
    from certa.simulation.regimes import REGIMES, run_regime

    i, policies, n, refine, slo_scale, seed, out, resume = job
    key = {"policies": policies, "n": n, "refine": refine, "slo_scale": slo_scale, "seed": seed,
           "kv_admission": run_kv_admission()}  # a saved regime from other limits is stale
    part = out / f"regime_{i}.json"  # each regime is saved as it ends; --resume reuses it
    if resume and part.is_file():
        done = json.loads(part.read_text(encoding="utf-8"))
        if done.get("key") == key:
            return done
    t0 = time.perf_counter()
    res = run_regime(REGIMES[i], policies=policies, n_programs=n, refine=refine, slo_scale=slo_scale, seed=seed,
                     progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    res["index"], res["wall_s"], res["key"] = i, round(time.perf_counter() - t0, 1), key
    out.mkdir(parents=True, exist_ok=True)
    part.write_text(json.dumps(res) + "\n", encoding="utf-8")
    return res


def _spread_job(job: tuple) -> dict:
    """The seed spread of one regime at its fixed rate (:mod:`certa.simulation.seed_spread`), saved like a regime."""
    from certa.simulation.regimes import REGIMES
    from certa.simulation.seed_spread import seed_spread

    i, rate, seeds, n, out, resume = job
    key = {"rate": rate, "seeds": seeds, "n": n, "kv_admission": run_kv_admission()}
    part = out / f"regime_{i}_seeds.json"
    if resume and part.is_file():
        done = json.loads(part.read_text(encoding="utf-8"))
        if done.get("key") == key:
            return done
    res = seed_spread(REGIMES[i], rate=rate, seeds=seeds, n_programs=n,
                      progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    res["index"], res["key"] = i, key
    out.mkdir(parents=True, exist_ok=True)
    part.write_text(json.dumps(res) + "\n", encoding="utf-8")
    return res


def run_kv_admission() -> float:
    """The gang policies' KV budget :func:`~certa.simulation.regimes.run_regime` uses (part of every resume key)."""
    from certa.simulation.regimes import run_regime

    return run_regime.__kwdefaults__["kv_admission"]


def plot_seed_spread(spreads: list[dict], img: Path) -> Path | None:
    """Per regime, each seed's certa/fcfs ratio (dots) and the mean over seeds (bar), against the bound."""
    from certa.viz.plots import new_figure, save_figure
    from certa.simulation.seed_spread import BOUNDS

    fig = new_figure(12.0, 3.6)
    axes = fig.subplots(1, len(BOUNDS))
    labels = {"mean_latency": "mean latency at the fixed rate", "throughput": "throughput while programs arrive",
              "throughput_span": "throughput over the whole span"}
    for ax, (metric, (_, bound)) in zip(axes, BOUNDS.items()):
        for s in spreads:
            ys = [r[metric] for r in s["per_seed"] if r[metric] is not None]
            ax.plot([s["index"]] * len(ys), ys, "o", ms=3, alpha=0.5, color="tab:blue")
            if s["summary"][metric]:
                ax.plot([s["index"] - 0.3, s["index"] + 0.3], [s["summary"][metric]["mean"]] * 2, color="k", lw=2)
        ax.axhline(bound, ls="--", color="tab:red", lw=0.8)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_xticks([s["index"] for s in spreads])
        ax.set_xlabel("regime")
        ax.set_ylabel("certa / fcfs")
        ax.set_title(labels[metric], fontsize=9)
        ax.grid(alpha=0.3)
    n = len(spreads[0]["per_seed"]) if spreads else 0
    fig.suptitle(f"certa/fcfs over {n} seeds per regime, early exit for both (SIMULATED); bar: mean, dashed: bound",
                 fontsize=10)
    return save_figure(fig, img / "online_slo_reasoning_seeds.png")


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def _ratio(m: dict, rates: list[float], b: str) -> str:
    """certa's max rate over ``b``'s; "≥x" where ``b`` misses 90% even at the grid's lowest rate."""
    mr = m["max_rate"]
    if mr.get("certa") and mr.get(b):
        return _fmt(mr["certa"] / mr[b])
    if mr.get("certa") and b in mr:
        return "≥" + _fmt(mr["certa"] / rates[0])
    return "-"


def regime_table(results: list[dict]) -> str:
    """The per-regime markdown table: max rates (both modes), ratios, latency and throughput ratios.

    ``-`` for a max rate: the policy misses 90% attainment even at the grid's lowest rate
    (then certa's ratio over it is a lower bound, ``≥``); ``+``: still meets it at the top.
    """
    head = ("| # | regime | role | KV pool (programs) | early exit | max rate fcfs / lpm / app-fifo / certa-nocd / "
            "certa (programs/s) | certa/fcfs | certa/app-fifo | certa/best other | mean latency certa/fcfs | "
            "P90 certa/fcfs | throughput certa/fcfs (while arriving / whole span) |")
    rows = [head, "|" + "---|" * 12]
    for res in results:
        for mode, label in (("all", "all"), ("system", "certa only")):
            m = res["modes"][mode]
            mr, r, lat = m["max_rate"], m["ratios"], m["latency"]
            rates = " / ".join(_fmt(mr.get(p)) + ("+" if m["censored"].get(p) else "") for p in mr)
            others = [p for p in mr if p != "certa" and mr.get(p)]
            best = _fmt(mr["certa"] / max(mr[p] for p in others)) if mr.get("certa") and others else \
                ("≥" + _fmt(mr["certa"] / res["rates"][0]) if mr.get("certa") else "-")
            p90 = lat["certa"]["p90"] / lat["fcfs"]["p90"] if lat.get("fcfs") and lat["fcfs"]["p90"] else None
            rows.append(f"| {res['index']} | {res['regime']['name']} | {res['regime']['role']} | "
                        f"{res['workload']['programs_in_kv_pool']} | {label} | {rates} | "
                        f"{_ratio(m, res['rates'], 'fcfs')} | {_ratio(m, res['rates'], 'app-fifo')} | "
                        f"{best} | {_fmt(r.get('mean_latency certa/fcfs'))} | "
                        f"{_fmt(p90)} | {_fmt(r.get('throughput certa/fcfs'))} / "
                        f"{_fmt(r.get('throughput_span certa/fcfs'))} |")
    return "\n".join(rows)


def plot_regime(res: dict, img: Path) -> Path | None:
    """Attainment vs rate and the latency CDF at the fixed rate, per policy, in both exit modes."""
    from certa.viz.plots import policy_color
    from certa.viz.plots import new_figure, save_figure

    fig = new_figure(11.0, 7.0)
    axes = fig.subplots(2, 2)
    modes = (("all", "early exit for every policy"), ("system", "early exit for certa only"))
    for col, (mode, label) in enumerate(modes):
        m = res["modes"][mode]
        ax = axes[0][col]
        for p, att in m["attainment"].items():
            ax.plot(res["rates"], att, marker="o", ms=3, color=policy_color(p),
                    label=f"{p} (max {_fmt(m['max_rate'].get(p))}/s)")
        ax.axhline(res["spec"]["target"], ls="--", color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("arrival rate (programs/s)")
        ax.set_ylabel("SLO attainment")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax = axes[1][col]
        for p, pts in m["latency_cdf"].items():
            ax.step([x for x, _ in pts], [y for _, y in pts], where="post", color=policy_color(p),
                    label=f"{p} (mean {m['latency'][p]['mean']:.0f} s)")
        ax.axvline(res["workload"]["uniform_slo_s"], ls="--", color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(f"program latency (s) at {res['fixed_rate']:.3g} programs/s; dashed: SLO")
        ax.set_ylabel("fraction of programs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{res['regime']['name']} — SIMULATED ({res['preset']['source']} preset)", fontsize=10)
    return save_figure(fig, img / f"online_slo_reasoning_{res['index']}.png")


def reasoning_main(args: argparse.Namespace, policies: list[str], argv: list[str] | None) -> int:
    """``--workload reasoning``: every regime, its JSON, table and plots."""
    from certa.simulation.regimes import REGIMES

    picks = list(range(len(REGIMES))) if args.regimes == "all" else [int(x) for x in args.regimes.split(",") if x]
    if any(not 0 <= i < len(REGIMES) for i in picks):
        print(f"error --regimes: choose among 0..{len(REGIMES) - 1}", file=sys.stderr)
        return 2
    n = args.n_programs or (60 if args.quick else 100)
    refine = 2 if args.quick else 3
    jobs = [(i, policies, n, refine, args.slo_scale, args.seed, args.out, args.resume) for i in picks]
    results = _map(_regime_job, jobs, args.jobs)
    img = args.img or args.out
    for res in results:
        res["plot"] = str(plot_regime(res, img))
    table = regime_table(results)
    print(table)
    report = {"benchmark": "online_slo --workload reasoning", "simulator": True,
              "command": "python benchmarks/online_slo.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "table": table, "regimes": results}
    seeds = 2 if args.quick and args.seeds is None else (10 if args.seeds is None else args.seeds)
    if seeds > 0:  # the never-worse ratios over seeds, at each regime's fixed rate
        from certa.simulation.seed_spread import spread_table

        spread_jobs = [(res["index"], res["fixed_rate"], list(range(seeds)), n, args.out, args.resume)
                       for res in results]
        spreads = _map(_spread_job, spread_jobs, args.jobs)
        report["seed_table"] = spread_table([(s["index"], s) for s in spreads])
        report["seed_spread"], report["seed_plot"] = spreads, str(plot_seed_spread(spreads, img))
        print(report["seed_table"])
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "online_slo_reasoning.json"
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path} and {len(results)} PNGs in {img}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", type=Path, help="trace JSONL (default: seeded synthetic traces), or 'reasoning' "
                                                 "for the regimes of certa.simulation.regimes")
    ap.add_argument("--out", type=Path, default=Path("out/online_slo"), help="folder for JSON and PNGs")
    ap.add_argument("--preset", default="h200-r1-distill-qwen-7b")
    ap.add_argument("--policies", default=",".join(["fcfs", "lpm", "app-fifo", "certa-nocd", "certa"]))
    ap.add_argument("--kind", default="sc", choices=["sc", "cot", "mix"])
    ap.add_argument("--n-programs", type=int, default=None, help="programs per run (default 300; reasoning: 100)")
    ap.add_argument("--synthetic", type=int, default=100, help="synthetic problems when no --workload")
    ap.add_argument("--slo-scale", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="100 programs, 2 bisection steps (a smoke run)")
    ap.add_argument("--no-ablations", action="store_true")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the main run and ablations")
    ap.add_argument("--regimes", default="all", help="--workload reasoning: comma-separated regime indices")
    ap.add_argument("--img", type=Path, default=None, help="--workload reasoning: folder for the PNGs (default --out)")
    ap.add_argument("--resume", action="store_true", help="--workload reasoning: reuse regimes already in --out")
    ap.add_argument("--seeds", type=int, default=None,
                    help="--workload reasoning: repeat the certa/fcfs never-worse comparison over this many seeds "
                         "per regime (default 10, --quick 2; 0: skip)")
    args = ap.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policies {unknown}; choose from {sorted(POLICIES)}")
    if args.workload == Path("reasoning"):
        return reasoning_main(args, policies, argv)
    n, refine = (100, 2) if args.quick else (args.n_programs or 300, 4)
    base = dict(preset=args.preset, kind=args.kind, n_programs=n, slo_scale=args.slo_scale, refine=refine)

    sections = [("main: uniform deadlines, certaindex exit for certa only", "", {})]
    if not args.no_ablations:
        sections += [(name, f"ablation{i}_", over) for i, (name, over) in enumerate(ABLATIONS.items(), 1)]
    jobs = [(args.workload, policies, args.synthetic, args.seed, args.out, name, prefix, {**base, **over})
            for name, prefix, over in sections]
    report: dict = {"benchmark": "online_slo", "simulator": True,
                    "command": "python benchmarks/online_slo.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    try:
        results = _map(_section, jobs, args.jobs)
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

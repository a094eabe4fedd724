"""Why certa's ordering lost to app-FIFO, and what paced aging changes (SIMULATOR).

One report regime of ``benchmarks/online_slo.py --workload reasoning`` (default 3: "H100
32B-FP8, SC-16 over R1-Distill-Qwen-32B MATH-500 chains", every policy exiting on certaindex,
so the ordering alone differs) is run at fixed arrival rates under app-FIFO, certa with
``aging_pace=0`` (the ordering before the fix: SJF + a 50 tokens/s age credit) and certa as
shipped (paced aging, ``aging_pace=0.25``). Programs are split into terciles by the work they do (decode
tokens with early exit, the same under every policy up to sampling), and per tercile the
report gives mean latency, mean delay over the program's standalone latency, and deadline
misses at the regime's uniform SLO; plus the attainment at each rate. What it shows (see
docs/scheduling.md): without pacing, SJF keeps passing the longest programs with newer short
ones near the knee, so the misses concentrate in the top tercile and attainment falls below
90% at a rate app-FIFO still meets.

    python benchmarks/ordering_diagnosis.py --json docs/results/ordering_diagnosis.json [--regime 3] [--rates 0.233,0.252,0.28]

Writes ``{"regime", "slo_s", "rates": {rate: {variant: {"attainment", "terciles": [...]}}}}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from certa.runtime.scheduling.policies import make_policy
from certa.simulation.reasoning_workload import load_reasoning
from certa.simulation.regimes import REGIME_PROGRAM, REGIMES, default_profile, regime_workload
from certa.simulation.simulator import default_limits, simulate
from certa.simulation.sweep import Experiment, SweepSpec

VARIANTS = {"app-fifo": ("app-fifo", {}), "certa, aging_pace 0 (before)": ("certa", {"aging_pace": 0.0}),
            "certa (shipped, aging_pace 0.25)": ("certa", {})}


def experiment(index: int, n_programs: int, seed: int) -> tuple[Experiment, float]:
    """The regime's ``all``-mode experiment (as run_regime builds it) and its uniform SLO in seconds."""
    reg = REGIMES[index]
    problems = load_reasoning(reg.files())
    workload = regime_workload(reg, problems, n_programs=n_programs, seed=seed, k=16, profile=default_profile(),
                               max_tokens=REGIME_PROGRAM.max_tokens)
    spec = SweepSpec(preset=reg.preset, policies=["app-fifo", "certa"], n_programs=n_programs, slo_scale=3.0,
                     refine=3, exit_mode="all", seed=seed, program=REGIME_PROGRAM, rate_scales=[], kv_admission=2.0)
    exp = Experiment(problems, spec, workload)
    alone = sorted(exp.alone.values())
    p90 = alone[max(0, round(0.9 * len(alone)) - 1)] / exp.slo_ref
    return exp, max(3.0, 1.2 * p90) * exp.slo_ref  # run_regime's uniform SLO rule


def run_variant(exp: Experiment, name: str, options: dict, rate: float):
    d = default_limits(exp.engine)  # the gang policies' limits, as Experiment.run sets them
    lim = replace(d, max_requests=max(1, int(d.max_requests * exp.spec.admission)),
                  kv_tokens=int(d.kv_tokens * exp.spec.admission * exp.spec.kv_admission))
    return simulate(exp.workload(rate), make_policy(name, **options), exp.engine, exp.preset.cost, limits=lim,
                    config=exp.spec.program, early_exit=True)


def terciles(exp: Experiment, records: list, slo: float, cuts: tuple[float, float]) -> list[dict]:
    out = []
    for lo, hi, label in ((-1, cuts[0], "shortest third"), (cuts[0], cuts[1], "middle third"),
                          (cuts[1], float("inf"), "longest third")):
        rows = [r for r in records if lo < r.tokens <= hi]
        out.append({"tercile": label, "programs": len(rows),
                    "mean_tokens": round(statistics.fmean(r.tokens for r in rows)),
                    "mean_latency_s": round(statistics.fmean(r.latency for r in rows), 1),
                    "mean_delay_s": round(statistics.fmean(r.latency - exp.alone[r.pid] for r in rows), 1),
                    "missed": sum(r.latency > slo for r in rows)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--regime", type=int, default=3)
    ap.add_argument("--rates", default="0.233,0.252,0.28", help="programs/s (the regime's max rates were "
                    "certa 0.233 and app-fifo 0.252 before the fix)")
    ap.add_argument("--n-programs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    exp, slo = experiment(args.regime, args.n_programs, args.seed)
    report: dict = {"benchmark": "ordering_diagnosis", "simulator": True, "regime": REGIMES[args.regime].name,
                    "exit_mode": "all", "slo_s": round(slo, 1), "rates": {}}
    for rate in (float(x) for x in args.rates.split(",")):
        runs = {label: run_variant(exp, name, opts, rate) for label, (name, opts) in VARIANTS.items()}
        work = sorted(r.tokens for r in runs["app-fifo"].records)
        cuts = (work[len(work) // 3], work[2 * len(work) // 3])
        report["rates"][str(rate)] = {label: {
            "attainment": round(sum(r.latency <= slo for r in res.records) / len(res.records), 3),
            "mean_latency_s": round(statistics.fmean(r.latency for r in res.records), 1),
            "terciles": terciles(exp, res.records, slo, cuts)} for label, res in runs.items()}
        for label, row in report["rates"][str(rate)].items():
            misses = " / ".join(str(t["missed"]) for t in row["terciles"])
            delays = " / ".join(str(t["mean_delay_s"]) for t in row["terciles"])
            print(f"rate {rate}: {label:<34} attainment {row['attainment']:.2f}, misses by tercile "
                  f"(short/mid/long) {misses}, mean delay {delays} s", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

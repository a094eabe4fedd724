"""Fit the simulator's cost model to certa's CPU llama.cpp engine, then validate the simulator.

Each repeat loads the engine afresh and runs:

1. Calibration: batches of 1..n_seq sampled answers, a few long prompts, and decode batches
   beside idle cached KV; the engine logs one ``IterationRecord`` per iteration;
   ``fit_cost_model`` fits ``t = a + b·N + c·K + d·P`` by non-negative least squares, to the
   forward pass alone (``seconds``) or to the whole iteration period, batch formation and
   sampling included (``wall_seconds``), with the tile term ``r`` and with ``e·N·W``, the
   attention over every cell the unified KV cache holds (the fit this benchmark validates).
2. Validation: an online workload on the real engine — ``--programs`` programs, a mix of SC
   (``--sc-samples`` samples, ``--fanout`` in flight, each finished sample replaced) and
   single-chain CoT, 256-1024 tokens per chain, no early exit, arriving as a Poisson
   process whose rate steps through ``--rates`` (the last one queues). The SAME programs
   (measured arrival times, prompt lengths and per-chain lengths) are replayed in the
   simulator under each fit; per-program latency errors are reported, and the online
   iterations' residuals by batch shape (``sim_validate_residuals.png``).

The summary gives each repeat's median program-latency error and their median and spread.
Timings need a quiet machine: the load average before and after each repeat is recorded
and a warning printed when it exceeds the core count.

usage: python benchmarks/sim_validate_cpu.py --out DIR [--programs 40] [--repeats 3]
       [--rates 0.05,0.1,0.4] [--model qwen2.5-coder-0.5b] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_validate_report import plot_residuals, residuals_by_context, residuals_by_shape, summarize  # noqa: E402

from certa.eval.traces import Sample, TraceProblem  # noqa: E402
from certa.runtime import Knob, Program, Runtime  # noqa: E402
from certa.runtime.backends.llamacpp.backend import LlamaCppBackend  # noqa: E402
from certa.runtime.sim.cost_model import load_records, save_records  # noqa: E402
from certa.runtime.sim.engine import EngineConfig  # noqa: E402
from certa.runtime.sim.fit import fit_cost_model, iteration_errors, validate  # noqa: E402
from certa.runtime.types import GenRequest  # noqa: E402
from certa.simulation.simulator import simulate  # noqa: E402
from certa.simulation.workload import ProgramConfig, ProgramSpec  # noqa: E402

SYSTEM = ("You are a careful teacher. Solve the problem in full detail: restate it, reason step by step, "
          "check every step twice, and put your final answer within \\boxed{}.")
QUESTIONS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. Her "
    "parents decided to give her $15 for that purpose, and her grandparents twice as much as her parents. "
    "How much more money does Betty need to buy the wallet?",
    "James writes a 3-page letter to 2 different friends twice a week. How many pages does he write a year?",
    "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?",
    "Albert buys 2 large pizzas and 2 small pizzas. A large pizza has 16 slices and a small pizza has 8 slices. "
    "If he eats it all, how many pieces does he eat that day?",
]
LONG = " Then solve it again in two other ways, each in full detail, and compare the three answers."
SAMPLING = {"temperature": 0.8, "top_p": 0.95, "top_k": 40}


class Chains(Program):
    """``len(max_tokens)`` sampled chains, ``fanout`` in flight (SC without early exit; CoT = 1)."""

    def __init__(self, question: str, max_tokens: list[int], fanout: int, seed: int) -> None:
        super().__init__()
        self.knob = Knob("branches", cap=len(max_tokens))
        self.question, self.caps, self.fanout, self.seed = question, max_tokens, fanout, seed
        self.state = {"samples": [0] * len(max_tokens), "prompt_tokens": 0}  # by launch order, as replayed

    async def execute(self, ctx) -> bool:
        sem = asyncio.Semaphore(self.fanout)

        async def one(i: int) -> None:
            async with sem:
                out = await ctx.child("sample", i).gen(self.question, chat=True,
                                                       max_tokens=self.caps[i], seed=self.seed + i, **SAMPLING)
                self.state["samples"][i] = out.tokens
                self.state["prompt_tokens"] = out.prompt_tokens
                self.knob_used += 1

        await asyncio.gather(*(one(i) for i in range(len(self.caps))))
        return False


def workload(args, rng: random.Random) -> list[dict]:
    """Program kinds, chain caps and arrival times: rates step through ``args.rates``."""
    rates = [float(r) for r in args.rates.split(",")]
    out, t = [], 0.0
    for i in range(args.programs):
        t += rng.expovariate(rates[min(len(rates) - 1, i * len(rates) // args.programs)])
        sc = rng.random() < args.sc_share
        caps = ([rng.randint(256, 512) for _ in range(args.sc_samples)] if sc else [rng.randint(512, 1024)])
        # CoT chains run longer; the program's id leads its prompt, so no two programs share a
        # prompt prefix past the chat template (the simulator models prefix sharing within a
        # program only: repeated questions would be cached across programs on the real engine)
        q = f"[task {i}] {SYSTEM}\n\n{QUESTIONS[i % len(QUESTIONS)]}" + ("" if sc else LONG)
        out.append({"pid": f"{'sc' if sc else 'cot'}{i}", "at": t, "caps": caps, "q": q})
    return out


async def decode_batch(b: LlamaCppBackend, batch: int, max_tokens: int, tag: str) -> None:
    """``batch`` short chat questions decoded together."""
    reqs = [GenRequest(prompt=QUESTIONS[i % len(QUESTIONS)], chat=True, max_tokens=max_tokens,
                       seed=i, rid=f"{tag}{batch}-{i}-{time.monotonic_ns()}", **SAMPLING) for i in range(batch)]
    await asyncio.gather(*(b.generate(r) for r in reqs))


async def calibrate(b: LlamaCppBackend, n_seq: int, max_tokens: int) -> None:
    """Every decode batch size 1..n_seq (short and long contexts), a few long prefills, and
    decode batches beside idle cached KV."""
    for batch in range(1, n_seq + 1):
        await decode_batch(b, batch, max_tokens, "cal")
    for batch in (2, 5, 8, 12):  # long contexts: KV reads
        reqs = [GenRequest(prompt=" ".join(QUESTIONS) * 3 + f" ({i})", chat=True, max_tokens=max_tokens // 2,
                           seed=i, rid=f"calk{batch}-{i}-{time.monotonic_ns()}", **SAMPLING) for i in range(batch)]
        await asyncio.gather(*(b.generate(r) for r in reqs))
    for reps in (2, 6, 12):  # long prompts: prefill pairs
        await b.generate(GenRequest(prompt=" ".join(QUESTIONS) * reps, chat=True, max_tokens=4,
                                    rid=f"calp{reps}-{time.monotonic_ns()}"))
    # idle cached KV: with llama.cpp's unified cache every token attends over all occupied
    # cells, so decode batches are repeated beside 1 and then 3 cached long prompts (raw text,
    # so no chat prompt shares their prefix and takes their slot; within the engine's cache limit)
    for n_cached in (1, 3):
        b.engine.clear_cache()
        for j in range(n_cached):
            text = " ".join(QUESTIONS[j:] + QUESTIONS[:j]) * 3  # each starts with another word: no shared prefix
            await b.generate(GenRequest(prompt=text, max_tokens=1,
                                        rid=f"calc{n_cached}-{j}-{time.monotonic_ns()}"))
        for batch in (2, 6, 10):
            await decode_batch(b, batch, max_tokens, f"calw{n_cached}-")


async def online(b: LlamaCppBackend, plan: list[dict], fanout: int) -> list[dict]:
    rt = Runtime(b)
    t0 = time.perf_counter()
    rows: list[dict] = []

    async def one(i: int, p: dict) -> None:
        await asyncio.sleep(max(0.0, p["at"] - (time.perf_counter() - t0)))
        start = time.perf_counter() - t0
        prog = Chains(p["q"], p["caps"], fanout, seed=1000 * i)
        res = await rt.run(prog, return_errors=True)
        if not res.ok:
            raise RuntimeError(f"program {p['pid']} failed: {res.error}")
        rows.append({"pid": p["pid"], "arrival": start, "finish": time.perf_counter() - t0,
                     "prompt_tokens": prog.state["prompt_tokens"], "samples": list(prog.state["samples"]),
                     "ok": res.ok})
        print(f"  {p['pid']}: {rows[-1]['finish'] - start:.1f} s, {sum(rows[-1]['samples'])} tokens "
              f"({len(rows)}/{len(plan)})", file=sys.stderr, flush=True)

    await asyncio.gather(*(one(i, p) for i, p in enumerate(plan)))
    return sorted(rows, key=lambda r: r["arrival"])


def replay(rows: list[dict], model, args) -> dict[str, float]:
    """Simulated latency per program: the measured programs on the fitted cost model."""
    specs = [ProgramSpec(r["pid"], r["arrival"], TraceProblem(idx=r["pid"], samples=[
        Sample(tokens=max(1, n), pred=None) for n in r["samples"]]), "sc", r["prompt_tokens"]) for r in rows]
    eng = EngineConfig(kv_capacity=args.n_ctx, max_running=args.n_seq, chunk_tokens=args.max_batch_tokens,
                       reserve_ratio=0.0, mixed=True, cache_tokens=args.n_ctx // 4)  # the engine's default cache limit
    cfg = ProgramConfig(fanout=args.fanout, budget=max(args.sc_samples, 1), max_tokens=1024)
    sim = simulate(specs, "fcfs", eng, model, config=cfg, early_exit=False)
    return {r.pid: r.latency for r in sim.records}


FITS = {  # name: (time fitted, tile, fit e·N·W, fitted to); "cells" is the model this benchmark validates
    "cells": ("wall_seconds", 4, True, "calibration"),
    "tiled": ("wall_seconds", 4, False, "calibration"),
    "linear": ("wall_seconds", None, False, "calibration"),
    "linear-forward-pass": ("seconds", None, False, "calibration"),  # the model before the sampling and tile terms
    # leave-one-run-out: fitted to the OTHER repeats' online iterations (their shapes, contexts
    # and cache occupancy), scored on this repeat's programs
    "cells-other-runs": ("wall_seconds", 4, True, "other runs"),
    "tiled-other-runs": ("wall_seconds", 4, False, "other runs"),
}


def measure(args, rep: int) -> dict:
    """One repeat on the real engine: calibration and online iterations, measured programs."""
    plan = workload(args, random.Random(args.seed + rep))

    async def run() -> tuple[list, list, list[dict]]:
        async with LlamaCppBackend(args.model, n_seq=args.n_seq, n_ctx=args.n_ctx, n_threads=args.threads,
                                   seed=args.seed + rep, max_batch_tokens=args.max_batch_tokens) as b:
            await b.generate(GenRequest(prompt="warm up", max_tokens=16, rid="warm"))
            b.engine.reset_stats()
            await calibrate(b, args.n_seq, args.cal_tokens)
            cal = list(b.engine.iterations)
            b.engine.reset_stats()
            if not args.warm_cache:
                b.engine.clear_cache()  # the online run starts with an empty cache, as the simulator does
            rows = await online(b, plan, args.fanout)
            stats.update(b.engine.stats())  # prompt_tokens evaluated vs cached_prompt_tokens, etc.
            return cal, list(b.engine.iterations), rows

    stats: dict = {}

    load_before = os.getloadavg()[0]
    cal, live, rows = asyncio.run(run())
    d = args.out / f"run{rep}"
    save_records(cal, records_path(args, rep, "calibration"))
    save_records(live, records_path(args, rep, "online"))
    (d / "programs.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    (d / "engine_stats.json").write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    return {"repeat": rep, "load_average": {"before": load_before, "after": os.getloadavg()[0],
                                            "cores": os.cpu_count()}, "programs": rows, "engine_stats": stats}


def records_path(args, rep: int, which: str) -> Path:
    """Where a repeat's iteration log lives: under ``--records`` (gzip JSONL; the committed logs are
    in data/iterations/, not among the docs' results), else beside its results under ``--out``."""
    if args.records is not None:
        return args.records / f"run{rep}" / f"{which}_iterations.jsonl.gz"
    return args.out / f"run{rep}" / f"{which}_iterations.jsonl"


def saved_repeat(d: Path, rep: int) -> dict:
    """A measured repeat read back: its programs (programs.json, else run.json) and load."""
    run = json.loads((d / "run.json").read_text(encoding="utf-8")) if (d / "run.json").is_file() else {}
    if not (d / "programs.json").is_file():
        (d / "programs.json").write_text(json.dumps(run["programs"], indent=1) + "\n", encoding="utf-8")
    return {"repeat": rep, "load_average": run.get("load_average"),
            "programs": json.loads((d / "programs.json").read_text(encoding="utf-8"))}


def score(args, rep: dict, others: list) -> dict:
    """Fit each cost model (to the repeat's calibration, or to the other repeats' online
    iterations ``others``), replay the repeat's programs, compare latencies."""
    cal = load_records(records_path(args, rep["repeat"], "calibration"))
    live = load_records(records_path(args, rep["repeat"], "online"))
    rows = rep["programs"]
    measured_lat = {r["pid"]: r["finish"] - r["arrival"] for r in rows}
    fits, residuals = {}, {}
    for name, (target, tile, cells, source) in FITS.items():
        recs = cal if source == "calibration" else others
        if not recs or (cells and not any(r.kv_cells for r in recs)):  # no other runs / logged before kv_cells
            continue
        fit = fit_cost_model(recs, target=target, tile=tile, cells=cells)
        sim = replay(rows, fit.model, args)
        errs = iteration_errors(fit.model, live, "wall_seconds")
        fits[name] = {"fitted_to": source, "fit": fit.as_dict(),
                      "fit_ms": {k: getattr(fit.model, k) * 1e3 for k in "abcder"},
                      "online_iteration_mape": statistics.fmean(errs) if errs else None,
                      "validation": validate(sim, measured_lat).as_dict(),
                      "programs": {pid: {"measured": m, "simulated": sim.get(pid)} for pid, m in measured_lat.items()}}
        residuals[name] = residuals_by_shape(fit.model, live)
        fits[name]["residuals_by_context"] = residuals_by_context(fit.model, live)
    span = (live[-1].started + live[-1].wall_seconds - live[0].started) if live else 0.0
    return {**rep, "fits": fits, "residuals": residuals,
            "online": {"iterations": len(live), "busy_s": sum(r.wall_seconds for r in live), "span_s": span,
                       "forward_s": sum(r.seconds for r in live), "tokens": sum(sum(r["samples"]) for r in rows)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("out/sim_cpu"))
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--programs", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rates", default="0.05,0.1,0.4", help="programs/s, stepped through in equal parts")
    ap.add_argument("--sc-share", type=float, default=0.5)
    ap.add_argument("--sc-samples", type=int, default=2)
    ap.add_argument("--fanout", type=int, default=2)
    ap.add_argument("--cal-tokens", type=int, default=32)
    ap.add_argument("--n-seq", type=int, default=16)
    ap.add_argument("--n-ctx", type=int, default=16384)
    ap.add_argument("--max-batch-tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm-cache", action="store_true",
                    help="leave calibration's cached KV in the engine for the online run (an ablation: the "
                         "benchmark did so before 2026-12-03; the simulator starts empty)")
    ap.add_argument("--rescore", action="store_true",
                    help="refit and replay the runs already measured under --out (no model is run)")
    ap.add_argument("--records", type=Path, default=None,
                    help="keep the iteration logs here (gzip JSONL, run<i>/...) instead of under --out; the "
                         "committed ones: data/iterations/sim-cpu-2026-12-03")
    ap.add_argument("--quick", action="store_true", help="4 programs, 1 repeat, fast rates (a smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.programs, args.repeats, args.rates = 4, 1, "0.5,2"
    args.out.mkdir(parents=True, exist_ok=True)
    measured = []
    for rep in range(args.repeats):
        if args.rescore:  # refit and replay what an earlier invocation measured
            measured.append(saved_repeat(args.out / f"run{rep}", rep))
            continue
        print(f"repeat {rep + 1}/{args.repeats}", file=sys.stderr, flush=True)
        measured.append(measure(args, rep))
        load = measured[-1]["load_average"]
        if max(load["before"], load["after"]) > (os.cpu_count() or 1):
            print("WARNING: load average above the core count: timings are contended, rerun on a quiet "
                  "machine", file=sys.stderr)
    online = {m["repeat"]: load_records(records_path(args, m["repeat"], "online")) for m in measured}
    runs = []
    for m in measured:
        others = [r for rep, recs in online.items() if rep != m["repeat"] for r in recs]
        runs.append(score(args, m, others))
        (args.out / f"run{m['repeat']}" / "run.json").write_text(json.dumps(runs[-1], indent=1) + "\n",
                                                                 encoding="utf-8")
        print(f"repeat {m['repeat'] + 1}: median program-latency error "
              + ", ".join(f"{f['validation']['median_rel_err']:.1%} ({name})" for name, f in runs[-1]["fits"].items()),
              flush=True)
    report = {"benchmark": "sim_validate_cpu", "machine": platform.processor() or platform.machine(),
              "command": "python benchmarks/sim_validate_cpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "args": {k: str(v) for k, v in vars(args).items() if k not in ("out", "records")},
              "summary": summarize(runs), "runs": runs}
    (args.out / "sim_validate_cpu.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    plot_residuals(runs, args.out / "sim_validate_residuals.png")
    for name, s in report["summary"].items():
        print(f"{name} fit: per-run median errors {', '.join(f'{e:.1%}' for e in s['per_run_median'])}; "
              f"median {s['median']:.1%}, spread {s['min']:.1%}-{s['max']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

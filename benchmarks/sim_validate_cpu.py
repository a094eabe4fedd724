"""Fit the simulator's cost model to certa's CPU llama.cpp engine, then validate the simulator.

1. Calibration: batches of 1..n_seq sampled answers and a few long prompts on the real
   engine; it logs one ``IterationRecord`` per iteration; ``fit_cost_model`` fits
   ``t = a + b·N + c·K + d·P`` by non-negative least squares (iteration MAPE reported).
2. Validation: an online workload on the real engine — SC programs (``fanout`` samples in
   flight, each finished sample replaced, ``budget`` samples, no early exit) arriving as a
   Poisson process. The SAME programs (measured arrival times, prompt lengths and per-sample
   lengths) are replayed in the simulator with the fitted model and an engine configured
   like the real one; ``validate`` compares per-program latencies (median relative error).
   The iteration records of this run are also scored against the calibration fit.

Timings need a quiet machine: the load average before and after is recorded, and a warning
printed when it exceeds the core count (on a shared 2-core box at load 7.7 per-token times
varied 2-5x between identical batches, and neither the fit nor the validation meant anything).

usage: python benchmarks/sim_validate_cpu.py --out out/sim_cpu [--model qwen2.5-coder-0.5b]
       [--programs 6] [--rate 0.1] [--budget 4] [--fanout 2] [--max-tokens 64] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

from certa.runtime import Knob, Program, Runtime
from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
from certa.runtime.sim.cost_model import save_records
from certa.runtime.sim.engine import EngineConfig
from certa.runtime.sim.fit import fit_cost_model, iteration_errors, validate
from certa.simulation.simulator import simulate
from certa.eval.traces import Sample, TraceProblem
from certa.simulation.workload import ProgramConfig, ProgramSpec
from certa.runtime.types import GenRequest

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
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
SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 40}


class SC(Program):
    """Self-consistency with ``fanout`` samples in flight (the simulator's SC replay, no early exit)."""

    def __init__(self, question: str, budget: int, fanout: int, max_tokens: int) -> None:
        super().__init__()
        self.knob = Knob("branches", cap=budget)
        self.question, self.fanout, self.max_tokens = question, fanout, max_tokens
        self.state = {"samples": [], "prompt_tokens": 0}

    async def execute(self, ctx) -> bool:
        sem = asyncio.Semaphore(self.fanout)

        async def one(i: int) -> None:
            async with sem:
                out = await ctx.child("sample", i).gen(self.question, chat=True, max_tokens=self.max_tokens,
                                                       seed=i, **SAMPLING)
                self.state["samples"].append(out.tokens)
                self.state["prompt_tokens"] = out.prompt_tokens
                self.knob_used += 1

        await asyncio.gather(*(one(i) for i in range(self.knob.cap or 0)))
        return False


async def calibrate(b: LlamaCppBackend, n_seq: int, max_tokens: int) -> None:
    q = QUESTIONS[0]
    for batch in (1, 2, 4, 8, n_seq):
        reqs = [GenRequest(prompt=q, system=SYSTEM, chat=True, max_tokens=max_tokens, seed=i,
                           rid=f"cal{batch}-{i}-{time.monotonic_ns()}", **SAMPLING) for i in range(batch)]
        await asyncio.gather(*(b.generate(r) for r in reqs))
    for reps in (4, 12, 24):  # long prompts: prefill pairs
        await b.generate(GenRequest(prompt=" ".join(QUESTIONS) * reps, chat=True, max_tokens=4,
                                    rid=f"calp{reps}-{time.monotonic_ns()}"))


async def online(b: LlamaCppBackend, args) -> list[dict]:
    rt = Runtime(b)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    arrivals, t = [], 0.0
    for _ in range(args.programs):
        t += rng.expovariate(args.rate)
        arrivals.append(t)
    rows: list[dict] = []

    async def one(i: int, at: float) -> None:
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
        start = time.perf_counter() - t0
        prog = SC(QUESTIONS[i % len(QUESTIONS)], args.budget, args.fanout, args.max_tokens)
        res = await rt.run(prog, return_errors=True)
        rows.append({"pid": f"p{i}", "arrival": start, "finish": time.perf_counter() - t0,
                     "prompt_tokens": prog.state["prompt_tokens"], "samples": list(prog.state["samples"]),
                     "ok": res.ok})

    await asyncio.gather(*(one(i, at) for i, at in enumerate(arrivals)))
    return sorted(rows, key=lambda r: r["arrival"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("out/sim_cpu"))
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--programs", type=int, default=6)
    ap.add_argument("--rate", type=float, default=0.1)
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--fanout", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--n-seq", type=int, default=16)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    async def run() -> tuple[list, list, list[dict]]:
        async with LlamaCppBackend(args.model, n_seq=args.n_seq, n_ctx=args.n_ctx, n_threads=args.threads,
                                   seed=args.seed) as b:
            await b.generate(GenRequest(prompt="warm up", max_tokens=4, rid="warm"))
            b.engine.reset_stats()
            await calibrate(b, args.n_seq, args.max_tokens)
            cal = list(b.engine.iterations)
            b.engine.reset_stats()
            rows = await online(b, args)
            return cal, list(b.engine.iterations), rows

    load_before = os.getloadavg()[0]
    cal, live, rows = asyncio.run(run())
    load = {"before": load_before, "after": os.getloadavg()[0], "cores": os.cpu_count()}
    save_records(cal, args.out / "calibration_iterations.jsonl")
    save_records(live, args.out / "online_iterations.jsonl")
    fit = fit_cost_model(cal)
    live_err = sorted(iteration_errors(fit.model, live))
    specs = [ProgramSpec(r["pid"], r["arrival"], TraceProblem(idx=r["pid"], samples=[
        Sample(tokens=max(1, n), pred=None) for n in r["samples"]]), "sc", r["prompt_tokens"]) for r in rows]
    eng = EngineConfig(kv_capacity=args.n_ctx, max_running=args.n_seq, chunk_tokens=512, reserve_ratio=0.0,
                       mixed=True)
    cfg = ProgramConfig(fanout=args.fanout, budget=args.budget, max_tokens=args.max_tokens)
    sim = simulate(specs, "fcfs", eng, fit.model, config=cfg, early_exit=False)
    rep = validate({r.pid: r.latency for r in sim.records}, {r["pid"]: r["finish"] - r["arrival"] for r in rows})
    report = {
        "benchmark": "sim_validate_cpu", "machine": platform.processor() or platform.machine(),
        "command": "python benchmarks/sim_validate_cpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": {k: str(v) for k, v in vars(args).items()}, "load_average": load,
        "fit": fit.as_dict(),
        "fit_ms": {k: getattr(fit.model, k) * 1e3 for k in "abcd"},
        "online_iterations": {"n": len(live), "mape_under_calibration_fit": sum(live_err) / max(1, len(live_err)),
                              "median_rel_err": live_err[len(live_err) // 2] if live_err else None},
        "validation": rep.as_dict(),
        "programs": [{**r, "simulated_latency": next(s.latency for s in sim.records if s.pid == r["pid"])}
                     for r in rows],
    }
    (args.out / "sim_validate_cpu.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if max(load["before"], load["after"]) > (load["cores"] or 1):
        print(f"WARNING: load average {max(load['before'], load['after']):.1f} > {load['cores']} cores: "
              f"timings are contended, rerun on a quiet machine", file=sys.stderr)
    print(f"fit on {fit.n} calibration iterations: a={fit.model.a * 1e3:.3g} ms b={fit.model.b * 1e3:.3g} ms/token "
          f"c={fit.model.c * 1e3:.3g} ms/KV token d={fit.model.d * 1e3:.3g} ms/pair, MAPE {fit.mape:.1%}")
    print(f"online run: {len(live)} iterations, MAPE under the calibration fit "
          f"{report['online_iterations']['mape_under_calibration_fit']:.1%}")
    print(f"program latency, simulated vs measured ({rep.n} programs): median relative error "
          f"{rep.median_rel_err:.1%} (mean {rep.mean_rel_err:.1%}, p90 {rep.p90_rel_err:.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

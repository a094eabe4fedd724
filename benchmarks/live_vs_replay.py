"""Live check: an SC policy run live on the CPU engine saves what its trace replay predicts.

On a handful of dev problems:

1. collect full-budget traces (``samples`` per problem, no probes) with the llama.cpp engine
   — the live full-budget reference: ``sc_program`` samples with the same prompt,
   temperature and per-branch seeds (texts can still differ: batched llama.cpp decoding is
   not bit-reproducible across batch shapes, so per-problem tokens differ somewhat);
2. replay the policy on those traces, in the order a live run finishes its samples
   (``lanes`` branches in flight, decoding in lockstep: shortest first within the lanes)
   and, for reference, in seeded random orders;
3. run ``sc_program(branches_per_round=lanes)`` with the policy live and count its tokens
   (program-counted: finished samples; engine-counted: every sampled main token, including
   samples the early exit aborted mid-way).

    python benchmarks/live_vs_replay.py --idx 0:4 --samples 8 --max-tokens 256 \
        [--policy policy.json] [--model qwen2.5-coder-0.5b] [--threads 1] --out results/live.json

Prints and writes the token ratio vs the full budget for each. The live runs are journaled
(``<out>.live.jsonl``, one line per problem): a killed run resumes where it stopped. Not a
timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import time
from pathlib import Path

import numpy as np

from certa.eval.collect import CollectConfig, collect_traces
from certa.eval.datasets import load_dataset
from certa.algorithms.answers.equivalence import grade
from certa.eval.evalstats import bootstrap_ci
from certa.eval.replay import ReplaySC, run_replay
from certa.eval.replay_eval import Replayer
from certa.algorithms.programs.self_consistency import sc_program
from certa.cli.run import load_policy
from certa.runtime import Runtime, Threshold
from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
from certa.eval.traces import load_traces


def ratio_cis(full: list[int], live: list[int], replay: list[int]) -> dict[str, list[float]]:
    """Bootstrap 95% CIs over problems (10,000 seeded resamples) of the live and replayed
    ``spent / full`` token ratios and of their paired difference."""
    f, lv, rp = (np.array(x, dtype=float) for x in (full, live, replay))
    stats = {"live": lambda i: lv[i].sum() / f[i].sum(), "replay_lane_order": lambda i: rp[i].sum() / f[i].sum(),
             "live_minus_replay_lane_order": lambda i: (lv[i].sum() - rp[i].sum()) / f[i].sum()}
    return {k: [round(x, 4) for x in bootstrap_ci(stat, len(f), reps=10_000)] for k, stat in stats.items()}


def lane_order(tokens: list[int], lanes: int) -> list[int]:
    """Finish order of samples 0..n-1 run ``lanes`` at a time, next index first, one token per step each."""
    free = [(0, lane) for lane in range(min(lanes, len(tokens)))]
    done: list[tuple[int, int]] = []
    for i, t in enumerate(tokens):
        start, lane = heapq.heappop(free)
        done.append((start + max(t, 1), i))
        heapq.heappush(free, (start + max(t, 1), lane))
    return [i for _, i in sorted(done)]


async def live(problems, policy, args, journal: Path) -> list[dict]:
    """Run the policy live on each problem not yet in ``journal`` (one JSON line per problem: resumable)."""
    done = {}
    if journal.exists():
        for line in journal.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                break  # a torn last line: that problem runs again
            done[row["idx"]] = row
    todo = [p for p in problems if p.idx not in done]
    if not todo:
        return [done[p.idx] for p in problems]
    backend = LlamaCppBackend(args.model, n_seq=args.lanes, n_ctx=args.lanes * (args.max_tokens + 64) + 1024,
                              n_threads=args.threads, seed=args.seed)
    rt = Runtime(backend)
    prog = sc_program(branches_per_round=args.lanes, cap=args.samples, policy=policy, max_tokens=args.max_tokens,
                      dataset="gsm8k")
    try:
        for p in todo:
            before = backend.stats()["main"]
            t0 = time.perf_counter()
            res = await rt.run(prog, return_errors=True, question=p.question)
            row = {"idx": p.idx, "main": res.tokens.main, "engine_main": backend.stats()["main"] - before,
                   "knob": res.knob_used, "exit": res.exit_reason, "answer": res.answer,
                   "correct": bool(res.answer) and grade(str(res.answer), p.gold, "gsm8k"),
                   "wall_s": round(time.perf_counter() - t0, 1)}
            with journal.open("a") as f:
                f.write(json.dumps(row) + "\n")
            done[p.idx] = row
            print("live", row, flush=True)
    finally:
        await rt.close()
    return [done[p.idx] for p in problems]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idx", default="0:4")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", default=None, help="policy file (default: Threshold(0.55, detect_at=4, every=4))")
    ap.add_argument("--traces", default=None, help="trace file to (re)use; default next to --out")
    ap.add_argument("--out", default="results/live_vs_replay.json")
    args = ap.parse_args()
    policy = load_policy(args.policy) if args.policy else Threshold(0.55, detect_at=4, every=4)
    problems = load_dataset("gsm8k", idx=args.idx)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    traces_path = Path(args.traces or out.with_suffix(".traces.jsonl"))
    cfg = CollectConfig(samples=args.samples, probe_samples=0, max_tokens=args.max_tokens, seed=args.seed)
    factory = lambda: LlamaCppBackend(args.model, n_seq=args.samples, n_threads=args.threads,  # noqa: E731
                                      n_ctx=args.samples * (args.max_tokens + 64) + 1024, seed=args.seed)
    asyncio.run(collect_traces(problems, traces_path, factory, cfg, on_problem=lambda r: print("collected", r["idx"],
                                                                                              flush=True)))
    traces = {p.idx: p for p in load_traces(traces_path)}
    chosen = [traces[p.idx] for p in problems]
    full = sum(s.tokens for t in chosen for s in t.samples)
    lane_runs = []
    for t in chosen:
        prog = ReplaySC(t, lane_order([s.tokens for s in t.samples], args.lanes), policy)
        run_replay(prog)
        lane_runs.append({"idx": t.idx, "main": prog.tokens.main, "knob": prog.knob_value,
                          "correct": prog.is_correct()})
    seeded = Replayer(chosen, "sc", seed=args.seed, orders=16).run(policy)
    rows = asyncio.run(live(problems, policy, args, out.with_suffix(".live.jsonl")))
    per_problem_full = [sum(s.tokens for s in t.samples) for t in chosen]
    cis = ratio_cis(per_problem_full, [r["main"] for r in rows], [r["main"] for r in lane_runs])
    report = {
        "ci95_over_problems": cis,
        "policy": policy.to_dict(), "model": chosen[0].model, "problems": [p.idx for p in problems],
        "samples": args.samples, "lanes": args.lanes, "max_tokens": args.max_tokens,
        "full_budget_tokens": full,
        "replay_lane_order": {"token_ratio": sum(r["main"] for r in lane_runs) / full, "rows": lane_runs},
        "replay_seeded_orders": {"token_ratio": float(seeded.main.sum()) / full, "accuracy": seeded.accuracy},
        "live": {"token_ratio": sum(r["main"] for r in rows) / full,
                 "engine_token_ratio": sum(r["engine_main"] for r in rows) / full,
                 "accuracy": sum(r["correct"] for r in rows) / len(rows), "rows": rows},
    }
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("replay_lane_order", "live")}))
    print("replay (lane order)  x%.3f" % report["replay_lane_order"]["token_ratio"])
    print("replay (seeded)      x%.3f" % report["replay_seeded_orders"]["token_ratio"])
    print("95%% CIs over problems: %s" % json.dumps(cis))
    print("live (program)       x%.3f   live (engine, incl. aborted) x%.3f"
          % (report["live"]["token_ratio"], report["live"]["engine_token_ratio"]))


if __name__ == "__main__":
    main()

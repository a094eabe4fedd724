"""Probe-in-the-middle cost on the llama.cpp engine: CoT with a probe every T tokens vs no probes.

For each GSM8K problem (dev split, idx < 800) and seed, the same chain is decoded through
certa's native sequences plain (``extend(T)`` until done) and probed (``extend(T)`` then
``probe(PROBE, probe_tokens)`` after a chunk), in three probe variants: ``full`` (every chunk,
always ``probe_tokens`` greedy tokens, as Dynasor does), ``stop`` (every chunk; the probe ends
at the ``}`` closing the boxed answer) and ``triggered`` (as ``stop``, but only after a chunk
that wrote a new result, an ``=``: the default ``certa`` CoT preset). Reported per variant: extra wall time over plain (sum over runs,
and the median per-run ratio; the run order rotates to cancel drift), extra engine
iterations, the extra *modeled* time (the simulator's cost model ``a + b·N + c·K + d·P``
fitted to every iteration of this run, summed over each chain's iterations: a noise-robust
estimate on a shared machine) and continuation exactness (the probed chain must be
token-identical to the plain one: 100%).

usage: python benchmarks/probe_overhead.py --json out.json [--model qwen2.5-coder-0.5b]
       [--problems 3] [--interval 32] [--probe-tokens 20] [--max-tokens 256] [--threads 2]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
from certa.runtime.sim.fit import fit_cost_model
from certa.runtime.types import GenRequest

from _machine import add_options, machine, parser, run_main  # sibling module: benchmarks/ is on sys.path

PROBE = "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"
SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
FALLBACK = [("Janet's ducks lay 16 eggs per day. She eats three for breakfast and bakes muffins with four. "
             "She sells the rest for $2 each. How much does she make every day?")]


def questions(path: Path, n: int) -> list[str]:
    if not path.is_file():
        return (FALLBACK * n)[:n]
    rows = [json.loads(line) for line in path.read_text().splitlines()[:min(n, 800)]]
    return [r["question"] for r in rows]


VARIANTS = {"plain": None, "full": (), "stop": ("}",), "triggered": ("}",)}
"""Probe variants: none; every T tokens decoding all ``probe_tokens`` (Dynasor); every T tokens
stopping at the answer's closing brace; and certa's event-triggered probing (a probe only
after a chunk that wrote a new result, an ``=``, as the default ``certa`` CoT preset does)."""


async def chain(b: LlamaCppBackend, q: str, seed: int, args, variant: str, tag: str) -> tuple[float, list[int], int, dict]:
    stop = VARIANTS[variant]
    probed = stop is not None
    req = GenRequest(prompt=q, system=SYSTEM, chat=True, max_tokens=args.max_tokens, temperature=args.temperature,
                     top_k=40, top_p=0.95, seed=seed, rid=f"{tag}-{seed}-{variant}-{time.monotonic_ns()}")
    before, first = b.stats(), len(b.engine.iterations)
    t0 = time.perf_counter()
    seq = await b.open_sequence(req)
    probes, seen = 0, 0
    while not seq.finished:
        await seq.extend(args.interval)
        due = variant != "triggered" or "=" in seq.text[seen:]
        if probed and not seq.finished and due:
            seen = len(seq.text)
            await seq.probe(PROBE, max_tokens=args.probe_tokens, stop=stop)
            probes += 1
    wall = time.perf_counter() - t0
    after = b.stats()
    work = {k: round(after[k] - before[k], 3) for k in ("iterations", "decode_seconds", "prompt_tokens",
                                                        "decode_tokens", "probe_tokens")}
    work["records"] = (first, len(b.engine.iterations))  # this run's iteration records (for the cost model)
    tokens = seq.token_ids
    await seq.close()
    return wall, tokens, probes, work


async def main(args) -> dict:
    b = LlamaCppBackend(args.model, n_ctx=4096, n_seq=4, n_threads=args.threads)
    try:
        await b.generate(GenRequest(prompt="Hello", max_tokens=2, rid="warmup"))
        runs = []
        for i, q in enumerate(questions(Path(args.data), args.problems)):
            # cache the prompt so both runs take the same prefill path (see llamacpp_engine's numerics note)
            await b.generate(GenRequest(prompt=q, system=SYSTEM, chat=True, max_tokens=1, rid=f"warm{i}"))
            for seed in range(args.seeds):
                names = list(VARIANTS)
                k = (i * args.seeds + seed) % len(names)
                res = {v: await chain(b, q, seed, args, v, f"p{i}") for v in names[k:] + names[:k]}
                t0, toks_0, _, work0 = res["plain"]
                run = {"problem": i, "seed": seed, "tokens": len(toks_0), "wall_plain_s": round(t0, 3),
                       "engine_plain": work0}
                for v in PROBED:
                    tv, toks_v, n_probes, work = res[v]
                    run[v] = {"probes": n_probes, "wall_s": round(tv, 3), "extra": round(tv / t0 - 1, 4),
                              "extra_iterations": round(work["iterations"] / work0["iterations"] - 1, 4),
                              "exact": toks_v == toks_0, "engine": work}
                runs.append(run)
                print(json.dumps(run), file=sys.stderr, flush=True)
        stats = b.stats()
        fit = fit_cost_model(b.engine.iterations)
        for run in runs:
            for part in [run["engine_plain"]] + [run[v]["engine"] for v in PROBED]:
                lo, hi = part.pop("records")
                part["modeled_s"] = round(sum(fit.model.iteration_time(r.n_tokens, r.kv_read, r.prefill_pairs)
                                              for r in b.engine.iterations[lo:hi]), 3)
    finally:
        await b.close()
    return {
        "benchmark": "probe_overhead", "model": str(b.model_path.name), "threads": args.threads,
        "interval": args.interval, "probe_tokens": args.probe_tokens, "max_tokens": args.max_tokens,
        "temperature": args.temperature, "runs": runs,
        "variants": {v: summary(runs, v) for v in PROBED},
        "cost_model": fit.as_dict(),
        "target": {"extra_wall_max": 0.15, "exactness": 1.0},
        "engine": {k: stats[k] for k in ("iterations", "prompt_tokens", "probe_tokens", "decode_tokens", "probe")},
        "machine": machine(),
    }


PROBED = [v for v, stop in VARIANTS.items() if stop is not None]


def summary(runs: list[dict], v: str) -> dict:
    plain = sum(r["wall_plain_s"] for r in runs)
    return {"extra_wall_total": round(sum(r[v]["wall_s"] for r in runs) / plain - 1, 4),
            "extra_wall_median": round(statistics.median(r[v]["extra"] for r in runs), 4),
            "extra_iterations": round(sum(r[v]["engine"]["iterations"] for r in runs)
                                      / sum(r["engine_plain"]["iterations"] for r in runs) - 1, 4),
            "extra_modeled": round(sum(r[v]["engine"]["modeled_s"] for r in runs)
                                   / sum(r["engine_plain"]["modeled_s"] for r in runs) - 1, 4),
            "exactness": sum(r[v]["exact"] for r in runs) / len(runs)}


def cli(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/gsm8k/test.jsonl"))
    add_options(p, problems=3, seeds=1, interval=32, probe_tokens=20, max_tokens=256, temperature=0.7, threads=2)
    out = run_main(main, p.parse_args(argv))
    print(json.dumps(out["variants"]))


if __name__ == "__main__":
    cli()

"""Aggregate decode throughput of certa's llama.cpp engine: 8 SC branches batched, vs 8
sequential single calls, vs a minimal raw batched llama.cpp loop — same model, same run.

After one untimed warm-up round (pages the weights in), each method runs ``--rounds`` times
round-robin; machines are noisy, so both the ratio of sums over rounds and the median of
the per-round ratios are reported. Every method starts cold (no cached prompt KV) and
decodes ``--tokens`` new tokens per branch with T=0.7, top-p 0.95, top-k 40 and seeds
0..n-1; throughput is generated tokens / wall time, prompt prefill included. Targets:
certa ≥ 2.5× sequential and ≥ 0.9× raw batched. Also reported, as a noise-robust check of
engine overhead: the median wall time of one 8-token decode step in certa's engine and in
the raw loop, and the share of certa's wall time spent outside ``llama_decode``.

usage: python benchmarks/cpu_engine.py --json out.json [--model qwen2.5-coder-0.5b]
       [--branches 8] [--tokens 64] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import llama_cpp as lc
from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
from certa.runtime.types import GenRequest

from _machine import add_options, machine, parser, run_main  # sibling module: benchmarks/ is on sys.path

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
QUESTION = ("A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it "
            "take? Explain every step in detail before giving the answer.")
SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 40}


def request(i: int, args, tag: str) -> GenRequest:
    return GenRequest(prompt=QUESTION, system=SYSTEM, chat=True, max_tokens=args.tokens, seed=i,
                      rid=f"{tag}-{i}-{time.monotonic_ns()}", **SAMPLING)


async def certa_batched(b: LlamaCppBackend, args) -> tuple[int, float]:
    b.engine.clear_cache()
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(b.generate(request(i, args, "sc")) for i in range(args.branches)))
    return sum(o.tokens for o in outs), time.perf_counter() - t0


async def certa_sequential(b: LlamaCppBackend, args) -> tuple[int, float]:
    b.engine.clear_cache()
    t0 = time.perf_counter()
    n = 0
    for i in range(args.branches):
        n += (await b.generate(request(i, args, "seq"))).tokens
    return n, time.perf_counter() - t0


def raw_batched(b: LlamaCppBackend, prompt: list[int], args, steps: list[float] | None = None) -> tuple[int, float]:
    """A minimal llama.cpp loop: prompt once (tagged with every seq id), then one decode per step."""
    n, model, vocab = args.branches, b.model.ptr, b.model.vocab
    cp = lc.llama_context_default_params()
    cp.n_ctx = len(prompt) + n * args.tokens + 64
    cp.n_batch = cp.n_ubatch = 512
    cp.n_seq_max, cp.kv_unified = n, True
    cp.n_threads = cp.n_threads_batch = args.threads
    ctx = lc.llama_init_from_model(model, cp)
    batch = lc.llama_batch_init(512, 0, n)
    samplers = []
    for i in range(n):
        s = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        lc.llama_sampler_chain_add(s, lc.llama_sampler_init_top_k(SAMPLING["top_k"]))
        lc.llama_sampler_chain_add(s, lc.llama_sampler_init_top_p(SAMPLING["top_p"], 1))
        lc.llama_sampler_chain_add(s, lc.llama_sampler_init_temp(SAMPLING["temperature"]))
        lc.llama_sampler_chain_add(s, lc.llama_sampler_init_dist(i))
        samplers.append(s)

    def put(j: int, tok: int, pos: int, seqs: list[int], logits: bool) -> None:
        batch.token[j], batch.pos[j], batch.n_seq_id[j], batch.logits[j] = tok, pos, len(seqs), logits
        for k, s in enumerate(seqs):
            batch.seq_id[j][k] = s

    t0 = time.perf_counter()
    for c0 in range(0, len(prompt), 512):
        chunk = prompt[c0:c0 + 512]
        for k, tok in enumerate(chunk):
            put(k, tok, c0 + k, list(range(n)), c0 + k == len(prompt) - 1)
        batch.n_tokens = len(chunk)
        assert lc.llama_decode(ctx, batch) == 0
    idx = {i: batch.n_tokens - 1 for i in range(n)}
    live, made, pos = set(range(n)), 0, len(prompt)
    for step in range(args.tokens):
        j = 0
        for i in sorted(live):
            tok = lc.llama_sampler_sample(samplers[i], ctx, idx[i])
            made += 1
            if lc.llama_vocab_is_eog(vocab, tok):
                live.discard(i)
                continue
            put(j, tok, pos, [i], True)
            idx[i] = j
            j += 1
        pos += 1
        if not j or step == args.tokens - 1:  # the last sampled tokens need no decode
            break
        batch.n_tokens = j
        t1 = time.perf_counter()
        assert lc.llama_decode(ctx, batch) == 0
        if steps is not None and j == n:
            steps.append(time.perf_counter() - t1)
    wall = time.perf_counter() - t0
    for s in samplers:
        lc.llama_sampler_free(s)
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    return made, wall


async def main(args) -> dict:
    b = LlamaCppBackend(args.model, n_ctx=4096, n_seq=args.branches, n_threads=args.threads)
    try:
        prompt = b.encode(QUESTION, chat=True, system=SYSTEM)
        warm = argparse.Namespace(**{**vars(args), "tokens": 8})
        await certa_batched(b, warm)
        await certa_sequential(b, warm)
        await asyncio.to_thread(raw_batched, b, prompt, warm)
        totals = {m: [0, 0.0] for m in ("certa_batched", "sequential", "raw_batched")}
        rounds = []
        for r in range(args.rounds):
            got = {}
            b.engine.reset_stats()
            got["certa_batched"] = await certa_batched(b, args)
            engine = b.stats()
            certa_steps = [r.seconds for r in b.engine.iterations if r.n_decode == args.branches and not r.n_prefill]
            got["sequential"] = await certa_sequential(b, args)
            raw_steps: list[float] = []
            got["raw_batched"] = await asyncio.to_thread(raw_batched, b, prompt, args, raw_steps)
            row = {m: {"tokens": n, "wall_s": round(w, 3), "tok_s": round(n / w, 2)} for m, (n, w) in got.items()}
            row["speedup_vs_sequential"] = round(row["certa_batched"]["tok_s"] / row["sequential"]["tok_s"], 3)
            row["ratio_vs_raw_batched"] = round(row["certa_batched"]["tok_s"] / row["raw_batched"]["tok_s"], 3)
            row["decode_step_ms"] = {"certa": round(1000 * statistics.median(certa_steps), 1),
                                     "raw": round(1000 * statistics.median(raw_steps), 1)}
            row["certa_engine"] = {"iterations": engine["iterations"], "decode_s": round(engine["decode_seconds"], 3),
                                   "python_overhead": round(1 - engine["decode_seconds"] / got["certa_batched"][1], 4),
                                   "prompt_tokens": engine["prompt_tokens"],
                                   "cached_prompt_tokens": engine["cached_prompt_tokens"]}
            rounds.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            for m, (n, w) in got.items():
                totals[m][0] += n
                totals[m][1] += w
    finally:
        await b.close()
    tps = {m: n / w for m, (n, w) in totals.items()}
    return {
        "benchmark": "cpu_engine", "model": b.model_path.name, "threads": args.threads, "branches": args.branches,
        "tokens_per_branch": args.tokens, "prompt_tokens": len(prompt), "rounds": rounds,
        "tok_s": {m: round(v, 2) for m, v in tps.items()},
        "speedup_vs_sequential": round(tps["certa_batched"] / tps["sequential"], 3),
        "ratio_vs_raw_batched": round(tps["certa_batched"] / tps["raw_batched"], 3),
        "median_round": {k: statistics.median(r[k] for r in rounds)
                         for k in ("speedup_vs_sequential", "ratio_vs_raw_batched")},
        "decode_step_ratio_raw_over_certa": round(statistics.median(r["decode_step_ms"]["raw"] / r["decode_step_ms"]["certa"]
                                                                    for r in rounds), 3),
        "target": {"speedup_vs_sequential": 2.5, "ratio_vs_raw_batched": 0.9},
        "machine": machine(),
    }


def cli(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    add_options(p, branches=8, tokens=64, rounds=2, threads=2)
    out = run_main(main, p.parse_args(argv))
    print(json.dumps({k: out[k] for k in ("tok_s", "speedup_vs_sequential", "ratio_vs_raw_batched", "median_round")}))


if __name__ == "__main__":
    cli()

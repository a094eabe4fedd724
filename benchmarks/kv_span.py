"""What idle KV cells cost a decode on llama.cpp's unified KV cache (CPU), measured directly.

One context (``kv_unified``, as certa's engine creates it), 16 short sequences decoding one
token each per step, timed (median of ``--steps``) in three states of the cache:

1. ``alone``: only the 16 short sequences, in the lowest cells;
2. ``beside_idle``: the same beside one idle ``--idle``-token sequence that never decodes;
3. ``high_after_removal``: the long sequence placed first (lowest cells), the short ones above
   it, then the long one removed: as few cells in use as in 1, but at high cell indices.

The difference 2 − 1 divided by 16 × ``--idle`` is the per-token, per-cell cost that
``CostModel.e`` models (``t = ... + e·N·W``); 3 shows whether the attention span follows the
cells in use or the highest occupied cell. Not a timed test; writes JSON.

    python benchmarks/kv_span.py --json out.json [--idle 7000] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import llama_cpp as lc

from certa.runtime import models
from certa.runtime.backends.llamacpp.model import LlamaModel

N_SHORT = 16


class Cache:
    """A bare llama.cpp context and one reusable batch (sequence 0 is the long one)."""

    def __init__(self, model: LlamaModel, n_ctx: int, threads: int) -> None:
        cp = lc.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.kv_unified = n_ctx, 512, 512, N_SHORT + 1, True
        cp.n_threads = cp.n_threads_batch = threads
        self.ctx = lc.llama_init_from_model(model.ptr, cp)
        self.mem = lc.llama_get_memory(self.ctx)
        self.batch = lc.llama_batch_init(512, 0, 1)

    def decode(self, items: list[tuple[int, int, int]]) -> float:
        """Decode (token, seq, pos) items in chunks of 512; seconds of the last chunk."""
        dt = 0.0
        for s in range(0, len(items), 512):
            chunk = items[s:s + 512]
            b = self.batch
            b.n_tokens = len(chunk)
            for i, (tok, seq, pos) in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
                b.seq_id[i][0] = seq
                b.logits[i] = True
            t0 = time.perf_counter()
            if lc.llama_decode(self.ctx, b) != 0:
                raise RuntimeError("llama_decode failed")
            dt = time.perf_counter() - t0
        return dt

    def prompt(self, tokens: list[int], seq: int) -> None:
        self.decode([(t, seq, i) for i, t in enumerate(tokens)])

    def steps(self, prompt_len: int, n: int) -> float:
        """Median ms of ``n`` steps of the 16 short sequences; their new tokens are removed after."""
        seqs = range(1, N_SHORT + 1)
        ts = [self.decode([(100 + k, s, prompt_len + k) for s in seqs]) for k in range(n)]
        for s in seqs:
            lc.llama_memory_seq_rm(self.mem, s, prompt_len, -1)
        return statistics.median(ts) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="kv_span.json")
    ap.add_argument("--idle", type=int, default=7000, help="tokens of the idle sequence")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    args = ap.parse_args()
    model = LlamaModel(models.resolve_model(args.model))
    cache = Cache(model, n_ctx=16384, threads=args.threads)
    short = model.tokenize("Count from one to fifty: one, two, three,")
    long = (model.tokenize("The quick brown fox jumps over the lazy dog. ") * (args.idle // 10 + 1))[:args.idle]
    for s in range(1, N_SHORT + 1):
        cache.prompt(short, s)
    alone = cache.steps(len(short), args.steps)
    for s in range(1, N_SHORT + 1):  # empty the cache: the long one takes the lowest cells,
        lc.llama_memory_seq_rm(cache.mem, s, -1, -1)
    cache.prompt(long, 0)
    for s in range(1, N_SHORT + 1):  # and the short ones go above it
        cache.prompt(short, s)
    beside = cache.steps(len(short), args.steps)
    lc.llama_memory_seq_rm(cache.mem, 0, -1, -1)
    high = cache.steps(len(short), args.steps)
    out = {"benchmark": "kv_span", "model": args.model, "threads": args.threads, "idle_tokens": args.idle,
           "decodes_per_step": N_SHORT, "ms_per_step": {"alone": round(alone, 2), "beside_idle": round(beside, 2),
                                                         "high_after_removal": round(high, 2)},
           "e_us_per_token_cell": round((beside - alone) * 1e3 / (N_SHORT * args.idle), 4),
           "loadavg": os.getloadavg(), "machine": platform.processor() or platform.machine(),
           "extra_buffers": model.extra_buffers}
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

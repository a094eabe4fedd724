r"""Load on ``certa serve``: N concurrent chat requests through the official OpenAI client.

The server runs Self-Consistency (4 branches a round, cap 16) on the scripted fake backend
with a per-request latency and a per-token latency (default 20 ms + 4 ms/token, ~0.2 s a
request), behind an admission limit of
``--max-inflight`` backend requests (the engine's batch slots), so the order in which the
scheduler admits requests decides latency. Most questions are "easy" (every branch agrees:
the program exits after one round); every ``--hard-every``-th is "hard" (branches disagree:
it runs to the cap). The same workload runs once per scheduler (default ``certa`` then
``fcfs``) in the same process; every answer is checked.

    python benchmarks/serve_load.py --json out/serve_load.json [--n 200] [--schedulers certa,fcfs] [--repeats 3]

Writes ``{"config", "runs": [...], "results": {scheduler: median over repeats of
{throughput_rps, latency_s: {mean, p50, p90, p99}}}, "ratios"}``. Schedulers are interleaved
(certa, fcfs, certa, fcfs, ...) and each ratio is the median of the per-repeat ratios, so a
noisy machine disturbs both sides alike. The fake backend sleeps instead of computing, so the
figures measure scheduling and the server's own overhead (on a busy 2-core machine that CPU
time is part of the latency), not a model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import time
from typing import Any

from certa.algorithms.programs.library import build
from certa.runtime.policy import Threshold
from certa.runtime import ScriptedBackend
from certa.serve import Server
from certa.serve.launch import start_background

_ID = re.compile(r"Problem (\d+)")
FILLER = " ".join(["so"] * 40)


def responder(hard_every: int):
    """Scripted answers: problem i answers i on every branch, unless it is hard (branches disagree)."""

    def respond(req) -> str:
        i = int(_ID.search(req.prompt).group(1))
        b = req.seed % 100_000 if req.seed is not None else 0
        answer = i if (i % hard_every or b % 5 in (0, 1)) else i + b % 5
        return f"Let me think step by step. {FILLER} The answer is \\boxed{{{answer}}}."

    return respond


def make_server(scheduler: str, *, hard_every: int, latency: float, token_latency: float, max_inflight: int,
                max_concurrent: int | None = None) -> tuple[Server, ScriptedBackend]:
    backend = ScriptedBackend(responder(hard_every), latency=latency, token_latency=token_latency)
    program = build("sc", branches_per_round=4, cap=16, max_tokens=64,  # the policy its documented figures used
                    policy=Threshold(0.55, detect_at=4, every=4))
    server = Server({"sc": program}, backend, scheduler=scheduler, max_inflight=max_inflight,
                    max_concurrent=max_concurrent)
    return server, backend


async def _drive(base_url: str, n: int) -> list[dict[str, Any]]:
    import httpx
    import openai
    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8),
                             timeout=300.0)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=http)

    async def one(i: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        r = await client.chat.completions.create(
            model="sc", messages=[{"role": "user", "content": f"Problem {i}: what is the answer?"}])
        extra = r.model_extra or {}
        return {"i": i, "latency_s": time.perf_counter() - t0, "content": r.choices[0].message.content,
                "ok": r.choices[0].message.content == f"\\boxed{{{i}}}", "exit_reason": extra["certa"]["exit_reason"],
                "completion_tokens": r.usage.completion_tokens}

    try:
        return await asyncio.gather(*(one(i) for i in range(1, n + 1)))
    finally:
        await client.close()
        await http.aclose()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs)) - 1))]


def run_load(scheduler: str, n: int = 200, *, hard_every: int = 4, latency: float = 0.02,
             token_latency: float = 0.004, max_inflight: int = 32) -> dict[str, Any]:
    """Serve, fire ``n`` concurrent requests, and summarise (also checks no rid is left live)."""
    server, backend = make_server(scheduler, hard_every=hard_every, latency=latency, token_latency=token_latency,
                                  max_inflight=max_inflight)
    with start_background(server) as bg:
        t0 = time.perf_counter()
        rows = asyncio.run(_drive(bg.base_url, n))
        wall = time.perf_counter() - t0
        metrics = server.metrics()
    lat = [r["latency_s"] for r in rows]
    exits: dict[str, int] = {}
    for r in rows:
        exits[r["exit_reason"]] = exits.get(r["exit_reason"], 0) + 1
    return {
        "scheduler": scheduler, "requests": n, "correct": sum(r["ok"] for r in rows), "wall_s": round(wall, 3),
        "throughput_rps": round(n / wall, 2),
        "latency_s": {"mean": round(statistics.fmean(lat), 4), "p50": round(_pct(lat, 0.5), 4),
                      "p90": round(_pct(lat, 0.9), 4), "p99": round(_pct(lat, 0.99), 4)},
        "exit_reasons": exits, "completion_tokens": sum(r["completion_tokens"] for r in rows),
        "tokens_saved": metrics["tokens_saved"], "backend_requests": len(backend.requests),
        "live_rids_after": len(backend.live_rids()), "programs_running_after": metrics["programs_running"],
    }


def _median_result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    out["throughput_rps"] = statistics.median(r["throughput_rps"] for r in rows)
    out["wall_s"] = statistics.median(r["wall_s"] for r in rows)
    out["latency_s"] = {k: statistics.median(r["latency_s"][k] for r in rows) for k in rows[0]["latency_s"]}
    out["correct"] = min(r["correct"] for r in rows)
    out["live_rids_after"] = max(r["live_rids_after"] for r in rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--schedulers", default="certa,fcfs")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per scheduler (medians reported)")
    ap.add_argument("--hard-every", type=int, default=4, help="every k-th question is hard (runs to the cap)")
    ap.add_argument("--latency", type=float, default=0.02, help="seconds per backend request")
    ap.add_argument("--token-latency", type=float, default=0.004, help="seconds per generated token")
    ap.add_argument("--max-inflight", type=int, default=32, help="backend requests admitted at once")
    ap.add_argument("--json", default=None, help="write the report here")
    args = ap.parse_args()
    names = [s for s in args.schedulers.split(",") if s]
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        for s in names:
            r = run_load(s, args.n, hard_every=args.hard_every, latency=args.latency,
                         token_latency=args.token_latency, max_inflight=args.max_inflight)
            runs.append({"repeat": rep, **r})
            print(f"repeat {rep} {s}: {r['throughput_rps']} req/s, P90 {r['latency_s']['p90']} s, "
                  f"mean {r['latency_s']['mean']} s, correct {r['correct']}/{args.n}", flush=True)
    results = {s: _median_result([r for r in runs if r["scheduler"] == s]) for s in names}
    base = names[0]

    def ratio(other: str, get) -> float:
        pairs = [(a, b) for a in runs for b in runs
                 if a["repeat"] == b["repeat"] and a["scheduler"] == base and b["scheduler"] == other]
        return round(statistics.median(get(a) / get(b) for a, b in pairs), 3)

    ratios = {f"{base}/{s}": {"throughput": ratio(s, lambda r: r["throughput_rps"]),
                              "p90_latency": ratio(s, lambda r: r["latency_s"]["p90"]),
                              "mean_latency": ratio(s, lambda r: r["latency_s"]["mean"])}
              for s in names if s != base}
    report = {"config": {**vars(args), "program": "sc(branches_per_round=4, cap=16)", "backend": "scripted (fake)",
                         "python": platform.python_version(), "machine": platform.machine()},
              "runs": runs, "results": results, "ratios": ratios}
    text = json.dumps(report, indent=1)
    if args.json:
        import pathlib
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(text + "\n")
    print(json.dumps({"results": {s: {k: r[k] for k in ("throughput_rps", "latency_s", "correct")}
                                  for s, r in results.items()}, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()

r"""Load on ``certa serve``: N concurrent chat requests through the official OpenAI client, certa vs FCFS.

The server runs Self-Consistency (4 branches a round, cap 16, ``Threshold(0.55, detect_at=4,
every=4)``) behind an admission limit of ``--max-inflight`` backend requests. Most questions
are "easy" (every branch agrees: the program exits after one round); every ``--hard-every``-th
is "hard" (branches disagree: it runs to the cap, 4 rounds). Every answer is checked.

Backends (``--backend``):

* ``sim`` (default) — the CONTENTION backend (``certa serve --backend sim``,
  :mod:`certa.runtime.sim.contention`): the simulated engine — ``--preset``'s cost model (an
  ESTIMATE from public specs), its KV pool, continuous batching up to ``--max-running`` — in
  real time accelerated ``--speed`` times. Requests slow each other down as on a GPU, so the
  order the scheduler admits them in decides latency and throughput. Each branch decodes a
  reasoning-length chain of ``--tokens`` (min-max, drawn per request from its rid) while its
  text stays short. Latencies are reported in ENGINE seconds (wall × speed), and wall-clock
  ones beside them.
* ``scripted`` — the fixed-latency fake (``--latency`` + ``--token-latency`` per request): no
  contention; it measures the server's own overhead.
* ``llamacpp`` — a REAL engine: the embedded llama.cpp engine with the small CPU model, real
  GSM8K (dev) questions, the SC program's real certaindex exits, schedulers certa / fcfs /
  app-fifo interleaved, every answer graded; then the simulator's prediction of the same run.
  Its own options: :mod:`serve_engine_load` (``python benchmarks/serve_load.py --backend
  llamacpp --json out.json [--png out.png]``).
* ``sglang`` — the same workload on the in-process SGLang engine (a GPU and ``sglang``; without
  them it exits with a message).

The same 200 requests run once per scheduler (``certa`` then ``fcfs``, ``--repeats``
interleaved) in the same process.

    python benchmarks/serve_load.py --json docs/results/serve_load.json [--n 200] [--hard-every 1,4] [--speed 10]

Writes ``{"config", "runs": [...], "results": {regime: {scheduler: medians over repeats of
{throughput_rps, latency_s: {mean, p50, p90, p99}, failed}}}, "ratios"}``; ``hard_every`` takes
several values (one regime each). On a busy shared machine the event loop runs late at times:
the contention backend keeps engine time on its cost model (a late step catches up), but a
late client or server adds wall time, so the figures carry that noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import time
import zlib
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


def chain_tokens(lo: int, hi: int):
    """Simulated decode tokens of one request: in [lo, hi], fixed by its rid (the same in every run)."""

    def tokens(req, res) -> int:
        return lo + zlib.crc32(req.rid.split(":", 1)[-1].encode() + _ID.search(req.prompt).group(1).encode()) % (hi - lo + 1)

    return tokens


def make_backend(kind: str, *, hard_every: int, latency: float = 0.02, token_latency: float = 0.004,
                 preset: str = "h100-llama-3.1-8b", speed: float = 10.0, tokens: tuple[int, int] = (500, 2000),
                 max_running: int = 256):
    content = ScriptedBackend(responder(hard_every), latency=latency if kind == "scripted" else 0.0,
                              token_latency=token_latency if kind == "scripted" else 0.0)
    if kind == "scripted":
        return content
    from certa.runtime.sim.contention import ContentionBackend
    return ContentionBackend(preset, speed=speed, content=content, output_tokens=chain_tokens(*tokens),
                             prompt_tokens=200, max_running=max_running)


def make_server(scheduler: str, *, hard_every: int, latency: float = 0.02, token_latency: float = 0.004,
                max_inflight: int = 32, max_concurrent: int | None = None, backend: str = "scripted",
                **sim: Any) -> tuple[Server, Any]:
    be = make_backend(backend, hard_every=hard_every, latency=latency, token_latency=token_latency, **sim)
    program = build("sc", branches_per_round=4, cap=16, max_tokens=64 if backend == "scripted" else 4096,
                    policy=Threshold(0.55, detect_at=4, every=4))  # the policy its documented figures used
    server = Server({"sc": program}, be, scheduler=scheduler, max_inflight=max_inflight,
                    max_concurrent=max_concurrent)
    return server, be


async def _drive(base_url: str, n: int, ask=None, check=None) -> list[dict[str, Any]]:
    """Fire requests 1..n at once; ``ask(i) -> create() kwargs`` and ``check(i, content) -> bool``
    (default: the scripted "Problem i" and its boxed answer i)."""
    import httpx
    import openai
    ask = ask or (lambda i: {"model": "sc", "messages": [{"role": "user", "content": f"Problem {i}: what is the answer?"}]})
    check = check or (lambda i, content: content == f"\\boxed{{{i}}}")
    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8),
                             timeout=900.0)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=http)

    async def one(i: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            r = await client.chat.completions.create(**ask(i))
        except Exception as exc:  # noqa: BLE001 - a failed request is a figure, not a crash
            return {"i": i, "start": t0, "latency_s": time.perf_counter() - t0, "ok": False, "failed": type(exc).__name__,
                    "exit_reason": "failed", "completion_tokens": 0}
        extra = r.model_extra or {}
        return {"i": i, "start": t0, "latency_s": time.perf_counter() - t0, "content": r.choices[0].message.content,
                "ok": check(i, r.choices[0].message.content), "exit_reason": extra["certa"]["exit_reason"],
                "knob_used": extra["certa"].get("knob_used"), "completion_tokens": r.usage.completion_tokens,
                "failed": None}

    try:
        return await asyncio.gather(*(one(i) for i in range(1, n + 1)))
    finally:
        await client.close()
        await http.aclose()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs)) - 1))]


def _summary(lat: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(lat), 4), "p50": round(_pct(lat, 0.5), 4),
            "p90": round(_pct(lat, 0.9), 4), "p99": round(_pct(lat, 0.99), 4)}


def run_load(scheduler: str, n: int = 200, *, hard_every: int = 4, latency: float = 0.02,
             token_latency: float = 0.004, max_inflight: int = 32, backend: str = "scripted", **sim: Any) -> dict[str, Any]:
    """Serve, fire ``n`` concurrent requests, and summarise (also checks no rid is left live).

    ``backend="sim"``: the contention backend (``sim``: preset, speed, tokens, max_running);
    latencies and throughput are then in engine seconds (wall × speed), wall ones beside them.
    """
    server, be = make_server(scheduler, hard_every=hard_every, latency=latency, token_latency=token_latency,
                             max_inflight=max_inflight, backend=backend, **sim)
    with start_background(server) as bg:
        rows = asyncio.run(_drive(bg.base_url, n))
        metrics = server.metrics()
    wall = max(r["start"] + r["latency_s"] for r in rows) - min(r["start"] for r in rows)  # first sent to last done
    scale = be.speed if backend == "sim" else 1.0
    lat = [r["latency_s"] * scale for r in rows]
    exits: dict[str, int] = {}
    for r in rows:
        exits[r["exit_reason"]] = exits.get(r["exit_reason"], 0) + 1
    out = {
        "scheduler": scheduler, "backend": backend, "hard_every": hard_every, "requests": n,
        "correct": sum(r["ok"] for r in rows), "failed": sum(r["failed"] is not None for r in rows),
        "wall_s": round(wall, 3), "throughput_rps": round(n / (wall * scale), 4), "latency_s": _summary(lat),
        "exit_reasons": exits, "completion_tokens": sum(r["completion_tokens"] for r in rows),
        "tokens_saved": metrics["tokens_saved"], "backend_requests": len(be.content.requests if backend == "sim"
                                                                          else be.requests),
        "live_rids_after": len(be.live_rids()), "programs_running_after": metrics["programs_running"],
    }
    if backend == "sim":
        st = be.engine.stats
        out["engine"] = {"speed": be.speed, "preset": be.preset.name, "engine_s": round(be.engine_clock, 2),
                         "busy_s": round(st.busy_s, 2), "decode_tokens": st.decode_tokens,
                         "preemptions": st.preemptions, "wall_latency_s": _summary([r["latency_s"] for r in rows])}
    return out


def run_virtual_load(scheduler: str, n: int = 200, *, hard_every: int = 4, max_inflight: int = 64,
                     **sim: Any) -> dict[str, Any]:
    """The same workload on the contention backend in VIRTUAL time (no HTTP, no wall clock): deterministic.

    The Server's own ``complete`` is called for each request on a
    :class:`~certa.runtime.sim.clock.VirtualClockLoop`; engine time is the loop's time.
    """
    from certa.runtime.sim.clock import run_virtual

    sim = {**sim, "speed": 1.0}

    async def go() -> tuple[list[tuple[float, float, bool]], Any, dict]:
        server, be = make_server(scheduler, hard_every=hard_every, max_inflight=max_inflight, backend="sim", **sim)
        loop = asyncio.get_running_loop()

        async def one(i: int) -> tuple[float, float, bool]:
            t0 = loop.time()
            try:
                c = await server.complete(f"Problem {i}: what is the answer?")
            except Exception:  # noqa: BLE001 - counted as failed
                return t0, loop.time() - t0, False
            return t0, loop.time() - t0, c.content == f"\\boxed{{{i}}}"

        async with server:
            rows = await asyncio.gather(*(one(i) for i in range(1, n + 1)))
            return rows, be, server.metrics()

    rows, be, metrics = run_virtual(go())
    span = max(t + d for t, d, _ in rows) - min(t for t, _, _ in rows)
    st = be.engine.stats
    return {"scheduler": scheduler, "backend": "sim (virtual time)", "hard_every": hard_every, "requests": n,
            "correct": sum(ok for *_, ok in rows), "failed": sum(not ok for *_, ok in rows),
            "throughput_rps": round(n / span, 4), "latency_s": _summary([d for _, d, _ in rows]),
            "engine": {"preset": be.preset.name, "engine_s": round(be.engine_clock, 2), "busy_s": round(st.busy_s, 2),
                       "decode_tokens": st.decode_tokens, "wasted_tokens": sum(u.total for u in be.wasted.values()),
                       "preemptions": st.preemptions},
            "tokens_saved": metrics["tokens_saved"], "live_rids_after": len(be.live_rids())}


def _median_result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    out["throughput_rps"] = statistics.median(r["throughput_rps"] for r in rows)
    if "wall_s" in rows[0]:
        out["wall_s"] = statistics.median(r["wall_s"] for r in rows)
    out["latency_s"] = {k: statistics.median(r["latency_s"][k] for r in rows) for k in rows[0]["latency_s"]}
    out["correct"] = min(r["correct"] for r in rows)
    out["failed"] = max(r["failed"] for r in rows)
    out["live_rids_after"] = max(r["live_rids_after"] for r in rows)
    return out


def main() -> int | None:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--backend", default="sim")
    if pre.parse_known_args()[0].backend in ("llamacpp", "sglang"):  # the real engines: their own options
        import serve_engine_load  # sibling module: benchmarks/ is on sys.path
        return serve_engine_load.main()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--schedulers", default="certa,fcfs")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved runs per scheduler (medians reported)")
    ap.add_argument("--hard-every", default="1,4", help="every k-th question is hard (runs to the cap); "
                    "comma-separated: one regime each")
    ap.add_argument("--backend", choices=("sim", "scripted", "llamacpp", "sglang"), default="sim",
                    help="llamacpp / sglang: a real engine (benchmarks/serve_engine_load.py; its own options)")
    ap.add_argument("--preset", default="h100-llama-3.1-8b", help="sim: simulated GPU x model (an ESTIMATE)")
    ap.add_argument("--speed", type=float, default=10.0, help="sim: engine seconds per wall second")
    ap.add_argument("--tokens", default="500-2000", help="sim: decode tokens per branch, min-max")
    ap.add_argument("--max-running", type=int, default=256, help="sim: the engine's batch cap")
    ap.add_argument("--latency", type=float, default=0.02, help="scripted: seconds per backend request")
    ap.add_argument("--token-latency", type=float, default=0.004, help="scripted: seconds per generated token")
    ap.add_argument("--max-inflight", type=int, default=64, help="backend requests admitted at once")
    ap.add_argument("--clock", choices=("real", "virtual"), default="real",
                    help="sim: real (HTTP, the OpenAI client, wall clock x speed) or virtual (no HTTP, deterministic)")
    ap.add_argument("--json", default=None, help="write the report here")
    args = ap.parse_args()
    if args.clock == "virtual" and args.backend != "sim":
        ap.error("--clock virtual needs --backend sim")
    names = [s for s in args.schedulers.split(",") if s]
    regimes = [int(h) for h in args.hard_every.split(",")]
    lo, hi = (int(x) for x in args.tokens.split("-"))
    sim = {"preset": args.preset, "speed": args.speed, "tokens": (lo, hi), "max_running": args.max_running} \
        if args.backend == "sim" else {}
    if args.clock == "real":
        run_load(names[0], 8, hard_every=2, latency=0.0, token_latency=0.0, max_inflight=8)  # warm-up: imports, connection
    runs: list[dict[str, Any]] = []
    for hard in regimes:
        for rep in range(args.repeats):
            for s in names:
                if args.clock == "virtual":
                    r = run_virtual_load(s, args.n, hard_every=hard, max_inflight=args.max_inflight, **sim)
                else:
                    r = run_load(s, args.n, hard_every=hard, latency=args.latency, token_latency=args.token_latency,
                                 max_inflight=args.max_inflight, backend=args.backend, **sim)
                runs.append({"repeat": rep, **r})
                print(f"hard 1/{hard} repeat {rep} {s}: {r['throughput_rps']} req/s, mean {r['latency_s']['mean']} s, "
                      f"P90 {r['latency_s']['p90']} s, correct {r['correct']}/{args.n}, failed {r['failed']}, "
                      f"wall {r.get('wall_s', '-')} s", flush=True)
    results = {f"hard_every={h}": {s: _median_result([r for r in runs if r["scheduler"] == s and r["hard_every"] == h])
                                   for s in names} for h in regimes}
    base = names[0]

    def ratio(hard: int, other: str, get) -> float:
        pairs = [(a, b) for a in runs for b in runs if a["repeat"] == b["repeat"] and a["hard_every"] == b["hard_every"]
                 == hard and a["scheduler"] == base and b["scheduler"] == other]
        return round(statistics.median(get(a) / get(b) for a, b in pairs), 3)

    ratios = {f"hard_every={h}": {f"{base}/{s}": {"throughput": ratio(h, s, lambda r: r["throughput_rps"]),
                                                  "p90_latency": ratio(h, s, lambda r: r["latency_s"]["p90"]),
                                                  "mean_latency": ratio(h, s, lambda r: r["latency_s"]["mean"])}
                                  for s in names if s != base} for h in regimes}
    backend = (f"sim (contention backend, preset {args.preset} ESTIMATE, {args.tokens} tokens a branch; engine "
               + ("seconds, VIRTUAL time, no HTTP)" if args.clock == "virtual" else f"seconds, speed {args.speed}x)")) \
        if args.backend == "sim" else "scripted (fake)"
    report = {"config": {**vars(args), "program": "sc(branches_per_round=4, cap=16, Threshold(0.55, 4, 4))",
                         "backend_desc": backend, "python": platform.python_version(), "machine": platform.machine()},
              "runs": runs, "results": results, "ratios": ratios}
    text = json.dumps(report, indent=1)
    if args.json:
        import pathlib
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(text + "\n")
    print(json.dumps({"results": {g: {s: {k: r[k] for k in ("throughput_rps", "latency_s", "correct", "failed")}
                                      for s, r in res.items()} for g, res in results.items()}, "ratios": ratios},
                     indent=1))


if __name__ == "__main__":
    raise SystemExit(main())

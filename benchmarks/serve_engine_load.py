r"""Load on ``certa serve`` over a REAL engine: GSM8K questions, certa vs FCFS vs app-FIFO, and the
simulator's prediction of the same run (``python benchmarks/serve_load.py --backend llamacpp``).

Engine: ``--backend llamacpp`` — the embedded llama.cpp engine with ``--model`` (default the small
CPU model, Qwen2.5-Coder-0.5B q4 from the ``model-small`` package; a GGUF path works too), loaded
ONCE; a fresh :class:`~certa.serve.Server` per scheduler run shares it (each Server's Runtime
attaches its scheduler to the engine, which orders its batches by it). ``--backend sglang``: the
in-process SGLang engine (``--model``: a HF path; needs a GPU and ``sglang``; without them the
script exits with a message, no traceback).

Workload: ``--questions`` (default ``gsm8k:0:8``, development rows only: GSM8K idx < 800,
MATH-500 idx < 300; several specs comma-separated, e.g. ``gsm8k:0:12,math500:0:4``), all sent at
once by N concurrent OpenAI clients (``serve_load._drive``), each to the project's SC program
(``build("sc", branches_per_round, cap, max_tokens, dataset=...)``, the shipped stable-vote
certaindex policy: a question exits as soon as its vote is settled and its unneeded branches are
aborted). Request ``seed`` = the question's idx, so branch i samples with seed idx·100000+i under
every scheduler (the same answers come up, up to batch-dependent numerics). ``--max-inflight``
backend requests are admitted at once; the rest queue in the scheduler, which is where its order
matters. Every answer is graded against gold (``certa.algorithms.answers.grade``). The schedulers
run INTERLEAVED (repeat 0: certa, fcfs, app-fifo; repeat 1: ...) after one untimed warm-up.

Regime: ``results[QUESTIONS]`` (named after the ``--questions`` spec, e.g. ``"gsm8k:0:8"``) →
scheduler → medians over repeats of {latency_s {mean,p50,p90,p99} (wall seconds), throughput_rps,
completion_tokens, correct, failed, exit_reasons}; ``ratios[regime]["certa/fcfs"]`` etc. are
medians over repeats of the per-repeat ratios (mean, p90 latency; throughput).

Prediction (llamacpp, always on): every backend request of the real runs is logged (question,
seed → text, decode tokens, prompt tokens, finish); the simulator (contention backend on a
virtual clock, :func:`certa.runtime.sim.clock.run_virtual`) then serves the SAME questions under
each scheduler with those exact per-branch outputs on a cost model of this CPU engine — the stored
fit from ``docs/results/sim-cpu-2026-12-03`` (a PREDICTION: nothing timed in this run goes in) and,
beside it, the same model form refitted to this run's own engine iterations (in-situ costs, still
predicted scheduling). ``prediction`` holds predicted vs measured certa/fcfs and certa/app-fifo
mean and P90 ratios and their relative errors.

Scaling up: ``--questions gsm8k:0:200`` (more requests), ``--model /path/to/model.gguf``
(bigger model), ``--threads N`` on more cores, ``--n-seq``/``--max-inflight`` for a wider batch,
``--repeats 3`` for medians. The default (8 questions, SC 2 a round up to 4 branches of at most
384 tokens, 1 repeat, 3 schedulers) takes about 12-15 minutes on 2 cores with one llama.cpp thread
(about 32 decode tokens/s with 4 sequences); the 0.5B model answers GSM8K poorly (about 1 in 5
samples right), so branches often disagree and run to the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_load import _drive, _summary  # noqa: E402  (sibling module)

from certa.recording import RecordingBackend  # noqa: E402
from certa.runtime.backends.base import Backend  # noqa: E402
from certa.runtime.types import GenRequest, GenResult  # noqa: E402

STORED_FIT = Path(__file__).resolve().parent.parent / "docs/results/sim-cpu-2026-12-03/sim_validate_cpu.json"


# ---- workload -------------------------------------------------------------------------
def load_questions(spec: str) -> list[Any]:
    """``"gsm8k:0:8,math500:0:4"`` → Problems (development rows only: reserved idx raise)."""
    from certa.eval.datasets import load_dataset
    out = []
    for part in spec.split(","):
        name, _, idx = part.partition(":")
        out += load_dataset(name, idx=idx or "0:8")
    return out


def program_name(dataset: str) -> str:
    return f"sc-{dataset}"


class Tap(RecordingBackend):
    """The run recorder (a transparent proxy of the engine) that also logs every finished
    generation flat, with its prompt tokens: what the simulator replays."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.log: list[dict[str, Any]] = []

    async def generate(self, req: GenRequest) -> GenResult:
        out = await super().generate(req)
        if out.finish_reason != "abort":
            self.log.append({"prompt": req.prompt, "seed": req.seed, "text": out.text, "tokens": out.tokens,
                             "prompt_tokens": out.prompt_tokens, "finish": out.finish_reason})
        return out


def make_programs(problems: list[Any], args) -> dict[str, Any]:
    from certa.algorithms.programs.library import build
    return {program_name(d): build("sc", branches_per_round=args.branches, cap=args.cap, max_tokens=args.max_tokens,
                                   dataset=d) for d in dict.fromkeys(p.dataset for p in problems)}


def ask_check(problems: list[Any]):
    from certa.algorithms.answers.equivalence import grade

    def ask(i: int) -> dict[str, Any]:
        p = problems[i - 1]
        return {"model": program_name(p.dataset), "messages": [{"role": "user", "content": p.question}], "seed": p.idx}

    def check(i: int, content: str) -> bool:
        p = problems[i - 1]
        return bool(content) and grade(content, p.gold, p.dataset)

    return ask, check


# ---- one measured run -----------------------------------------------------------------
def run_engine_load(scheduler: str, tap: Tap, problems: list[Any], args) -> dict[str, Any]:
    """A fresh Server with ``scheduler`` on the shared engine; all questions at once over HTTP."""
    from certa.serve import Server
    from certa.serve.launch import start_background
    server = Server(make_programs(problems, args), tap, scheduler=scheduler, max_inflight=args.max_inflight)
    engine = getattr(tap.inner, "engine", None)
    if hasattr(engine, "clear_cache"):
        engine.clear_cache()  # every run starts cold: no prompt KV left by the previous scheduler's run
        engine.reset_stats()
    first = len(tap.log)
    ask, check = ask_check(problems)
    with start_background(server, shutdown_timeout=30) as bg:
        rows = asyncio.run(_drive(bg.base_url, len(problems), ask=ask, check=check))
    n = len(rows)
    wall = max(r["start"] + r["latency_s"] for r in rows) - min(r["start"] for r in rows)
    exits: dict[str, int] = {}
    for r in rows:
        exits[r["exit_reason"]] = exits.get(r["exit_reason"], 0) + 1
    out = {"scheduler": scheduler, "requests": n, "correct": sum(bool(r["ok"]) for r in rows),
           "failed": sum(r["failed"] is not None for r in rows), "wall_s": round(wall, 2),
           "throughput_rps": round(n / wall, 4), "latency_s": _summary([r["latency_s"] for r in rows]),
           "completion_tokens": sum(r["completion_tokens"] for r in rows), "exit_reasons": exits,
           "live_rids_after": len(tap.live_rids()),
           "per_request": [{"idx": problems[r["i"] - 1].idx, "dataset": problems[r["i"] - 1].dataset,
                            "latency_s": round(r["latency_s"], 3), "ok": bool(r["ok"]), "exit": r["exit_reason"],
                            "branches": r.get("knob_used"), "completion_tokens": r["completion_tokens"]}
                           for r in rows],
           "generations": len(tap.log) - first}
    if hasattr(engine, "iterations"):
        out["_iterations"] = list(engine.iterations)  # for the in-situ refit; not written to JSON
    return out


# ---- summaries ------------------------------------------------------------------------
def median_result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeats of one scheduler's runs (accuracy: the worst; failures: the most)."""
    keys = rows[0]["latency_s"]
    exits: dict[str, int] = {}
    for r in rows:
        for k, v in r["exit_reasons"].items():
            exits[k] = exits.get(k, 0) + v
    return {"requests": rows[0]["requests"], "repeats": len(rows),
            "latency_s": {k: round(statistics.median(r["latency_s"][k] for r in rows), 3) for k in keys},
            "throughput_rps": round(statistics.median(r["throughput_rps"] for r in rows), 4),
            "completion_tokens": statistics.median(r["completion_tokens"] for r in rows),
            "correct": min(r["correct"] for r in rows), "failed": max(r["failed"] for r in rows),
            "exit_reasons": exits, "live_rids_after": max(r.get("live_rids_after", 0) for r in rows)}


def ratios(runs: list[dict[str, Any]], base: str, others: list[str]) -> dict[str, dict[str, float]]:
    """``{"certa/fcfs": {mean_latency, p90_latency, throughput}}``: medians of per-repeat ratios."""
    out = {}
    for s in others:
        pairs = [(a, b) for a in runs for b in runs if a["repeat"] == b["repeat"]
                 and a["scheduler"] == base and b["scheduler"] == s]
        if not pairs:
            continue
        med = lambda get: round(statistics.median(get(a) / get(b) for a, b in pairs), 3)  # noqa: E731
        out[f"{base}/{s}"] = {"mean_latency": med(lambda r: r["latency_s"]["mean"]),
                              "p90_latency": med(lambda r: r["latency_s"]["p90"]),
                              "throughput": med(lambda r: r["throughput_rps"])}
    return out


def join_prediction(measured: dict[str, dict[str, float]], predicted: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Predicted vs measured ratios side by side, with the relative error |pred - meas| / meas."""
    out = {}
    for pair, m in measured.items():
        p = predicted.get(pair)
        if p is None:
            continue
        out[pair] = {k: {"measured": m[k], "predicted": p[k], "rel_err": round(abs(p[k] - m[k]) / m[k], 3)}
                     for k in ("mean_latency", "p90_latency") if k in p and m.get(k)}
    return out


# ---- the simulator's prediction --------------------------------------------------------
def stored_cost_model():
    """The "cells" cost model fitted to this CPU engine on 2026-12-03 (median of its 3 runs' fits)."""
    from certa.runtime.sim.cost_model import CostModel
    runs = json.loads(STORED_FIT.read_text())["runs"]
    fits = [r["fits"]["cells"]["fit"]["model"] for r in runs]
    num = {k: statistics.median(f[k] for f in fits) for k in ("a", "b", "c", "d", "r", "e")}
    return CostModel(**num, tile=fits[0]["tile"])


class ReplayContent(Backend):
    """The real run's outputs, by (prompt, seed): what the simulated engine says and how long it is."""

    def __init__(self, log: list[dict[str, Any]]) -> None:
        from certa.runtime.types import Capabilities
        self.capabilities = Capabilities(name="replay")
        self.by_key: dict[tuple[str, Any], dict[str, Any]] = {}
        self.by_prompt: dict[str, list[dict[str, Any]]] = {}
        for g in log:
            self.by_key.setdefault((g["prompt"], g["seed"]), g)
            self.by_prompt.setdefault(g["prompt"], []).append(g)
        self.missing = 0

    async def generate(self, req: GenRequest) -> GenResult:
        g = self.by_key.get((req.prompt, req.seed))
        if g is None:  # a branch no real run finished (aborted everywhere): another branch of the question
            self.missing += 1
            seen = self.by_prompt[req.prompt]
            g = seen[(req.seed or 0) % len(seen)]
        return GenResult(text=g["text"], tokens=g["tokens"], prompt_tokens=g["prompt_tokens"],
                         finish_reason=g["finish"], rid=req.rid)

    async def abort(self, rid: str) -> bool:
        return False

    def live_rids(self) -> set[str]:
        return set()


def simulate_load(scheduler: str, problems: list[Any], log: list[dict[str, Any]], cost, args) -> dict[str, Any]:
    """The same questions, all at t=0, through the same Server and program, on the simulated engine."""
    from certa.runtime.sim.clock import run_virtual
    from certa.runtime.sim.contention import ContentionBackend
    from certa.runtime.sim.engine import EngineConfig, SimEngine
    from certa.serve import Server
    content = ReplayContent(log)

    async def go():
        be = ContentionBackend(cost=cost, kv_capacity=args.n_ctx, content=content, speed=1.0)
        be.engine = SimEngine(EngineConfig(args.n_ctx, max_running=args.n_seq, chunk_tokens=args.max_batch_tokens,
                                           reserve_ratio=0.0, mixed=True, cache_tokens=args.n_ctx // 4), cost)
        server = Server(make_programs(problems, args), be, scheduler=scheduler, max_inflight=args.max_inflight)
        loop = asyncio.get_running_loop()

        async def one(p) -> float:
            t0 = loop.time()
            await server.complete(p.question, model=program_name(p.dataset), seed=p.idx)
            return loop.time() - t0

        async with server:
            return await asyncio.gather(*(one(p) for p in problems))

    lat = run_virtual(go())
    span = max(lat)
    return {"scheduler": scheduler, "repeat": 0, "latency_s": _summary(list(lat)),
            "throughput_rps": round(len(lat) / span, 4), "missing_outputs": content.missing}


def predict(problems, log, runs, names, args) -> dict[str, Any]:
    from certa.runtime.sim.fit import fit_cost_model
    measured = ratios(runs, names[0], names[1:])
    iters = [it for r in runs for it in r.get("_iterations", [])]
    models = {"stored-fit": stored_cost_model()}
    if len(iters) >= 8:
        models["refit-this-run"] = fit_cost_model(iters, target="wall_seconds", tile=4, cells=True).model
    out: dict[str, Any] = {"measured": measured}
    for label, cost in models.items():
        sims = [simulate_load(s, problems, log, cost, args) for s in names]
        pred = ratios(sims, names[0], names[1:])
        out[label] = {"cost_model": {k: (round(v, 9) if isinstance(v, float) else v) for k, v in cost.as_dict().items()},
                      "results": {s["scheduler"]: {k: s[k] for k in ("latency_s", "throughput_rps", "missing_outputs")}
                                  for s in sims},
                      "ratios": pred, "vs_measured": join_prediction(measured, pred)}
    return out


# ---- plot -----------------------------------------------------------------------------
def plot(runs: list[dict[str, Any]], results: dict[str, Any], names: list[str], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from certa.runtime.scheduling.policies import POLICIES

    def color(s: str) -> str | None:
        try:
            return POLICIES.meta(s, "color", None)
        except Exception:  # noqa: BLE001 - a colour is cosmetic
            return None

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in names:
        lat = sorted(q["latency_s"] for r in runs if r["scheduler"] == s for q in r["per_request"])
        ax.step(lat, [(k + 1) / len(lat) for k in range(len(lat))], where="post", label=s, color=color(s))
    ax.set_xlabel("request latency (wall s)")
    ax.set_ylabel("fraction of requests done")
    ax.set_title("latency CDF (all repeats)")
    ax.legend()
    width = 0.8 / len(names)
    for k, s in enumerate(names):
        lat = results[s]["latency_s"]
        bx.bar([j + k * width for j in range(2)], [lat["mean"], lat["p90"]], width, label=s, color=color(s))
    bx.set_xticks([j + width * (len(names) - 1) / 2 for j in range(2)], ["mean", "P90"])
    bx.set_ylabel("latency (wall s, median over repeats)")
    bx.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- engines --------------------------------------------------------------------------
def sglang_missing() -> str | None:
    """Why SGLang cannot run here (None when it can)."""
    import importlib.util
    if importlib.util.find_spec("sglang") is None:
        return "sglang is not installed (pip install 'certa[sglang]')"
    try:
        import torch
        cuda = bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, or a broken CUDA setup: no GPU to use
        cuda = False
    if not cuda:
        return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
    return None


def open_engine(args) -> Any:
    if args.backend == "sglang":
        from certa.runtime.backends.sglang.engine import SGLangEngineBackend
        return SGLangEngineBackend(args.model or "Qwen/Qwen2.5-1.5B-Instruct", deterministic=True)
    from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    return LlamaCppBackend(args.model or "qwen2.5-coder-0.5b", n_ctx=args.n_ctx, n_seq=args.n_seq,
                           n_threads=args.threads, max_batch_tokens=args.max_batch_tokens)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("llamacpp", "sglang"), default="llamacpp")
    ap.add_argument("--model", default=None, help="llamacpp: a GGUF path or known name (default qwen2.5-coder-0.5b); "
                    "sglang: a model path (default Qwen/Qwen2.5-1.5B-Instruct)")
    ap.add_argument("--questions", default="gsm8k:0:8", help="dataset:idx specs, comma-separated (dev rows only)")
    ap.add_argument("--schedulers", default="certa,fcfs,app-fifo", help="the first is the base of the ratios")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved runs per scheduler (medians reported)")
    ap.add_argument("--branches", type=int, default=2, help="SC branches_per_round")
    ap.add_argument("--cap", type=int, default=4, help="SC cap (most branches per question)")
    ap.add_argument("--max-tokens", type=int, default=384, help="decode tokens per branch")
    ap.add_argument("--max-inflight", type=int, default=4, help="backend requests admitted at once (the rest queue)")
    ap.add_argument("--n-seq", type=int, default=4, help="llamacpp: sequence slots")
    ap.add_argument("--n-ctx", type=int, default=8192, help="llamacpp: KV cells")
    ap.add_argument("--max-batch-tokens", type=int, default=512, help="llamacpp: tokens per iteration")
    ap.add_argument("--threads", type=int, default=None, help="llamacpp: CPU threads (default: cores less one)")
    ap.add_argument("--no-predict", action="store_true", help="skip the simulator's prediction")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run")
    ap.add_argument("--json", required=True, help="write the report here")
    ap.add_argument("--png", default=None, help="write the latency CDF + mean/P90 bars here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.backend == "sglang":
        why = sglang_missing()
        if why:
            print(f"serve_load --backend sglang: cannot run here: {why}. It needs a CUDA GPU and sglang; "
                  "use --backend llamacpp on a CPU.", file=sys.stderr)
            return 2
    names = [s for s in args.schedulers.split(",") if s]
    problems = load_questions(args.questions)
    regime = args.questions
    t0 = time.perf_counter()
    tap = Tap(open_engine(args))
    print(f"engine {args.backend} ready in {time.perf_counter() - t0:.1f}s; {len(problems)} questions, "
          f"schedulers {names}, max_inflight {args.max_inflight}", flush=True)
    try:
        if not args.no_warmup:
            run_engine_load(names[0], tap, problems[:2], argparse.Namespace(**{**vars(args), "max_tokens": 16}))
            print(f"warm-up done ({time.perf_counter() - t0:.0f}s)", flush=True)
        tap.log.clear()
        runs = []
        for rep in range(args.repeats):
            for s in names:
                r = {"repeat": rep, **run_engine_load(s, tap, problems, args)}
                runs.append(r)
                lat = r["latency_s"]
                print(f"repeat {rep} {s}: mean {lat['mean']}s P50 {lat['p50']}s P90 {lat['p90']}s P99 {lat['p99']}s, "
                      f"{r['throughput_rps']} req/s, {r['completion_tokens']} tokens, correct {r['correct']}/"
                      f"{r['requests']}, failed {r['failed']}, exits {r['exit_reasons']} "
                      f"[{time.perf_counter() - t0:.0f}s]", flush=True)
    finally:
        close = getattr(tap.inner, "shutdown", None)
        if callable(close):
            close()
    results = {regime: {s: median_result([r for r in runs if r["scheduler"] == s]) for s in names}}
    rat = {regime: ratios(runs, names[0], names[1:])}
    report: dict[str, Any] = {
        "config": {**vars(args), "program": f"sc(branches_per_round={args.branches}, cap={args.cap}, "
                                            f"max_tokens={args.max_tokens}, stable-vote default policy)",
                   "model": getattr(tap.inner, "model_path", None) and Path(tap.inner.model_path).name,
                   "latency_unit": "wall seconds", "python": platform.python_version(),
                   "machine": platform.platform(), "regime": f"{regime}: every question sent at once"},
        "runs": [{k: v for k, v in r.items() if k != "_iterations"} for r in runs],
        "results": results, "ratios": rat}
    if args.backend == "llamacpp" and not args.no_predict:
        report["prediction"] = {regime: predict(problems, tap.log, runs, names, args)}
        for label in ("stored-fit", "refit-this-run"):
            for pair, v in report["prediction"][regime].get(label, {}).get("vs_measured", {}).items():
                print(f"prediction ({label}) {pair}: " + ", ".join(
                    f"{k} predicted {x['predicted']} vs measured {x['measured']} (err {x['rel_err']:.0%})"
                    for k, x in v.items()), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1, default=str) + "\n")
    if args.png:
        plot(runs, results[regime], names, args.png,
             f"certa serve on {args.backend} ({report['config']['model']}): {regime}, SC {args.branches}x{args.cap}, "
             f"max_inflight {args.max_inflight}, {args.repeats} repeat(s)")
    print(json.dumps({"results": {s: {k: r[k] for k in ("latency_s", "throughput_rps", "completion_tokens", "correct",
                                                         "failed")} for s, r in results[regime].items()},
                      "ratios": rat}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

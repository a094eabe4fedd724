r"""GPU readiness check for the SGLang path: one script, one JSON, under 8 minutes on one H200.

On a machine with a CUDA GPU, ``sglang`` (``pip install 'certa[sglang]'``, Python >= 3.11)
and a local model directory, it runs, each phase under its own time budget:

1. ``tests/test_sglang_gpu.py`` (the backend conformance suite on a real ``sglang.Engine``);
2. a short Self-Consistency workload through the embedded engine (``SGLangEngineBackend``):
   throughput, abort latency (``abort(rid)`` until the request is gone), whether priority is
   honoured (more requests than running slots, the urgent half submitted last), tokens saved
   by certaindex early exit, accuracy on synthetic sums;
3. the same SC workload through ``certa serve --backend sglang`` (a subprocess, its own engine):
   throughput, latency, tokens saved (from ``/metrics``).

    python benchmarks/gpu_check.py --model /models/Qwen2.5-1.5B-Instruct --json out/gpu_check.json
    python benchmarks/gpu_check.py --dry-run --json out/gpu_check_dry.json   # no GPU needed

``--dry-run`` checks the prerequisites (reported, not required), records the GPU test command
without running it, and runs phases 2 and 3 on the scripted FAKE backend (``ScriptedBackend``,
no model) so the workload, measuring and JSON code is exercised anywhere; its figures are
labelled ``"stand_in": "scripted"`` and say nothing about SGLang. Questions are synthetic
(``What is a + b?``), so no dataset row is used.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = {"gpu_tests": 180, "engine": 110, "serve": 120}  # caps; + ~1 min to build the engine = 8 min
TOTAL_S = 470  # the serve phase gets what is left of this (the whole check must end within 8 minutes)
ENGINE_ARGS = {"mem_fraction_static": 0.5, "max_running_requests": 32}  # fewer slots than the priority check sends


# ---- preflight -------------------------------------------------------------------------------
def preflight(model: str | None) -> dict[str, Any]:
    """What the machine has; ``ready`` is True only when every GPU prerequisite holds."""
    info: dict[str, Any] = {"python": platform.python_version(), "python_ok": sys.version_info >= (3, 11),
                            "sglang": None, "cuda": False, "device": None, "model": model,
                            "model_ok": bool(model) and Path(model).is_dir()}
    if importlib.util.find_spec("sglang") is not None:
        from importlib.metadata import PackageNotFoundError, version
        try:
            info["sglang"] = version("sglang")
        except PackageNotFoundError:
            info["sglang"] = "unknown"
    if importlib.util.find_spec("torch") is not None:
        import torch
        info["cuda"] = bool(torch.cuda.is_available())
        info["device"] = torch.cuda.get_device_name(0) if info["cuda"] else None
    info["ready"] = bool(info["python_ok"] and info["sglang"] and info["cuda"] and info["model_ok"])
    return info


def gpu_test_command() -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_sglang_gpu.py")]


def run_gpu_tests(model: str, budget: float) -> dict[str, Any]:
    """Run the GPU test module; passed/failed/skipped counts from pytest's summary line."""
    env = {**os.environ, "CERTA_SGLANG_MODEL": model, "CERTA_SGLANG_ARGS": json.dumps({"mem_fraction_static": 0.5})}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(gpu_test_command(), env=env, capture_output=True, text=True, timeout=budget, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": "timed_out", "wall_s": round(time.perf_counter() - t0, 1)}
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", p.stdout)}
    return {"status": "ok" if p.returncode == 0 else "failed", "returncode": p.returncode, **counts,
            "wall_s": round(time.perf_counter() - t0, 1), "tail": p.stdout[-600:]}


# ---- the workload ----------------------------------------------------------------------------
def questions(n: int) -> list[tuple[str, str]]:
    """Synthetic sums with known answers (no dataset rows)."""
    return [(f"What is {17 + 7 * i} + {29 + 3 * i}? Put the final answer in \\boxed{{}}.", str(46 + 10 * i))
            for i in range(n)]


def sc_program(max_tokens: int):
    from certa.algorithms.programs.library import build
    return build("sc", branches_per_round=4, cap=8, max_tokens=max_tokens, dataset="gsm8k")


async def sc_workload(backend: Any, n: int, max_tokens: int) -> dict[str, Any]:
    """``n`` SC programs at once through a Runtime: tokens/s, accuracy, tokens saved."""
    from certa.runtime import Runtime
    rt = Runtime(backend)
    qs = questions(n)
    t0 = time.perf_counter()
    results = await asyncio.gather(*(rt.run(sc_program(max_tokens), return_errors=True, question=q) for q, _ in qs))
    wall = time.perf_counter() - t0
    tokens = sum(r.tokens.total for r in results)
    return {"programs": n, "wall_s": round(wall, 3), "tokens": tokens, "throughput_tok_s": round(tokens / wall, 1),
            "tokens_saved": sum(r.tokens_saved for r in results), "ok": sum(r.ok for r in results),
            "correct": sum(str(r.answer) == a for r, (_, a) in zip(results, qs)),
            "exit_reasons": {e: sum(r.exit_reason == e for r in results) for e in {r.exit_reason for r in results}}}


async def abort_latency(backend: Any, repeats: int = 3) -> dict[str, Any]:
    """Seconds from ``abort(rid)`` until the aborted request has returned and left ``live_rids``."""
    from certa.runtime.types import GenRequest
    lat = []
    for i in range(repeats):
        rid = f"gpu-check-abort-{i}"
        task = asyncio.ensure_future(backend.generate(GenRequest(prompt="Count to ten thousand: 1, 2,", rid=rid,
                                                                 max_tokens=4096, program_id=rid)))
        await asyncio.sleep(0.5)
        t0 = time.perf_counter()
        await backend.abort(rid)
        out = await asyncio.wait_for(task, 30)
        while rid in backend.live_rids():
            await asyncio.sleep(0.001)
        lat.append(time.perf_counter() - t0)
        assert out.finish_reason in ("abort", "length", "stop")
    return {"repeats": repeats, "max_s": round(max(lat), 4), "mean_s": round(sum(lat) / len(lat), 4)}


async def priority_check(backend: Any, n: int = 128) -> dict[str, Any]:
    """More requests than running slots; the urgent half (certa priority 0) is submitted LAST.
    Honoured: the urgent half finishes earlier on average than the lazy half (priority 100)."""
    from certa.runtime.types import GenRequest
    done: dict[str, float] = {}
    t0 = time.perf_counter()

    async def one(i: int, prio: float) -> None:
        await backend.generate(GenRequest(prompt=f"Write a list of {i + 5} fruits:", max_tokens=96, rid=f"prio-{i}",
                                          program_id=f"prio-{i}", priority=prio))
        done[f"prio-{i}"] = time.perf_counter() - t0

    lazy = [asyncio.ensure_future(one(i, 100.0)) for i in range(n // 2)]
    await asyncio.sleep(0.05)
    urgent = [asyncio.ensure_future(one(i, 0.0)) for i in range(n // 2, n)]
    await asyncio.gather(*lazy, *urgent)
    mean_lazy = sum(done[f"prio-{i}"] for i in range(n // 2)) / (n // 2)
    mean_urgent = sum(done[f"prio-{i}"] for i in range(n // 2, n)) / (n - n // 2)
    return {"requests": n, "mean_finish_urgent_s": round(mean_urgent, 3), "mean_finish_lazy_s": round(mean_lazy, 3),
            "honoured": mean_urgent < mean_lazy}


async def engine_phase(backend: Any, n: int, max_tokens: int) -> dict[str, Any]:
    try:
        return {"abort_latency": await abort_latency(backend), "priority": await priority_check(backend),
                "sc": await sc_workload(backend, n, max_tokens)}
    finally:
        await backend.close()


def make_backend(model: str | None, dry_run: bool) -> Any:
    """The engine backend (built outside any event loop), or the scripted stand-in."""
    if dry_run:
        from certa.runtime import ScriptedBackend
        return ScriptedBackend(latency=0.002, token_latency=0.0002)
    from certa.runtime.backends.sglang.engine import SGLangEngineBackend
    return SGLangEngineBackend(model=model, **ENGINE_ARGS)


# ---- certa serve ------------------------------------------------------------------------------
def serve_command(model: str | None, port: int, dry_run: bool) -> list[str]:
    cmd = [sys.executable, "-m", "certa.cli", "serve", "--program", "sc", "--port", str(port), "--log-level", "warning"]
    if dry_run:
        return cmd + ["--backend", "scripted"]
    opts = [f"--backend-opt={k}={v}" for k, v in ENGINE_ARGS.items()]
    return cmd + ["--backend", "sglang", "--model", str(model), *opts]


def serve_phase(model: str | None, n: int, dry_run: bool, budget: float) -> dict[str, Any]:
    """Start ``certa serve``, send ``n`` SC chat requests at once, read throughput and /metrics."""
    import httpx
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(serve_command(model, port, dry_run), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + budget
    try:
        while True:
            if proc.poll() is not None:
                return {"status": "failed", "stderr": (proc.stderr.read() if proc.stderr else "")[-600:]}
            try:
                if httpx.get(url + "/health", timeout=1.0, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return {"status": "timed_out"}
            time.sleep(0.2)
        out = asyncio.run(_drive(url, n, max(5.0, deadline - time.monotonic())))
        metrics = httpx.get(url + "/metrics", timeout=5.0, trust_env=False).text
        saved = re.search(r"^certa_tokens_saved_total (\d+)", metrics, re.M)
        return {"status": "ok", **out, "tokens_saved": int(saved.group(1)) if saved else None}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def _drive(url: str, n: int, timeout: float) -> dict[str, Any]:
    import httpx
    qs = questions(n)
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as c:
        async def one(q: str) -> tuple[float, dict]:
            t0 = time.perf_counter()
            r = await c.post(url + "/v1/chat/completions", json={"model": "sc", "messages": [{"role": "user",
                                                                                              "content": q}]})
            r.raise_for_status()
            return time.perf_counter() - t0, r.json()

        t0 = time.perf_counter()
        rows = await asyncio.gather(*(one(q) for q, _ in qs))
        wall = time.perf_counter() - t0
    lat = sorted(x for x, _ in rows)
    tokens = sum(int((b.get("usage") or {}).get("completion_tokens") or 0) for _, b in rows)
    return {"requests": n, "wall_s": round(wall, 3), "throughput_rps": round(n / wall, 3),
            "throughput_tok_s": round(tokens / wall, 1), "latency_p50_s": round(lat[len(lat) // 2], 3)}


# ---- main ---------------------------------------------------------------------------------------
def run_check(model: str | None, *, dry_run: bool, n: int, max_tokens: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    pre = preflight(model)
    report: dict[str, Any] = {"benchmark": "gpu_check", "dry_run": dry_run, "preflight": pre,
                              "budget_s": BUDGET_S, "engine_args": ENGINE_ARGS,
                              "gpu_test_command": " ".join(gpu_test_command())}
    if dry_run:
        report["stand_in"] = "scripted"  # the figures below come from the FAKE backend
        report["gpu_tests"] = {"status": "not_run (dry run)"}
    elif not pre["ready"]:
        raise SystemExit(f"not ready for the GPU check: {json.dumps(pre)} (use --dry-run to check the script)")
    else:
        report["gpu_tests"] = run_gpu_tests(str(model), BUDGET_S["gpu_tests"])
    backend = make_backend(model, dry_run)
    try:
        report["engine"] = asyncio.run(asyncio.wait_for(engine_phase(backend, n, max_tokens), BUDGET_S["engine"]))
    except asyncio.TimeoutError:
        report["engine"] = {"status": "timed_out"}
    left = TOTAL_S - (time.perf_counter() - t0)
    report["serve"] = serve_phase(model, n, dry_run, min(BUDGET_S["serve"], left)) if left > 20 else {
        "status": "skipped: out of time"}
    report["elapsed_s"] = round(time.perf_counter() - t0, 1)
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.environ.get("CERTA_SGLANG_MODEL"), help="local model directory")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: scripted stand-in, GPU tests not run")
    ap.add_argument("--programs", type=int, default=32, help="SC programs per workload")
    ap.add_argument("--max-tokens", type=int, default=384, help="decode budget per SC branch")
    ap.add_argument("--json", default=None, help="write the report here")
    args = ap.parse_args(argv)
    report = run_check(args.model, dry_run=args.dry_run, n=args.programs, max_tokens=args.max_tokens)
    text = json.dumps(report, indent=2, default=str)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)
    return report


if __name__ == "__main__":
    main()

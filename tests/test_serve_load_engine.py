"""``benchmarks/serve_load.py --backend llamacpp|sglang`` (``benchmarks/serve_engine_load.py``):
the real-engine load path at tiny size (skips without llama-cpp or the model), a clean refusal
of ``--backend sglang`` where there is no GPU/sglang, and the pure helpers (summaries, ratios,
the prediction join, the simulator replay of logged outputs)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "serve_engine_load.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("serve_engine_load_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(sched: str, rep: int, mean: float, p90: float, rps: float) -> dict:
    return {"scheduler": sched, "repeat": rep, "requests": 4, "correct": 3, "failed": 0, "throughput_rps": rps,
            "completion_tokens": 100, "exit_reasons": {"certaindex": 4},
            "latency_s": {"mean": mean, "p50": mean, "p90": p90, "p99": p90}}


def test_ratios_are_medians_of_per_repeat_ratios(bench):
    runs = [_run("certa", 0, 8, 10, 1.0), _run("fcfs", 0, 10, 10, 1.0),
            _run("certa", 1, 6, 9, 1.2), _run("fcfs", 1, 10, 12, 1.0), _run("app-fifo", 0, 16, 20, 0.5)]
    r = bench.ratios(runs, "certa", ["fcfs", "app-fifo", "lpm"])
    assert r["certa/fcfs"] == {"mean_latency": 0.7, "p90_latency": 0.875, "throughput": 1.1}
    assert r["certa/app-fifo"] == {"mean_latency": 0.5, "p90_latency": 0.5, "throughput": 2.0}
    assert "certa/lpm" not in r  # no runs: no ratio


def test_median_result_takes_medians_worst_accuracy_and_summed_exits(bench):
    a, b = _run("certa", 0, 8, 10, 1.0), _run("certa", 1, 6, 12, 2.0)
    b["correct"], b["failed"] = 2, 1
    m = bench.median_result([a, b])
    assert m["latency_s"]["mean"] == 7 and m["latency_s"]["p90"] == 11 and m["throughput_rps"] == 1.5
    assert m["correct"] == 2 and m["failed"] == 1 and m["exit_reasons"] == {"certaindex": 8} and m["repeats"] == 2


def test_join_prediction_reports_relative_errors(bench):
    meas = {"certa/fcfs": {"mean_latency": 0.8, "p90_latency": 1.0, "throughput": 1.1}}
    pred = {"certa/fcfs": {"mean_latency": 0.72, "p90_latency": 1.1, "throughput": 1.0}}
    j = bench.join_prediction(meas, pred)
    assert j["certa/fcfs"]["mean_latency"] == {"measured": 0.8, "predicted": 0.72, "rel_err": 0.1}
    assert j["certa/fcfs"]["p90_latency"]["rel_err"] == 0.1
    assert bench.join_prediction(meas, {}) == {}


def test_replay_content_serves_logged_outputs_and_counts_misses(bench):
    from certa.runtime.types import GenRequest
    log = [{"prompt": "q", "seed": 0, "text": "\\boxed{1}", "tokens": 40, "prompt_tokens": 30, "finish": "stop"},
           {"prompt": "q", "seed": 1, "text": "\\boxed{2}", "tokens": 50, "prompt_tokens": 30, "finish": "length"}]
    c = bench.ReplayContent(log)
    hit = asyncio.run(c.generate(GenRequest(prompt="q", seed=1, rid="a")))
    assert (hit.text, hit.tokens, hit.finish_reason, c.missing) == ("\\boxed{2}", 50, "length", 0)
    miss = asyncio.run(c.generate(GenRequest(prompt="q", seed=4, rid="b")))  # 4 % 2 -> the seed-0 output
    assert miss.tokens == 40 and c.missing == 1


def test_prediction_replays_the_logged_workload_under_each_scheduler(bench):
    """The simulator serves the same questions with the logged per-branch outputs (virtual time)."""
    import argparse

    from certa.eval.datasets import Problem
    from certa.algorithms.prompts import prompt
    probs = [Problem("gsm8k", i, f"What is {i} + {i}?", str(2 * i)) for i in range(4)]
    log = [{"prompt": prompt("math_cot", question=p.question), "seed": p.idx * 100_000 + b,
            "text": f"so \\boxed{{{2 * p.idx}}}", "tokens": 40 + 30 * p.idx, "prompt_tokens": 60, "finish": "stop"}
           for p in probs for b in range(4)]
    args = argparse.Namespace(branches=2, cap=4, max_tokens=256, max_inflight=2, n_seq=4, n_ctx=8192,
                              max_batch_tokens=512)
    runs = [_run(s, 0, m, p, 1.0) for s, m, p in (("certa", 8, 10), ("fcfs", 10, 10))]
    out = bench.predict(probs, log, runs, ["certa", "fcfs"], args)
    stored = out["stored-fit"]
    assert set(stored["results"]) == {"certa", "fcfs"}
    assert all(r["missing_outputs"] == 0 and r["latency_s"]["mean"] > 0 for r in stored["results"].values())
    v = stored["vs_measured"]["certa/fcfs"]
    assert set(v) == {"mean_latency", "p90_latency"} and v["mean_latency"]["measured"] == 0.8
    assert "refit-this-run" not in out  # no engine iterations were logged


def test_sglang_without_gpu_exits_cleanly_with_a_message(bench):
    if bench.sglang_missing() is None:
        pytest.skip("sglang and a GPU are present here: --backend sglang would run")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_load.py"), "--backend", "sglang",
                        "--json", "unused.json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert "cannot run here" in p.stderr and "GPU" in p.stderr and "Traceback" not in p.stderr
    assert not (ROOT / "unused.json").exists()


@pytest.mark.model
def test_real_engine_load_tiny(bench, tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'certa[cpu]')")
    pytest.importorskip("openai", reason="the openai client is not installed (pip install 'certa[server-test]')")
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")
    from certa.runtime import models
    small = models.KNOWN_MODELS["qwen2.5-coder-0.5b"]
    if models.locate(small)[0] == "missing":
        pytest.skip(f"the 0.5B model is not installed ({small.pip_hint})")
    out = tmp_path / "load.json"
    rc = bench.main(["--questions", "gsm8k:0:3", "--schedulers", "certa,fcfs", "--cap", "2", "--max-tokens", "24",
                     "--threads", "1", "--no-warmup", "--json", str(out), "--png", str(tmp_path / "load.png")])
    assert rc == 0
    report = json.loads(out.read_text())
    res = report["results"]["gsm8k:0:3"]
    for s in ("certa", "fcfs"):
        assert res[s]["failed"] == 0 and res[s]["live_rids_after"] == 0
        assert res[s]["latency_s"]["mean"] > 0 and res[s]["latency_s"]["p90"] >= res[s]["latency_s"]["p50"]
        assert sum(res[s]["exit_reasons"].values()) == 3 and "failed" not in res[s]["exit_reasons"]
    assert {"mean_latency", "p90_latency", "throughput"} <= set(report["ratios"]["gsm8k:0:3"]["certa/fcfs"])
    assert all(len(r["per_request"]) == 3 for r in report["runs"])  # every request answered
    pred = report["prediction"]["gsm8k:0:3"]
    assert "certa/fcfs" in pred["stored-fit"]["vs_measured"] and pred["stored-fit"]["results"]["fcfs"]["missing_outputs"] == 0
    assert (tmp_path / "load.png").stat().st_size > 0

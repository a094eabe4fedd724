"""Load: 200 concurrent chat requests through the official OpenAI client against one server
(one Runtime, one ``certa`` Scheduler, 32 backend slots) on the scripted fake backend all
complete with the right answer, and no rid or program outlives them. The workload is
``benchmarks/serve_load.py``'s; figures are printed (-s). The certa-vs-fcfs comparison is
the benchmark's job (``python benchmarks/serve_load.py``), not a timed test."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("openai", reason="the openai client is not installed (pip install 'certa[server-test]')")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")

BENCH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "serve_load.py"


def _bench():
    spec = importlib.util.spec_from_file_location("serve_load_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_200_concurrent_requests_all_complete_correctly():
    bench = _bench()
    r = bench.run_load("certa", 200, hard_every=4, latency=0.005, token_latency=0.001, max_inflight=32)
    print(f"\nserve load (certa, 200 requests): {r['throughput_rps']} req/s, P90 {r['latency_s']['p90']} s, "
          f"mean {r['latency_s']['mean']} s, wall {r['wall_s']} s")
    assert r["correct"] == 200
    assert r["exit_reasons"] == {"certaindex": 150, "cap": 50}  # easy ones exit after one round
    # lanes loop on as soon as a branch finishes, so under CPU load an easy program may have
    # started (and then aborted) up to 3 next-round requests before its 4th answer arrived
    assert 150 * 4 + 50 * 16 <= r["backend_requests"] <= 150 * 7 + 50 * 16
    assert r["live_rids_after"] == 0 and r["programs_running_after"] == 0
    assert r["tokens_saved"] > 0

"""benchmarks/cot_default.py: the default CoT rule is chosen on calibration halves only."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from certa.simulation.synth import synth_traces, write_synth

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "cot_default.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("cot_default_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sets(bench, n=2):
    return [bench.TraceSet(f"set{i}", synth_traces(20, seed=i, samples=4, probed=3, interval=32, mean_tokens=300,
                                                   max_tokens=512), 0.5, 0) for i in range(n)]


def test_choice_uses_only_calibration_halves_and_is_the_cheapest_feasible(bench, monkeypatch):
    sets = _sets(bench)
    for s in sets:
        rep, _ = s.parts["heldout"]
        monkeypatch.setattr(rep, "run", lambda *a, **k: pytest.fail("choose() replayed a held-out problem"))
    cands = bench.grid(logprobs=False)
    assert len(cands) == 4 * 2 * 3  # k x T x grounding; no confidence without logprobs
    pick, rows = bench.choose(sets, cands)
    assert [r["label"] for r in rows] == [bench.candidate_label(c) for c in cands]
    feasible = [r for r in rows if r["feasible"]]
    assert feasible and pick is not None  # the synthetic chains settle: some rule loses nothing
    best = min(feasible, key=lambda r: r["mean_token_ratio"])
    assert bench.candidate_label(pick) == best["label"]
    assert all(r["feasible"] and r["accuracy_delta"] >= 0 for r in best["calibration"].values())
    assert all(not r["feasible"] for r in rows if any(c["accuracy_delta"] < 0 for c in r["calibration"].values()))


def test_cli_writes_the_report(bench, tmp_path, monkeypatch, capsys):
    paths = [str(write_synth(tmp_path / f"t{i}.jsonl", 16, seed=i, samples=4, probed=3, interval=32,
                             mean_tokens=300, max_tokens=512)) for i in range(2)]
    out = tmp_path / "r.json"
    monkeypatch.setattr("sys.argv", ["cot_default.py", "--traces", *paths, "--json", str(out), "--reps", "50"])
    bench.main()
    r = json.loads(out.read_text())
    assert r["traces"] == paths and len(r["grid"]) == r["candidates"]
    held = r["heldout"]["current-default"]
    assert held["label"].startswith("(boxed() | stated(answer) & vote(") and set(held) == {"label", *paths}
    assert {"ci95", "accuracy", "problems"} <= set(held[paths[0]])
    assert "pick:" in capsys.readouterr().out


def test_reserved_rows_are_refused(bench):
    from certa.eval.errors import DatasetError
    from certa.eval.traces import parse_trace_line
    chains = synth_traces(6, seed=0, samples=4, probed=3, interval=32, mean_tokens=300, max_tokens=512)
    lines = [json.loads(p.model_dump_json(exclude_none=True)) for p in chains]
    probs = [parse_trace_line(json.dumps({**x, "idx": 800 + i, "dataset": "gsm8k"}))  # GSM8K idx >= 800: reserved
             for i, x in enumerate(lines)]
    with pytest.raises(DatasetError, match="reserved"):
        bench.TraceSet("reserved", probs, 0.5, 0)

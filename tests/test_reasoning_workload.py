"""Reasoning-length simulator workloads (issue 19): lengths follow the trace files, arrivals' CV,
seeds reproducible, the KV-limited presets, the tree (MCTS-like) program kind."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from certa.eval.traces import Probe, Sample, TraceProblem
from certa.runtime.errors import ConfigError
from certa.runtime.sim.engine import EngineConfig
from certa.runtime.sim.presets import H200, PRESETS, QWEN_7B, estimated, get_preset
from certa.simulation.reasoning_workload import (REASONING_DIR, AgreementProfile, agreement_profile, expand,
                                                 gamma_arrivals, load_reasoning, reasoning_workload)
from certa.simulation.regimes import REGIMES, Regime
from certa.simulation.simulator import simulate
from certa.simulation.synth import synth_traces
from certa.simulation.workload import ProgramConfig

PROFILE = AgreementProfile(right=(0.8,), wrong=(0.25,), source="test")
PHI = REASONING_DIR / "Phi-4-mini-reasoning_gsm8k.jsonl.gz"


def _chain(idx: int = 0, tokens: int = 2000, correct: bool = True) -> TraceProblem:
    probes = [Probe(at=32, answer=""), Probe(at=64, answer="17"), Probe(at=96, answer="18")]
    return TraceProblem(idx=idx, gold="18", model="m", interval=32, samples=[
        Sample(tokens=tokens, pred="18" if correct else "17", correct=correct, probes=probes)])


def test_sc_expansion_keeps_the_real_chain_and_draws_lognormal_lengths_around_it():
    p = expand(_chain(tokens=2000), "sc", k=4001, profile=PROFILE, seed=1, sigma=0.35)
    assert p.idx == "0/sc" and len(p.samples) == 4001 and p.samples[0] == _chain().samples[0]
    logs = [math.log(s.tokens / 2000) for s in p.samples[1:]]
    assert abs(statistics.fmean(logs)) < 0.03 and abs(statistics.pstdev(logs) - 0.35) < 0.02
    agree = statistics.fmean(s.pred == "18" for s in p.samples[1:])
    assert abs(agree - 0.8) < 0.03  # q from the profile (first sample right)
    assert {s.pred for s in p.samples[1:]} <= {"18", "17"}  # alternatives: the chain's own probe answers
    assert all(s.correct == (s.pred == "18") for s in p.samples)


def test_wrong_chain_alternatives_include_the_gold_and_long_samples_are_unfinished():
    p = expand(_chain(tokens=2000, correct=False), "sc", k=2000, profile=PROFILE, seed=0, max_tokens=2100)
    drawn = p.samples[1:]
    assert 0.2 < statistics.fmean(s.pred == "17" for s in drawn if s.finished) < 0.32
    assert any(s.pred == "18" and s.correct for s in drawn)
    long = [s for s in drawn if not s.finished]
    assert long and all(s.tokens == 2100 and s.pred is None and not s.correct for s in long)


def test_tree_expansion_is_short_expansions():
    p = expand(_chain(tokens=2000), "tree", k=400, profile=PROFILE, seed=0, depth=4)
    assert p.idx == "0/tree" and len(p.samples) == 400
    assert 400 < statistics.median(s.tokens for s in p.samples) < 600  # chain / depth


def test_expansion_is_seeded():
    a = expand(_chain(), "sc", k=16, profile=PROFILE, seed=3)
    assert a == expand(_chain(), "sc", k=16, profile=PROFILE, seed=3)
    assert a != expand(_chain(), "sc", k=16, profile=PROFILE, seed=4)
    with pytest.raises(ConfigError):
        expand(_chain(), "sc", k=0, profile=PROFILE)


def test_expanded_lengths_follow_the_trace_file():
    problems = load_reasoning([PHI], limit=120)
    assert all(str(p.idx).startswith("Phi-4-mini-reasoning_gsm8k:") for p in problems)
    chains = [p.samples[0].tokens for p in problems]
    drawn = [s.tokens for p in problems for s in expand(p, "sc", k=16, profile=PROFILE, seed=0).samples[1:]]
    assert abs(statistics.median(drawn) / statistics.median(chains) - 1) < 0.1
    assert abs(statistics.fmean(map(math.log, drawn)) - statistics.fmean(map(math.log, chains))) < 0.05


def test_agreement_profile_is_measured_per_first_sample_correctness():
    prof = agreement_profile(synth_traces(30, seed=0))
    assert len(prof.right) + len(prof.wrong) == 30
    assert statistics.fmean(prof.right) > statistics.fmean(prof.wrong)
    assert agreement_profile([_chain()]).right == ()  # one sample per problem: nothing to measure


@pytest.mark.parametrize("cv", [1.0, 2.0, 3.0, 4.0])
def test_gamma_arrivals_have_the_requested_mean_and_cv(cv):
    t = gamma_arrivals(0.5, 40_000, cv, random.Random(0))
    gaps = [b - a for a, b in zip([0.0, *t], t)]
    mean = statistics.fmean(gaps)
    assert abs(mean / 2.0 - 1) < 0.06 and abs(statistics.pstdev(gaps) / mean / cv - 1) < 0.1
    with pytest.raises(ConfigError):
        gamma_arrivals(0.5, 3, 0.0, random.Random(0))


def test_reasoning_workload_is_seeded_and_rates_move_only_arrivals():
    problems = [_chain(i, 1000 + 100 * i) for i in range(6)]
    kw = dict(n=60, seed=2, mix={"sc": 0.5, "cot": 0.3, "tree": 0.2}, arrival="gamma", cv=3.0, profile=PROFILE)
    a, b = reasoning_workload(problems, rate=0.1, **kw), reasoning_workload(problems, rate=0.1, **kw)
    assert a == b
    c = reasoning_workload(problems, rate=0.2, **kw)
    assert [(s.pid, s.problem) for s in a] == [(s.pid, s.problem) for s in c]
    assert all(abs(x.arrival - 2 * y.arrival) < 1e-6 * x.arrival for x, y in zip(a, c))
    kinds = {s.kind for s in a}
    assert kinds == {"sc", "cot", "tree"}
    assert all(s.problem in problems for s in a if s.kind == "cot")  # CoT replays the real chain
    assert all(str(s.problem.idx).endswith("/" + s.kind) for s in a if s.kind != "cot")
    d = reasoning_workload(problems, rate=0.1, **{**kw, "seed": 3})
    assert [s.arrival for s in d] != [s.arrival for s in a]
    with pytest.raises(ConfigError):
        reasoning_workload(problems, rate=0.1, n=3, mix={"mcts": 1.0}, profile=PROFILE)
    with pytest.raises(ConfigError):
        reasoning_workload(problems, rate=0.1, n=3)  # SC expansion without a profile


def test_tree_and_sc_programs_run_on_the_simulator():
    problems = [_chain(i, 400 + 50 * i) for i in range(3)]
    specs = reasoning_workload(problems, n=6, rate=0.5, seed=0, mix={"sc": 0.5, "tree": 0.5}, profile=PROFILE)
    pre = get_preset("a10-r1-distill-qwen-7b")
    res = simulate(specs, "certa", EngineConfig(pre.kv_capacity), pre.cost,
                   config=ProgramConfig(max_tokens=32768), early_exit=False)
    by = {r.pid: r for r in res.records}
    for s in specs:  # without early exit every program runs its 16 samples
        assert by[s.pid].requests == 16 and by[s.pid].tokens == sum(x.tokens for x in s.problem.samples)


def test_spec_derived_presets_reproduce_the_h200_preset_and_are_kv_limited():
    again = estimated("x", H200, QWEN_7B, params_b=7.62, gemm_flops=989e12)
    ref = get_preset("h200-r1-distill-qwen-7b")
    for f in ("a", "b", "c", "d"):
        assert abs(getattr(again.cost, f) / getattr(ref.cost, f) - 1) < 0.05, f
    assert abs(again.kv_capacity / ref.kv_capacity - 1) < 0.05
    for name in ("a10-r1-distill-qwen-7b", "h100-r1-distill-qwen-32b-fp8"):
        p = PRESETS[name]
        assert p.source == "estimate" and p.estimate and "ESTIMATE" in p.note
        assert p.kv_capacity < 0.1 * ref.kv_capacity  # a few dozen reasoning chains fill it
    assert PRESETS["a10-r1-distill-qwen-7b"].kv_capacity == 68_000


def test_regimes_name_existing_files_and_one_tuning_regime():
    assert sum(r.role == "tune" for r in REGIMES) == 1
    for r in REGIMES:
        assert all(f.is_file() for f in r.files()), r.name
        get_preset(r.preset)
    assert Regime("x", "a10-r1-distill-qwen-7b", ("nope.jsonl.gz",)).files()[0].name == "nope.jsonl.gz"


@pytest.mark.parametrize("module", ["certa.simulation.reasoning_workload", "certa.simulation.regimes",
                                    "certa.simulation.seed_spread"])
def test_docstring_examples_run(module):
    import doctest
    import importlib
    res = doctest.testmod(importlib.import_module(module))
    assert res.failed == 0 and res.attempted > 0


def test_online_slo_reasoning_writes_the_regime_table_json_and_plot(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    pytest.importorskip("matplotlib")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "online_slo.py"
    spec = importlib.util.spec_from_file_location("online_slo_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rc = bench.main(["--workload", "reasoning", "--regimes", "0", "--n-programs", "12", "--quick",
                     "--policies", "fcfs,app-fifo,certa", "--out", str(tmp_path)])
    assert rc == 0
    rep = json.loads((tmp_path / "online_slo_reasoning.json").read_text())
    (res,) = rep["regimes"]
    assert res["simulator"] and res["preset"]["source"] == "estimate" and res["workload"]["programs"] == 12
    assert set(res["modes"]) == {"all", "system"}
    for m in res["modes"].values():
        assert set(m["max_rate"]) == {"fcfs", "app-fifo", "certa"} and "max_rate certa/fcfs" in m["ratios"]
        assert all(len(a) == len(res["rates"]) for a in m["attainment"].values())
        assert m["latency_cdf"]["certa"][-1][1] == 1.0
    assert res["workload"]["slo_scale"] >= 3.0 and "| 0 |" in rep["table"]
    assert Path(res["plot"]).is_file()
    # --quick repeats the certa/fcfs comparison over 2 seeds; seed 0 is the regime run itself
    (spread,) = rep["seed_spread"]
    assert [r["seed"] for r in spread["per_seed"]] == [0, 1] and spread["rate"] == res["fixed_rate"]
    zero, ratios = spread["per_seed"][0], res["modes"]["all"]["ratios"]
    assert zero["mean_latency"] != 1.0  # a comparison that can fail
    assert zero["mean_latency"] == pytest.approx(ratios["mean_latency certa/fcfs"], abs=1e-3)
    assert zero["throughput"] == pytest.approx(ratios["throughput certa/fcfs"], abs=1e-3)
    assert zero["throughput_span"] == pytest.approx(ratios["throughput_span certa/fcfs"], abs=1e-3)
    assert "| 0 |" in rep["seed_table"] and Path(rep["seed_plot"]).is_file()
    assert (tmp_path / "regime_0_seeds.json").is_file()


def test_seed_spread_summary_counts_seeds_outside_the_bound():
    from certa.simulation.seed_spread import summarize_ratios

    thr = summarize_ratios([0.95, 1.0, 1.05, 0.99], "throughput")
    assert thr["mean"] == pytest.approx(0.9975) and thr["min"] == 0.95 and thr["outside_bound"] == 1
    assert thr["ci95"][0] <= thr["mean"] <= thr["ci95"][1]
    assert summarize_ratios([1.02, 1.04], "mean_latency")["outside_bound"] == 1  # latency: above 1.03 is worse
    assert "outside_bound" not in summarize_ratios([0.5], "tokens")

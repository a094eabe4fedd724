"""The serving simulator: cost model, engine, virtual clock, simulated backend, fit, traces, workloads, metrics."""

from __future__ import annotations

import json
import math
import random

import pytest

from certa.eval.errors import TraceFormatError
from certa.runtime.errors import ConfigError
from certa.algorithms.signals import entropy_certainty
from certa.eval.replay_backend import estimate_probe_tokens
from certa.eval.traces import Probe, Sample, TraceProblem, load_traces
from certa.runtime import Knob, Program
from certa.runtime.sim.clock import VirtualClockLoop, run_virtual
from certa.runtime.sim.cost_model import CostModel, IterationRecord, RecordWriter, load_records, prefill_pairs
from certa.runtime.sim.engine import EngineConfig, SimEngine, SimRequest
from certa.runtime.sim.fit import fit_cost_model, validate
from certa.runtime.sim.metrics import attainment, max_rate_at, percentile, summarize
from certa.runtime.sim.presets import PRESETS, get_preset
from certa.simulation.programs import make_program
from certa.simulation.simulator import simulate, standalone_latency
from certa.simulation.synth import synth_traces, write_synth
from certa.simulation.workload import ProgramConfig, ProgramSpec, make_workload, poisson_arrivals

COST = CostModel(a=0.01, b=0.001, c=1e-5, d=1e-7)


def drain(eng: SimEngine, now: float = 0.0, check=None) -> float:
    while not eng.idle:
        now, _ = eng.step(now)
        if check:
            check(eng)
    return now


# ---- cost model -----------------------------------------------------------------------
def test_cost_model_arithmetic():
    m = CostModel(a=1.0, b=2.0, c=3.0, d=4.0, o=0.5)
    assert m.iteration_time(10, 100, 1000) == 1 + 0.5 + 20 + 300 + 4000
    small = CostModel(a=0.0, b=1.0, c=0.0, d=0.0, b_small=0.5, small_n=4)
    assert small.iteration_time(4, 0, 0) == 2.0 and small.iteration_time(5, 0, 0) == 5.0
    assert prefill_pairs(new=100, cached=0) == 5000.0 and prefill_pairs(new=10, cached=90) == 950.0
    with pytest.raises(ConfigError):
        CostModel(a=-1.0, b=0.0, c=0.0, d=0.0)


def test_presets_are_labelled_estimates():
    assert {"h100-llama-3.1-8b", "h200-llama-3.1-8b", "h100-r1-distill-qwen-7b", "h200-r1-distill-qwen-7b"} <= set(PRESETS)
    for p in PRESETS.values():  # fitted presets still say which terms are estimates
        assert p.estimate == (p.source == "estimate") and "ESTIMATE" in p.note
    assert not get_preset("a100-llama-3.1-8b").estimate and "FITTED" in get_preset("a100-llama-3.1-8b").note
    p = get_preset("h100-llama-3.1-8b")  # serving notes: bs=256 at 1,152 context ≈ 27 ms per step
    assert 0.025 < p.cost.iteration_time(256, 256 * 1152, 0) < 0.029
    with pytest.raises(ConfigError):
        get_preset("tpu")


# ---- engine ---------------------------------------------------------------------------
def test_single_request_timing_matches_hand_computation():
    for record in (False, True):
        eng = SimEngine(EngineConfig(kv_capacity=10_000, reserve_ratio=0.0), COST, record=record)
        eng.add(SimRequest("r", "p", prompt=100, output=5))
        end = drain(eng)
        prefill = 0.01 + 0.001 * 100 + 1e-7 * 5000  # one prefill iteration emits the first token
        decode = sum(0.01 + 0.001 + 1e-5 * k for k in (101, 102, 103, 104))
        assert end == pytest.approx(prefill + decode, rel=1e-12)
        assert eng.stats.iterations == 5 and eng.kv_used == 0
    assert [r.kv_read for r in eng.stats.records] == [0, 101, 102, 103, 104]


def test_continuous_batching_joins_at_iteration_boundaries():
    eng = SimEngine(EngineConfig(kv_capacity=10_000, reserve_ratio=0.0), COST, record=True)
    a, b = SimRequest("a", "pa", prompt=10, output=50), SimRequest("b", "pb", prompt=10, output=20)
    eng.add(a)
    now, done = eng.step(0.0)  # prefill a
    now, done = eng.step(now, until=now + 0.1)  # decode a until just past +0.1 s
    assert not done and 5 < a.generated < 50
    eng.add(b, now)
    end = drain(eng, now)
    assert b.admitted_at == pytest.approx(now) and b.finished_at < a.finished_at
    assert any(r.n_decode == 2 for r in eng.stats.records)  # a and b decoded in the same iteration
    sequential = 0.0
    for r in (SimRequest("a", "pa", prompt=10, output=50), SimRequest("b", "pb", prompt=10, output=20)):
        alone = SimEngine(EngineConfig(kv_capacity=10_000, reserve_ratio=0.0), COST)
        alone.add(r)
        sequential += drain(alone)
    assert end < sequential - 15 * 0.01  # b's decodes rode along a's iterations


def test_kv_capacity_forces_preemption_and_recompute():
    cfg = EngineConfig(kv_capacity=300, reserve_ratio=0.0)
    eng = SimEngine(cfg, COST)
    reqs = [SimRequest(f"r{i}", f"p{i}", prompt=50, output=200) for i in range(2)]
    for r in reqs:
        eng.add(r)

    def check(e: SimEngine) -> None:
        assert e.kv_used <= cfg.kv_capacity

    drain(eng, check=check)
    assert all(r.finished_at is not None and r.generated == 200 for r in reqs)
    assert eng.stats.preemptions >= 1 and sum(r.preemptions for r in reqs) == eng.stats.preemptions
    assert eng.stats.prefill_tokens > 100  # the retracted request recomputed its context


def test_prefix_cache_sharing_and_idle_eviction():
    eng = SimEngine(EngineConfig(kv_capacity=1_000, reserve_ratio=0.0), COST)
    for i in range(2):
        eng.add(SimRequest(f"p{i}", "p", prompt=300, output=10, shared=300))
    drain(eng)
    assert eng.stats.cached_tokens == 300 and eng.stats.prefill_tokens == 300  # computed once
    assert eng.kv_used == 300  # the idle program's prefix stays cached
    eng.add(SimRequest("q", "q", prompt=800, output=10, shared=800))
    drain(eng)
    assert eng.stats.evictions == 1 and eng.prefix["p"] == 0
    eng.drop_program("q")
    assert eng.kv_used == 0


def test_abort_frees_kv_at_once():
    eng = SimEngine(EngineConfig(kv_capacity=10_000, reserve_ratio=0.0), COST)
    r = SimRequest("r", "p", prompt=100, output=1000)
    eng.add(r)
    eng.step(0.0)
    eng.step(0.0, until=0.05)
    assert eng.kv_used > 100
    eng.abort(r)
    eng.drop_program("p")
    assert eng.kv_used == 0 and eng.idle


# ---- fit and validate -----------------------------------------------------------------
def test_fit_recovers_known_coefficients_from_noisy_records():
    true = CostModel(a=6e-3, b=2e-5, c=4e-8, d=1e-9)
    rng = random.Random(0)
    recs = []
    for _ in range(300):
        n_dec = rng.randint(1, 256)
        pre = rng.choice([0, 0, 0, rng.randint(16, 4096)])
        n, k, p = n_dec + pre, n_dec * rng.randint(100, 4000), prefill_pairs(pre, rng.randint(0, 2000))
        recs.append(IterationRecord(n, k, p, true.iteration_time(n, k, p) * (1 + rng.gauss(0, 0.01))))
    fit = fit_cost_model(recs)
    for name in "abcd":
        assert getattr(fit.model, name) == pytest.approx(getattr(true, name), rel=0.05), name
    assert fit.mape < 0.02


def test_fit_recovers_the_simulators_own_iterations():
    cost = CostModel(a=5e-3, b=2e-5, c=3e-8, d=1.2e-9)
    specs = make_workload(synth_traces(4, seed=2, samples=4, mean_tokens=200), n=6, rate=2.0, seed=0)
    res = simulate(specs, "fcfs", EngineConfig(100_000), cost, config=ProgramConfig(fanout=4, budget=4), record=True)
    fit = fit_cost_model(res.stats.records)
    assert fit.mape < 1e-6
    for name in "abcd":
        assert getattr(fit.model, name) == pytest.approx(getattr(cost, name), rel=1e-3)
    with pytest.raises(ConfigError):
        fit_cost_model(res.stats.records[:3])


def test_the_tile_term_charges_tokens_past_the_last_whole_tile():
    m = CostModel(a=0.04, b=0.015, c=0.0, d=0.0, r=0.02, tile=4)
    t = [m.iteration_time(n, 0, 0.0) for n in (3, 4, 5, 8)]
    assert t[0] > t[1]  # three decodes cost more than four: the remainder takes the slow path
    assert t[1] == pytest.approx(0.04 + 4 * 0.015) and t[2] == pytest.approx(0.04 + 5 * 0.015 + 0.02)
    assert CostModel(a=0.04, b=0.015, c=0.0, d=0.0).iteration_time(3, 0, 0.0) == pytest.approx(0.085)
    with pytest.raises(ConfigError):
        CostModel(a=0.0, b=0.0, c=0.0, d=0.0, r=-1e-3)


def test_fit_with_a_tile_recovers_the_remainder_cost_the_linear_fit_cannot():
    true = CostModel(a=2e-2, b=1.5e-2, c=3e-5, d=1e-6, r=2.5e-2, tile=4)
    rng = random.Random(1)
    recs = []
    for _ in range(400):
        n = rng.randint(1, 16)
        k = n * rng.randint(50, 900)
        recs.append(IterationRecord(n, k, 0.0, 0.0, n, 0, wall_seconds=true.iteration_time(n, k, 0.0)
                                    * (1 + rng.gauss(0, 0.01))))
    for n in (40, 200, 480):
        recs.append(IterationRecord(n, 0, prefill_pairs(n, 0), 0.0, 0, 1,
                                    wall_seconds=true.iteration_time(n, 0, prefill_pairs(n, 0))))
    tiled = fit_cost_model(recs, target="wall_seconds", tile=4)
    assert tiled.model.tile == 4 and tiled.model.r == pytest.approx(true.r, rel=0.05)
    assert tiled.mape < 0.02
    assert fit_cost_model(recs, target="wall_seconds").mape > 3 * tiled.mape
    with pytest.raises(ConfigError, match="wall_seconds"):  # forward-pass-only records cannot give wall times
        fit_cost_model([IterationRecord(1, 10, 0.0, 0.01)] * 4, target="wall_seconds")


def test_validate_reports_median_relative_error():
    rep = validate({"a": 11.0, "b": 8.0, "c": 30.0, "x": 1.0}, {"a": 10.0, "b": 10.0, "c": 30.0, "y": 2.0})
    assert rep.n == 3 and rep.median_rel_err == pytest.approx(0.1) and rep.missing == ("x", "y")
    with pytest.raises(ConfigError):
        validate({"a": 1.0}, {"b": 1.0})


def test_iteration_records_jsonl_roundtrip(tmp_path):
    path = tmp_path / "iters.jsonl"
    with RecordWriter(path, source="test") as log:
        log.write(n_tokens=8, kv_read=4000, prefill_pairs=0.0, seconds=0.061, n_decode=8)
        log.write(IterationRecord(100, 0, 5000.0, 0.2, n_prefill=1))
    recs = load_records(path)
    assert recs[0] == IterationRecord(8, 4000, 0.0, 0.061, 8, 0, "test") and recs[1].n_prefill == 1
    path.write_text('{"n_tokens": 1, "kv_read": 2}\n')
    with pytest.raises(ConfigError, match="iters.jsonl:1"):
        load_records(path)


# ---- traces ---------------------------------------------------------------------------
def test_trace_roundtrip_and_validation(tmp_path):
    path = write_synth(tmp_path / "t.jsonl", 5, seed=3, samples=4)
    probs = load_traces(path)
    assert probs == synth_traces(5, seed=3, samples=4) and len(probs[0].samples) == 4
    good = path.read_text().splitlines()[0]
    bad_lines = {
        "not json": "CT304",
        '["a list"]': "expected a JSON object",
        '{"idx": 1, "samples": []}': "samples",
        '{"idx": 1, "samples": [{"tokens": -3}]}': "samples.0.tokens",
        '{"samples": [{"tokens": 3}]}': "idx",
    }
    for line, msg in bad_lines.items():
        (tmp_path / "bad.jsonl").write_text(good + "\n" + line + "\n")
        with pytest.raises(TraceFormatError, match="bad.jsonl:2") as err:
            load_traces(tmp_path / "bad.jsonl")
        assert msg in str(err.value)
    with pytest.raises(TraceFormatError):
        load_traces(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TraceFormatError):
        load_traces(tmp_path / "empty.jsonl")


# ---- workloads ------------------------------------------------------------------------
def sample(pred: str, tokens: int = 300, probes: list[tuple[int, str]] = ()) -> Sample:
    return Sample(tokens=tokens, finished=True, pred=pred, correct=pred == "3",
                  probes=[Probe(at=a, answer=x) for a, x in probes])


def run_one(problem: TraceProblem, kind: str, early_exit: bool, **cfg):
    spec = ProgramSpec("x", 0.0, problem, kind)  # type: ignore[arg-type]
    res = simulate([spec], "certa", EngineConfig(100_000), COST, config=ProgramConfig(**cfg), early_exit=early_exit)
    return res.records[0]


def test_sc_replay_takes_the_real_certaindex_decision():
    agree = TraceProblem(idx=0, gold="3", samples=[sample("3") for _ in range(8)])
    rec = run_one(agree, "sc", True, fanout=2, budget=8, tau=0.55, detect_at=4)
    assert rec.exit_reason == "certaindex" and rec.knob_used == 4 and rec.correct
    assert 4 * 300 <= rec.main_tokens < 6 * 300  # 4 answers + the partial in-flight samples aborted
    full = run_one(agree, "sc", False, fanout=2, budget=8)
    assert full.exit_reason == "cap" and full.knob_used == 8 and full.main_tokens == 8 * 300
    split = TraceProblem(idx=1, gold="3", samples=[sample(str(i % 4)) for i in range(8)])
    assert run_one(split, "sc", True, fanout=2, budget=8, tau=0.55, detect_at=4).exit_reason == "cap"


def test_cot_replay_exits_on_consistent_probes():
    probes = [(64, ""), (128, "wait 9"), (192, "3"), (256, "3"), (320, "3"), (384, "3")]
    prob = TraceProblem(idx=0, gold="3", interval=64, samples=[sample("3", tokens=1000, probes=probes)])
    rec = run_one(prob, "cot", True, window=3)
    assert rec.exit_reason == "certaindex" and rec.main_tokens == 320 and rec.correct
    # five probes, each costing what the replay backend charges for its recorded answer
    assert rec.tokens == 320 + sum(estimate_probe_tokens(a) for _, a in probes[:5])
    base = run_one(prob, "cot", False)
    assert base.exit_reason == "done" and base.main_tokens == 1000 and base.requests == 1


def test_cot_probe_decision_uses_math_equal():
    # "0.5", "\\frac{1}{2}" and "1/2" are one answer: the old string compare never exited here
    probes = [(64, "0.5"), (128, "\\frac{1}{2}"), (192, "1/2"), (256, "7"), (320, "7")]
    prob = TraceProblem(idx=0, gold="\\frac{1}{2}", interval=64,
                        samples=[Sample(tokens=400, finished=True, pred="7", correct=False,
                                        probes=[Probe(at=a, answer=x) for a, x in probes])])
    rec = run_one(prob, "cot", True, window=3)
    assert rec.exit_reason == "certaindex" and rec.main_tokens == 192
    assert rec.correct  # the probe answer "1/2" is graded against the gold with math_equal


def test_poisson_arrivals_and_workloads_are_seeded():
    rng = random.Random(1)
    times = poisson_arrivals(2.0, 2000, rng)
    assert all(b > a for a, b in zip(times, times[1:]))
    assert 1.8 < 2000 / times[-1] < 2.2
    probs = synth_traces(5, seed=0, samples=4)
    w1 = make_workload(probs, n=20, rate=1.0, seed=4, kind="mix")
    assert w1 == make_workload(probs, n=20, rate=1.0, seed=4, kind="mix")
    assert {s.kind for s in w1} == {"sc", "cot"}
    with pytest.raises(ConfigError):
        poisson_arrivals(0.0, 3, rng)


def test_simulation_is_deterministic_and_early_exit_saves_tokens():
    pre = get_preset("h200-r1-distill-qwen-7b")
    specs = make_workload(synth_traces(10, seed=5), n=25, rate=0.5, seed=5)
    eng = EngineConfig(pre.kv_capacity)
    a = simulate(specs, "certa", eng, pre.cost, early_exit=True)
    assert a.records == simulate(specs, "certa", eng, pre.cost, early_exit=True).records
    base = simulate(specs, "fcfs", eng, pre.cost, early_exit=False)
    assert len(base.records) == len(a.records) == 25
    assert sum(r.tokens for r in a.records) < 0.8 * sum(r.tokens for r in base.records)
    assert standalone_latency(specs[0], eng, pre.cost) > 0


# ---- metrics --------------------------------------------------------------------------
def test_metrics():
    assert percentile([5.0], 90) == 5.0 and math.isnan(percentile([], 50))
    assert max_rate_at([1, 2, 4], [0.95, 0.91, 0.92]) == 4
    assert max_rate_at([1, 2], [0.5, 0.2]) is None
    assert max_rate_at([1, 2, 3], [1.0, 0.8, 0.95]) == pytest.approx(1.5)  # first crossing counts
    pre = get_preset("h200-r1-distill-qwen-7b")
    specs = [s for s in make_workload(synth_traces(4, seed=0), n=8, rate=0.5, seed=0)]
    res = simulate(specs, "fcfs", EngineConfig(pre.kv_capacity), pre.cost, early_exit=False)
    out = summarize(res.records)
    assert out["n"] == 8 and out["attainment"] == 1.0  # no deadlines: all met
    assert out["latency"]["p90"] >= out["latency"]["p50"] and out["fairness"]["cdf"][-1][1] == 1.0
    assert json.dumps(out)
    assert attainment([]) != attainment([])  # NaN for no records


# ---- sweep and CLI ----------------------------------------------------------------------
def test_sweep_reports_max_rates_ratios_and_slo_scales():
    from certa.simulation.sweep import SweepSpec, run_sweep
    spec = SweepSpec(policies=["fcfs", "app-fifo", "certa"], n_programs=20, rates=[0.05, 0.2, 0.8, 3.2],
                     rate_scales=[5.0], refine=1)
    out = run_sweep(synth_traces(8, seed=0, samples=8), spec)
    assert out["simulator"] and out["preset"]["estimate"]
    assert set(out["max_rate"]) == {"fcfs", "app-fifo", "certa"} and set(out["max_rate_by_scale"]) == {"3.0", "5.0"}
    assert all(len(rows) == 4 for rows in out["rate_sweep"].values())
    assert out["max_rate"]["certa"] >= out["max_rate"]["fcfs"] > 0
    assert out["ratios"]["certa/fcfs"] == pytest.approx(out["max_rate"]["certa"] / out["max_rate"]["fcfs"], rel=1e-3)
    assert out["slo_sweep"]["min_scale"]["certa"] <= out["slo_sweep"]["min_scale"]["fcfs"]
    with pytest.raises(ConfigError):
        run_sweep(synth_traces(2, seed=0), SweepSpec(policies=["nope"]))


def test_kv_admission_scales_only_the_gang_policies_kv_budget(monkeypatch):
    import certa.simulation.sweep as sweep
    seen: dict[str, object] = {}

    def spy(specs, policy, engine, cost, *, limits=None, **kw):
        seen[policy] = limits
        return real(specs, policy, engine, cost, limits=limits, **kw)

    real = sweep.simulate
    monkeypatch.setattr(sweep, "simulate", spy)
    spec = sweep.SweepSpec(policies=["fcfs", "certa"], n_programs=4, kv_admission=2.0)
    exp = sweep.Experiment(synth_traces(2, seed=0, samples=4), spec)
    exp.run("fcfs", 0.1)
    exp.run("certa", 0.1)
    assert seen["fcfs"] is None  # request-level policies pass everything to the engine, as SGLang does
    assert seen["certa"].kv_tokens == 2 * exp.engine.kv_capacity
    assert seen["certa"].max_requests == exp.engine.max_running
    with pytest.raises(ConfigError):
        sweep.SweepSpec(kv_admission=0.0).check()


def test_the_simulated_engine_stamps_each_request_with_the_schedulers_program_state():
    from certa.runtime.scheduling.policies import CertaSJF

    class Spy(CertaSJF):
        def __init__(self) -> None:
            super().__init__()
            self.stamped: list[tuple[str, str, int]] = []

        def stamp(self, ticket) -> None:
            super().stamp(ticket)
            self.stamped.append((ticket.rid, ticket.program.program_id, ticket.program.knob_used))

    pol = Spy()
    pre = get_preset("h100-llama-3.1-8b")
    specs = make_workload(synth_traces(3, seed=0, samples=8), n=3, rate=0.5, seed=0)
    res = simulate(specs, pol, EngineConfig(pre.kv_capacity), pre.cost, config=ProgramConfig(fanout=2, budget=8))
    # every request, once, as it reaches the engine (lanes aborted at a stop included: not in `requests`)
    assert len({rid for rid, _, _ in pol.stamped}) == len(pol.stamped) >= sum(r.requests for r in res.records)
    assert {pid for _, pid, _ in pol.stamped} == {r.pid for r in res.records}  # the scheduler's ProgramInfo
    assert any(knob > 0 for _, _, knob in pol.stamped)  # lanes that continue see the program's progress


def test_cli_simulate_and_fit(tmp_path):
    from typer.testing import CliRunner

    from certa.cli.sim import app
    runner = CliRunner()
    traces = write_synth(tmp_path / "t.jsonl", 6, seed=1, samples=8)
    res = runner.invoke(app, ["simulate", "--workload", str(traces), "--policies", "fcfs,certa", "--n-programs", "10",
                              "--rates", "0.05,0.4", "--refine", "0", "--json", str(tmp_path / "o.json")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "o.json").read_text())
    assert data["workload"]["source"] == str(traces) and "certa/fcfs" in data["ratios"]
    (tmp_path / "bad.jsonl").write_text('{"idx": 1}\n')
    res = runner.invoke(app, ["simulate", "--workload", str(tmp_path / "bad.jsonl")])
    assert res.exit_code == 2 and "CT304" in res.output and "bad.jsonl:1" in res.output
    recs = tmp_path / "iters.jsonl"
    with RecordWriter(recs) as log:
        for n, k, p in [(1, 100, 0), (8, 4000, 0), (64, 0, 2e5), (16, 9000, 0), (128, 0, 9e5), (32, 500, 1e4)]:
            log.write(n_tokens=n, kv_read=k, prefill_pairs=p, seconds=COST.iteration_time(n, k, p))
    res = runner.invoke(app, ["fit", str(recs), "--json", str(tmp_path / "fit.json")])
    assert res.exit_code == 0 and "MAPE 0.0%" in res.output
    assert json.loads((tmp_path / "fit.json").read_text())["model"]["a"] == pytest.approx(COST.a)
    res = runner.invoke(app, ["fit", str(recs), "--wall"])  # these records carry no whole-iteration times
    assert res.exit_code == 2 and "CT300" in res.output and "wall_seconds" in res.output
    tiled = CostModel(a=0.02, b=0.015, c=1e-5, d=0.0, r=0.03, tile=4)
    with RecordWriter(tmp_path / "wall.jsonl") as log:
        for n, k in [(1, 100), (2, 300), (3, 500), (4, 900), (5, 700), (7, 2000), (8, 1600), (13, 5000)]:
            log.write(n_tokens=n, kv_read=k, prefill_pairs=0.0, seconds=0.01, wall_seconds=tiled.iteration_time(n, k, 0))
    res = runner.invoke(app, ["fit", str(tmp_path / "wall.jsonl"), "--wall", "--tile", "4"])
    assert res.exit_code == 0 and "r=30 ms/token past a tile of 4" in res.output and "MAPE 0.0%" in res.output


def test_sweep_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from certa.cli.sim import plot_sweep
    from certa.simulation.sweep import SweepSpec, run_sweep
    out = run_sweep(synth_traces(4, seed=0, samples=4), SweepSpec(policies=["fcfs", "certa"], n_programs=6,
                                                                 rates=[0.1, 1.0], rate_scales=[], refine=0))
    paths = plot_sweep(out, tmp_path)
    assert {p.name for p in paths} == {"attainment_vs_rate.png", "latency_vs_rate.png", "attainment_vs_slo.png",
                                       "fairness_cdf.png"}
    assert all(p.stat().st_size > 1000 for p in paths)


def test_sc_certaindex_is_the_algorithm_librarys_entropy():
    answers = ["4", "4.0", "\\frac{8}{2}", "5", "", "5", "4"]
    prob = TraceProblem(idx=0, gold="4", samples=[sample(a, tokens=100 + 10 * i) for i, a in enumerate(answers)])
    rec = run_one(prob, "sc", False, fanout=2, budget=len(answers))
    assert rec.knob_used == len(answers) and rec.exit_reason == "cap"
    prog = make_program(ProgramSpec("y", 0.0, prob), ProgramConfig(fanout=2, budget=len(answers)), early_exit=False)
    for n in range(1, len(answers) + 1):
        prog.state.answers = answers[:n]
        assert prog.update_certaindex()["agreement"] == entropy_certainty(answers[:n], same="math")
    assert entropy_certainty(answers[:3], same="math") == 1.0  # math equivalence, not string equality
    assert prog.answer() == "4"


# ---- virtual clock and the simulated backend -------------------------------------------
def test_virtual_clock_jumps_to_the_next_timer_and_runs_idle_callbacks_first():
    import asyncio
    import time

    async def main():
        loop = asyncio.get_running_loop()
        seen = []
        loop.call_when_idle(lambda: seen.append(("idle", loop.time(), loop.next_deadline())))
        t0 = time.perf_counter()
        await asyncio.gather(asyncio.sleep(5.0), asyncio.sleep(2.5))
        seen.append(("woke", loop.time()))
        await asyncio.sleep(86_400.0 * 3)  # three simulated days, beyond asyncio's longest select
        return seen, loop.time(), time.perf_counter() - t0

    seen, end, wall = run_virtual(main())
    assert seen == [("idle", 0.0, 2.5), ("woke", 5.0)]
    assert end == 5.0 + 86_400.0 * 3 and wall < 1.0
    assert isinstance(VirtualClockLoop().time(), float)

    async def deadlock():
        await asyncio.get_running_loop().create_future()

    with pytest.raises(ConfigError, match="simulation stalled"):
        run_virtual(deadlock())


def test_sim_backend_runs_real_programs_in_simulated_time_and_counts_aborted_tokens():
    from certa.eval.replay_backend import ReplayBackend
    from certa.runtime import Runtime
    from certa.runtime.scheduling.scheduler import Scheduler
    from certa.runtime.sim.backend import SimBackend

    prob = TraceProblem(idx=0, gold="3", samples=[sample("3", tokens=t) for t in (100, 200, 300, 400)])
    cost = CostModel(a=0.01, b=0.0, c=0.0, d=0.0)
    prog = make_program(ProgramSpec("p", 0.0, prob), ProgramConfig(fanout=4, budget=4, tau=0.5, detect_at=2),
                        early_exit=True)

    async def main():
        import asyncio
        loop = asyncio.get_running_loop()
        sim = SimBackend(ReplayBackend([prob]), EngineConfig(100_000), cost)
        rt = Runtime(sim, scheduler=Scheduler(clock=loop.time))
        res = await rt.run(prog)
        end = loop.time()
        await rt.run(make_program(ProgramSpec("q", 0.0, prob), ProgramConfig(budget=1), early_exit=False))
        return res, end, sim

    res, end, sim = run_virtual(main())
    # one prefill iteration (the first sample's first token; the others hit the cached prompt),
    # then all four decode one token per 0.01 s; the 200-token sample ends at iteration 201:
    # 2 answers agree, certaindex 1.0 >= 0.5, and the two samples still decoding are aborted
    assert res.exit_reason == "certaindex" and res.tokens.main == 300 and end == pytest.approx(2.01)
    assert sim.wasted[prog.program_id].main == 2 * 200 and not sim.live_rids()
    assert prog.program_id not in sim.engine.prefix  # an ended program's prefix is dropped at the next step


def test_sim_backend_also_runs_in_real_time_on_an_ordinary_loop():
    import asyncio
    import time

    from certa.runtime import Runtime
    from certa.runtime.backends.testing.scripted import ScriptedBackend
    from certa.runtime.sim.backend import SimBackend

    class Ask(Program):
        knob = Knob("iterations", cap=1)

        async def execute(self, ctx):
            self.state = (await ctx.gen("q", max_tokens=16)).text
            self.knob_used += 1
            return False

    sim = SimBackend(ScriptedBackend(responses=["a b c d e"]), EngineConfig(10_000), CostModel(0.02, 0.0, 0.0, 0.0))

    async def main():
        t0 = time.perf_counter()
        res = await Runtime(sim).run(Ask)
        return res, time.perf_counter() - t0

    res, wall = asyncio.run(main())  # no virtual clock: five iterations of 20 ms each, really waited
    assert res.state == "a b c d e" and res.tokens.main == 5 and 0.09 < wall < 5.0
    assert sim.engine.stats.iterations == 5


@pytest.mark.parametrize("module", [
    "certa.runtime.scheduling.scheduler", "certa.runtime.scheduling.policies", "certa.runtime.scheduling.admission",
    "certa.runtime.sim", "certa.runtime.sim.backend", "certa.runtime.sim.clock", "certa.runtime.sim.cost_model",
    "certa.runtime.sim.engine", "certa.runtime.sim.estimates", "certa.runtime.sim.fit", "certa.runtime.sim.metrics",
    "certa.runtime.sim.presets", "certa.simulation", "certa.simulation.programs", "certa.simulation.simulator",
    "certa.simulation.sweep", "certa.simulation.synth", "certa.eval.traces", "certa.simulation.workload",
])
def test_docstring_examples_run(module):
    import doctest
    import importlib
    res = doctest.testmod(importlib.import_module(module))
    assert res.failed == 0 and res.attempted > 0


async def test_run_virtual_works_inside_a_running_loop():
    """In Jupyter a loop is already running: the simulation runs on a thread of its own."""
    import asyncio

    from certa.runtime.sim.clock import run_virtual

    async def nap():
        await asyncio.sleep(3600)  # virtual: returns at once
        return asyncio.get_running_loop().time()

    assert run_virtual(nap(), start=10.0) == 3610.0

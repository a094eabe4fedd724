"""Trace replay: exact token accounting, seeded draw orders, real certaindex decisions, and
run_replay (the runtime's own driving loop, without an event loop) agreeing with the real
Runtime over a ReplayBackend."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest

from certa.algorithms.policies import ESC, AdaptiveConsistency, Pareto
from certa.eval.replay import ReplayCoT, ReplaySC, run_replay, sample_order
from certa.eval.replay_eval import Replayer
from certa.runtime import Runtime
from certa.eval.replay_backend import PROBE_PREFILL_TOKENS, ReplayBackend, estimate_probe_tokens
from certa.eval.errors import TraceFormatError
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Even, Length, Threshold
from certa.eval.traces import load_traces, parse_trace_line

DATA = pathlib.Path(__file__).parent / "data"


def problem(tokens, preds, correct=None, probes=None, interval=16, gold="18", idx=0):
    samples = []
    for j, (t, p) in enumerate(zip(tokens, preds)):
        s = {"tokens": t, "finished": True, "pred": p, "correct": (correct[j] if correct else p == gold),
             "text": f"\\boxed{{{p}}}"}
        if probes and j in probes:
            s["probes"] = probes[j]
        samples.append(s)
    return parse_trace_line(json.dumps({"idx": idx, "gold": gold, "model": "m", "interval": interval,
                                        "samples": samples}))


def never_cot(p):
    return lambda answer: answer == p.gold


# ---- SC ---------------------------------------------------------------------------------
def test_sc_counts_exactly_the_drawn_samples():
    p = problem([10, 20, 30, 40, 50], ["18", "18", "7", "18", "18"])
    prog = ReplaySC(p, [4, 2, 0, 1, 3], Even(3))
    assert run_replay(prog) == "budget"
    t = prog.tokens
    assert (t.main, t.probe, t.score, t.prompt, t.requests) == (50 + 30 + 10, 0, 0, 0, 3)
    assert prog.state.answers == ["18", "7", "18"] and prog.answer() == "18" and prog.is_correct()


def test_sc_threshold_decides_with_entropy_certainty_at_the_detection_step():
    p = problem([10, 20, 30, 40], ["18", "7", "18", "18"])
    # after 2 samples the answers differ (certaindex 0): no stop at the single check
    prog = ReplaySC(p, [0, 1, 2, 3], Threshold(0.5, detect_at=2))
    assert run_replay(prog) == "done" and prog.tokens.main == 100
    assert [round(pt.value, 3) for pt in prog.trajectory] == [0.0, 0.0, 0.421, 0.594]
    # checked every sample from 3 on: stops at 3 with 2 of 3 agreeing (0.42 >= 0.4)
    prog = ReplaySC(p, [0, 1, 2, 3], Threshold(0.4, detect_at=3, every=1))
    assert run_replay(prog) == "certaindex" and prog.tokens.main == 60 and prog.knob_value == 3


def test_sc_vote_correctness_comes_from_the_first_voter_in_the_trace():
    p = problem([5, 5, 5], ["18.0", "18", "7"], correct=[True, False, False])
    prog = ReplaySC(p, [1, 0, 2])
    run_replay(prog)
    assert prog.answer() == "18" and not prog.is_correct()  # "18" (first voter) is marked wrong


def test_sample_order_is_a_seeded_permutation():
    p = problem([1] * 16, ["1"] * 16)
    a, b, c = sample_order(p, 0), sample_order(p, 0), sample_order(p, 1)
    assert a == b and sorted(a) == list(range(16)) and a != c
    assert sample_order(p, 0, order=1) != a


def test_length_baseline_stops_on_total_tokens():
    p = problem([10, 20, 30, 40], ["1", "2", "3", "4"])
    prog = ReplaySC(p, [0, 1, 2, 3], Length(25))
    assert run_replay(prog) == "length" and prog.tokens.main == 30


# ---- CoT --------------------------------------------------------------------------------
def cot_problem(recorded=False):
    answers = ["", "7", "18", "18", "18", "18"]
    probes = [{"at": 16 * (i + 1), "answer": a} for i, a in enumerate(answers)]
    if recorded:
        for q in probes:
            q |= {"tokens": 9, "prompt_tokens": 25, "text": q["answer"] + "} \\]"}
    return problem([100, 60], ["18", "18"], probes={0: probes}, interval=16)


def test_cot_probe_tokens_estimated_when_not_recorded():
    p = cot_problem()
    prog = ReplayCoT(p, 0, k=2, interval=32, policy=Threshold(1.0, detect_at=1, every=1), grade=never_cot(p))
    assert run_replay(prog) == "certaindex"
    # probes at 32 ("7") and 64 ("18"), 96 ("18") -> exit at 96
    t = prog.tokens
    assert t.main == 96
    assert t.probe == estimate_probe_tokens("7") + 2 * estimate_probe_tokens("18") == 2 + 3 + 3
    assert t.prompt == 3 * PROBE_PREFILL_TOKENS  # probe prefill, apart from decode tokens
    assert t.total == 96 + 8 and prog.answer() == "18" and prog.is_correct()


def test_cot_probe_tokens_recorded_are_used():
    p = cot_problem(recorded=True)
    prog = ReplayCoT(p, 0, k=2, interval=32, policy=Threshold(1.0, detect_at=1, every=1), grade=never_cot(p))
    run_replay(prog)
    assert (prog.tokens.main, prog.tokens.probe, prog.tokens.prompt) == (96, 27, 75)


def test_cot_hesitation_in_the_probe_text_blocks_the_exit():
    p = cot_problem(recorded=True)
    data = json.loads(p.model_dump_json())
    for q in data["samples"][0]["probes"]:
        q["text"] = q["answer"] + "} wait"
    p = parse_trace_line(json.dumps(data))
    prog = ReplayCoT(p, 0, k=2, interval=32, policy=Threshold(1.0, detect_at=1, every=1), grade=never_cot(p))
    assert run_replay(prog) == "done" and prog.tokens.main == 100  # ran to its natural end
    assert prog.answer() == "18" and prog.is_correct()


def test_cot_budget_cut_answers_with_one_forced_probe():
    p = cot_problem()
    prog = ReplayCoT(p, 0, k=1, interval=48, policy=Even(48), grade=lambda a: a == "18")
    assert run_replay(prog) == "budget"
    assert (prog.tokens.main, prog.tokens.probe, prog.tokens.requests) == (48, 3, 2) and prog.is_correct()


def test_cot_missing_probe_and_bad_interval_are_clear_errors():
    p = problem([100], ["18"], probes={0: [{"at": 16, "answer": "1"}]}, interval=16)
    with pytest.raises(TraceFormatError, match="no probe at token 32"):
        Replayer([p], "cot")
    with pytest.raises(ConfigError, match="multiple of the trace interval"):
        Replayer([cot_problem()], "cot").run(None, k=2, interval=24)
    sc_only = problem([10, 20], ["1", "2"])
    with pytest.raises(TraceFormatError, match="no probed samples"):
        Replayer([sc_only], "cot")


def test_duplicate_idx_is_refused():
    p = problem([10], ["1"])
    with pytest.raises(TraceFormatError, match="twice"):
        Replayer([p, p], "sc")


# ---- replay runs the runtime's loop ----------------------------------------------------
SC_POLICIES = [None, Even(3), Threshold(0.55, detect_at=4, every=4), Threshold(1.0, detect_at=2, every=1),
               ESC(window=3), AdaptiveConsistency(0.9), Pareto([(0.0, 8), (0.5, 4)], detect_at=3), Length(300)]


@pytest.mark.parametrize("policy", SC_POLICIES, ids=lambda p: repr(p))
def test_run_replay_matches_the_real_runtime_for_sc(policy):
    problems = load_traces(DATA / "traces_tiny.jsonl")
    backend = ReplayBackend(problems)
    rt = Runtime(backend)

    async def real(prog):
        res = await rt.run(prog)
        return res.exit_reason, res.tokens.as_dict(), res.answer, [(c.knob, c.value, c.tokens) for c in res.certaindex]

    for p in problems:
        order = sample_order(p, 5)
        fast, slow = ReplaySC(p, order, policy), ReplaySC(p, order, policy)
        reason = run_replay(fast, backend)
        got = asyncio.run(real(slow))
        assert got == (reason, fast.tokens.as_dict(), fast.answer(),
                       [(c.knob, c.value, c.tokens) for c in fast.trajectory]), p.idx
        assert slow.is_correct() == fast.is_correct()


@pytest.mark.parametrize("k,interval,policy", [(2, 16, Threshold(1.0, detect_at=1, every=1)), (3, 32, None),
                                               (1, 48, Even(48)), (2, 32, Threshold(1.0, detect_at=64, every=1))])
def test_run_replay_matches_the_real_runtime_for_cot(k, interval, policy):
    problems = load_traces(DATA / "traces_tiny.jsonl")
    backend = ReplayBackend(problems)
    rt = Runtime(backend)
    for p in problems:
        judge = never_cot(p)
        fast = ReplayCoT(p, 0, k=k, interval=interval, policy=policy, grade=judge)
        slow = ReplayCoT(p, 0, k=k, interval=interval, policy=policy, grade=judge)
        reason = run_replay(fast, backend)
        res = asyncio.run(rt.run(slow))
        assert (res.exit_reason, res.tokens.as_dict(), res.answer) == (reason, fast.tokens.as_dict(), fast.answer())
        assert res.certaindex == fast.trajectory and res.knob_used == fast.knob_value
        assert slow.is_correct() == fast.is_correct()


def test_run_replay_checks_the_certaindex_range_as_the_runtime_does():
    from certa.runtime.errors import CertaindexRangeError

    class Overconfident(ReplaySC):
        def update_certaindex(self):
            return 1.5

    p = problem([10, 20], ["18", "18"])
    with pytest.raises(CertaindexRangeError, match="outside"):
        run_replay(Overconfident(p, [0, 1], Even(2)))
    with pytest.raises(CertaindexRangeError, match="outside"):   # the runtime raises it the same
        asyncio.run(Runtime(ReplayBackend([p])).run(Overconfident(p, [0, 1], Even(2))))


def test_replay_has_no_loop_of_its_own(monkeypatch):
    import certa.eval.replay as replay_mod
    from certa.runtime import driver

    seen = []

    async def spy(program, ctx, **kw):
        seen.append(type(ctx).__name__)
        return await driver.drive(program, ctx, **kw)

    monkeypatch.setattr(replay_mod, "drive", spy)
    p = problem([10, 20, 30], ["18", "18", "7"])
    assert run_replay(ReplaySC(p, [0, 1, 2], Even(2))) == "budget" and seen == ["ReplayContext"]


def test_replay_context_public_methods_take_no_private_argument():
    import inspect

    from certa.eval.replay import ReplayContext
    for name, fn in inspect.getmembers(ReplayContext, inspect.isfunction):
        if not name.startswith("_"):
            assert not [p for p in inspect.signature(fn).parameters if p.startswith("_")], name


def test_replayer_averages_orders_per_problem():
    problems = load_traces(DATA / "traces_tiny.jsonl")
    full = Replayer(problems, "sc", orders=3).run(Even(8))
    for i, p in enumerate(problems):  # every order draws all samples: same tokens whatever the order
        assert full.main[i] == sum(s.tokens for s in p.samples) and full.tokens[i] == full.main[i]
    early = Replayer(problems, "sc", orders=3, seed=1).run(Threshold(1.0, detect_at=2))
    assert early.mean_tokens < full.mean_tokens and sum(early.exits.values()) == 3 * len(problems)


def test_sc_oracle_stops_at_the_fewest_samples_that_already_give_the_final_vote():
    p = problem([10, 20, 30, 40, 50, 60], ["7", "18", "18.0", "7", "18", ""],  # all six vote "18" ("18.0" too)
                correct=[False, True, True, False, True, False])

    def vote(preds):  # largest cluster of non-empty answers, ties to the one seen first
        keys = [x.replace(".0", "") for x in preds if x]
        return max(dict.fromkeys(keys), key=lambda a: (keys.count(a), -keys.index(a)))

    rep = Replayer([p], "sc", orders=4, seed=3)
    oracle, full = rep.oracle_sc(), rep.run(None)
    expected = []
    for r in range(4):
        order = sample_order(p, 3, r)
        preds = [p.samples[j].pred for j in order]
        n = next(n for n in range(1, 7) if any(preds[:n]) and vote(preds[:n]) == "18")
        expected.append(sum(p.samples[j].tokens for j in order[:n]))
    assert oracle.main[0] == pytest.approx(sum(expected) / 4) and oracle.main[0] < full.main[0]
    assert oracle.correct[0] == full.correct[0] == 1.0
    cot = problem([20], ["18"], probes={0: [{"at": 16, "answer": "18"}]})
    with pytest.raises(ConfigError, match="SC replays"):
        Replayer([cot], "cot").oracle_sc()


def test_every_problem_gets_the_same_sample_budget():
    a = problem([10, 10, 10], ["1", "1", "2"], idx=0)
    b = problem([5, 5, 5, 5, 5], ["1", "2", "3", "4", "5"], idx=1)
    rep = Replayer([a, b], "sc")
    assert rep.n_samples == 3
    never = rep.run(None)  # no policy: draws up to the common budget, not all five
    assert never.main.tolist() == [30.0, 15.0] and never.knob.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("module", ["certa.eval.replay_backend", "certa.eval.replay",
                                    "certa.eval.replay_eval", "certa.eval.evalstats",
                                    "certa.eval.calibration", "certa.eval.bench_tokens",
                                    "certa.eval.collect", "certa.recording"])
def test_docstring_examples_run(module):
    import doctest
    import importlib
    assert doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS).failed == 0

"""Label-free, risk-controlled calibration (issue 38): the guarantee holds on a family with a known
change rate (200 seeded repetitions), calibration never reads gold, too little data falls back to
the shipped default, the policy files load where the issue says, and the bench rows exist."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from certa.cli import app
from certa.cli.run import load_policy, load_program
from certa.eval.families import DELTAS, PATIENCE, family, patience_signal, unlabeled
from certa.eval.labelfree import calibrate_labelfree, certify
from certa.eval.labelfree_bench import labelfree_rows
from certa.eval.outcomes import Outcomes, outcomes
from certa.eval.risk import BettingTest, betting_pvalues, hb_pvalue, smallest_certifiable
from certa.eval.traces import dump_traces, parse_trace_line
from certa.simulation.synth import synth_traces

RATES = (0.0, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.055, 0.06, 0.08, 0.12)
"""True change rates of a synthetic family, most patient first (risk 0.05 sits among them)."""


def synthetic(rng: np.random.Generator, n: int, chains: int = 3) -> Outcomes:
    """n problems x ``chains`` correlated runs: a problem is fragile under setting j with probability
    2 * RATES[j] (nested: one uniform per problem) and then each of its runs changes with probability
    1/2 (one uniform per run), so setting j's true change rate is exactly RATES[j]."""
    u, v = rng.random(n), rng.random((n, chains))
    loss = np.stack([((u < 2 * r)[:, None] & (v < 0.5)).mean(axis=1) for r in RATES], axis=1)
    tokens = np.tile(1.0 - 0.05 * np.arange(len(RATES)), (n, 1))
    ones = np.ones(n)
    return Outcomes(list(range(n)), RATES, loss, tokens, ones, ones, 0.0)


def test_the_certified_setting_keeps_the_realised_change_rate_within_risk_in_200_repetitions():
    risk, delta, reps = 0.05, 0.1, 200
    rng = np.random.default_rng(20261204)
    violations = naive_violations = certified = 0
    for _ in range(reps):
        out = synthetic(rng, 300)
        cert = certify(out, risk, delta)
        chosen = cert.chosen
        certified += chosen is not None
        violations += chosen is not None and RATES[chosen] > risk
        naive = max(c for c in range(len(RATES)) if out.loss[:, c].mean() <= risk)  # no bound: the empirical risk
        naive_violations += RATES[naive] > risk
    assert violations <= delta * reps, violations  # the guarantee: P(risk of the choice > risk) <= delta
    assert naive_violations >= 0.3 * reps, naive_violations  # the test can fail: trusting the mean breaks it
    assert certified >= 0.9 * reps, certified  # and it is not vacuous: a setting is certified almost always


def test_bounds_agree_with_their_closed_forms():
    assert hb_pvalue(0.0, 45, 0.05) == pytest.approx(0.95 ** 45)
    assert smallest_certifiable(45, 0.1) == pytest.approx(1 - 0.1 ** (1 / 45))
    zero = betting_pvalues(np.zeros((60, 1)), 0.05)[0]
    assert zero <= 0.1 and betting_pvalues(np.zeros((40, 1)), 0.05)[0] > 0.1  # 40 loss-free problems cannot certify 5%
    t = BettingTest(0.05)
    t.extend([0.0] * 60)
    assert t.rejects(0.1) and t.pvalue() <= 0.1
    t.extend([1.0] * 30)
    assert t.rejects(0.1), "a rejection stays (running maximum: anytime-valid)"
    assert not BettingTest(0.05, lower=-1.0).rejects(0.1)


def test_calibration_never_reads_gold():
    probs = synth_traces(40, seed=3, samples=8, probed=0)
    stripped = [p.model_copy(update={"gold": None}) for p in unlabeled(probs)]
    liars = [p.model_copy(update={"gold": "-1", "samples": [s.model_copy(update={"correct": not s.correct})
                                                            for s in p.samples]}) for p in probs]
    runs = [calibrate_labelfree(x, "sc", risk=0.2, orders=2) for x in (probs, stripped, liars)]
    assert runs[0] == runs[1] == runs[2]
    assert runs[0]["labelfree"]["certified"]
    bank = [parse_trace_line(json.dumps({**BANK[i % 3], "idx": i})) for i in range(18)]
    flipped = [p.model_copy(update={"gold": "999"}) for p in unlabeled(bank)]
    for ref in ("final", "consensus"):
        got = calibrate_labelfree(bank, "cot", risk=0.4, reference=ref)
        assert got == calibrate_labelfree(flipped, "cot", risk=0.4, reference=ref)
        assert got["labelfree"]["certified"] and got["labelfree"]["reference"] == ref


def test_too_little_data_falls_back_to_the_shipped_default_and_says_so():
    out = calibrate_labelfree(synth_traces(12, seed=1, samples=8, probed=0), "sc", risk=0.05, orders=2)
    lf = out["labelfree"]
    assert lf["fallback"] and not lf["certified"] and out["policy"]["delta"] == 0.04
    assert "shipped default" in lf["note"] and lf["smallest_certifiable"] > 0.05


# ---- CoT on hand-made bank chains: 64-token segments of 40 characters ------------------------------
def chain(segments: list[str], answers: list[str | None], pred: str) -> dict:
    text, probes, at = "", [], 0
    for seg, ans in zip(segments, answers):
        text, at = text + seg.ljust(40), at + 64
        if ans is not None:
            probes.append({"at": at, "answer": ans, "certain": True, "probe_tokens": 3, "chars": len(text)})
    return {"tokens": 64 * len(segments), "finished": True, "pred": pred, "correct": pred == "7", "text": text,
            "probes": probes}


FILL = "Let me look at it once more. "


def false_settle(hold: int) -> dict:
    """States 5 at 128 and holds it ``hold`` segments (probes agree), then states 7, its final answer."""
    segs = ["<think>Let me add. ", "So the answer is 5.\n", *[FILL] * hold, "No: 3 + 4 = 7. So the answer is 7.\n",
            *[FILL] * 4, "</think> \\boxed{7}"]
    answers = ["", "5", *["5"] * hold, "7", *["7"] * 4, None]
    return chain(segs, answers, "7")


BANK = [{"idx": i, "gold": "7", "model": "hand", "dataset": "math500", "interval": 64, "question": "What is 3 + 4?",
         "samples": [false_settle(h) for h in hold]} for i, hold in enumerate([(0, 0, 0), (6, 0, 0), (6, 6, 0)])]


def test_cot_outcomes_count_a_change_exactly_where_an_impatient_setting_exits_on_a_false_settle():
    # the "answer is" arm needs probes reaching back its span: 5 is stated and probed at 128, probes come
    # every 128 tokens, so patience 0.25 (span 128) exits on 5 at 256 when 7 is stated only at 576 (hold 6);
    # stated at 192 (hold 0), the 256 probe says 7 and the exit is on 7. Patience 8 waits for the chain's end.
    bank = [parse_trace_line(json.dumps(p)) for p in BANK]
    out = outcomes(bank, family("cot"))
    lo, hi = PATIENCE.index(0.25), 0
    assert out.loss[:, lo].tolist() == pytest.approx([0.0, 1 / 3, 2 / 3])
    assert out.loss[:, hi].tolist() == [0.0, 0.0, 0.0]
    assert (out.tokens[:, lo] <= out.tokens[:, hi]).all() and out.explore_tokens.tolist() >= out.full_tokens.tolist()
    soft = outcomes(bank, family("cot"), reference="consensus")  # the other chains end on 7: a loss of 1 for one chain
    assert soft.lower == -1.0 and soft.loss[:, lo].tolist() == pytest.approx([0.0, 1 / 3, 2 / 3])


def test_policy_files_load_into_programs_run_and_serve(tmp_path):
    sc = calibrate_labelfree(synth_traces(60, seed=3, samples=8, probed=0), "sc", risk=0.1, orders=4)
    path = tmp_path / "sc.json"
    path.write_text(json.dumps(sc))
    assert load_policy(str(path)).delta == sc["labelfree"]["value"] and sc["labelfree"]["value"] in DELTAS
    assert load_program("sc", str(path), None).policy.delta == sc["labelfree"]["value"]
    bank = [parse_trace_line(json.dumps(p)) for p in BANK]
    for program in ("cot", "sc-cot"):
        f = calibrate_labelfree(bank, program, risk=0.4)
        path = tmp_path / f"{program}.json"
        path.write_text(json.dumps(f))
        graph = load_program(program, str(path), None)
        assert graph.name == program and f["labelfree"]["value"] in PATIENCE
    key = "signal"
    assert calibrate_labelfree(bank, "cot", risk=0.4)["program"][key] == \
        patience_signal(calibrate_labelfree(bank, "cot", risk=0.4)["labelfree"]["value"]).to_dict()


def test_cli_calibrate_and_bench_rows(tmp_path):
    traces = tmp_path / "t.jsonl"
    dump_traces(synth_traces(40, seed=5, samples=8, probed=0), traces)
    runner = CliRunner()
    r = runner.invoke(app, ["calibrate", "--program", "sc", "--traces", str(traces), "--risk", "0.2", "--orders", "4",
                            "--out", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    assert "gold not read" in r.output and ("chosen:" in r.output or "FALLBACK" in r.output)
    assert json.loads((tmp_path / "p.json").read_text())["method"] == "labelfree"
    r = runner.invoke(app, ["bench", "tokens", "--program", "sc", "--traces", str(traces), "--label-free", "--online",
                            "--risk", "0.2", "--orders", "2", "--reps", "20", "--json", str(tmp_path / "b.json")])
    assert r.exit_code == 0, r.output
    methods = json.loads((tmp_path / "b.json").read_text())["methods"]
    assert {"sc-default", "esc", "certa-labelfree", "certa-online", "hindsight-labels"} <= set(methods)
    assert methods["certa-online"]["streams"][0]["explored"] > 0
    r = runner.invoke(app, ["calibrate", "--program", "sc", "--traces", str(traces), "--risk", "0.2",
                            "--reference", "gold", "--out", str(tmp_path / "q.json")])
    assert r.exit_code == 2 and "--reference must be final or consensus" in r.output


def test_crossfit_calibrates_each_half_on_the_other_only():
    probs = synth_traces(30, seed=2, samples=8, probed=0)
    rows = labelfree_rows(probs, "sc", risk=0.2, orders=2, reps=20, rows=("certa-labelfree",))
    folds = rows["certa-labelfree"]["folds"]
    assert [f["problems"] for f in folds] == [15, 15] and all(f["calibration_problems"] == 15 for f in folds)

"""Probe banks as traces: loading, CoT replay and lock-step SC over CoT on hand-made chains,
with token counts computed by hand; the live program on the same chains gives the same figures."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import certa as ct
from certa.algorithms.programs.cot_probe import cot_program
from certa.algorithms.programs.sc_cot import sc_cot_program
from certa.algorithms.signals.reasoning import reasoning_signal
from certa.cli import app
from certa.eval.bench_chains import bench_chains, headroom, is_probe_bank
from certa.eval.bench_sc_cot import bench_sc_cot
from certa.eval.errors import TraceFormatError
from certa.eval.replay_backend import ChainReplayBackend, probe_cost, recorded_probe_text
from certa.eval.replay_eval import Replayer, check_traces
from certa.eval.traces import dump_traces, parse_trace_line
from certa.runtime.policy import Threshold

RULE = reasoning_signal(span=128, share=1.0, every=64, conclude_span=4096)


def chain(segments: list[str], answers: list[str | None], *, pred: str, correct: bool = True,
          tokens: int | None = None, certain: bool = True) -> dict:
    """A chain of 64-token segments of 40 characters each (so a cut at a multiple of 64 tokens falls
    between segments); a probe after segment i answers ``answers[i]`` (None: not recorded)."""
    text, probes, at = "", [], 0
    for seg, ans in zip(segments, answers):
        text, at = text + seg.ljust(40), at + 64
        if ans is not None:
            probes.append({"at": at, "answer": ans, "certain": certain, "probe_tokens": 3, "chars": len(text)})
    return {"tokens": tokens or 64 * len(segments), "finished": True, "pred": pred, "correct": correct,
            "text": text, "probes": probes, "seed": 0}


def problem(idx: int, chains: list[dict], gold: str = "7") -> dict:
    return {"idx": idx, "gold": gold, "model": "hand", "dataset": "math500", "split": "development", "interval": 64,
            "question": "What is 3 + 4?", "samples": chains}


FILLER = "Let me look at it once more. "
SETTLES = chain(["<think>Let me add the numbers. ", "3 + 4 = 7. So the answer is 7.\n", *[FILLER] * 8],
                ["5", "7", "7", "7", "7", "7", "7", "7", "7", None], pred="7")  # the probe at 576 is missing


def test_a_bank_with_missing_tail_probes_loads_and_costs_its_probe_tokens():
    p = parse_trace_line(json.dumps(problem(0, [SETTLES])))
    assert is_probe_bank([p])
    check_traces([p], "cot")  # the chain's last probe (576) is missing: valid
    q = p.samples[0].probes[0]
    assert probe_cost(q) == 3 and recorded_probe_text(q) == "5}"
    gap = dict(SETTLES, probes=[x for x in SETTLES["probes"] if x["at"] != 256])
    with pytest.raises(TraceFormatError, match="no probe at token 256"):
        check_traces([parse_trace_line(json.dumps(problem(1, [gap])))], "cot")
    hesitant = parse_trace_line(json.dumps(problem(2, [chain(["a "], ["7"], pred="7", certain=False)])))
    assert recorded_probe_text(hesitant.samples[0].probes[0]) == "7} hmm"  # reads as hesitation


def test_cot_replay_exits_where_text_and_probes_agree_hand_counted():
    # 64: no statement yet, so no probe. 128: "the answer is 7" -> probe (7), span 128 not covered.
    # 192: probe (7), still not covered (no probe at <= 64). 256: probe (7); the probes of (128, 256]
    # all say 7 and the text says 7 -> exit. Main 256, three probes of 3 tokens -> 265.
    p = parse_trace_line(json.dumps(problem(0, [SETTLES])))
    rep = Replayer([p], "cot", probe_tokens=32)
    got = []
    s = rep.run(Threshold(1.0, detect_at=1, every=1), k=1, interval=64, signal=RULE,
                on_program=lambda prob, prog: got.append((prog.answer(), [o.at for o in prog.state.probes])))
    assert (s.main[0], s.probe[0], s.tokens[0], s.correct[0]) == (256, 9, 265, 1.0)
    assert got == [("7", [128, 192, 256])]


def test_the_live_program_on_the_same_chain_spends_the_same_tokens():
    p = parse_trace_line(json.dumps(problem(0, [SETTLES])))
    prog = cot_program(signal=RULE, max_tokens=4096, probe_tokens=32)
    r = ct.Runtime(ChainReplayBackend(p)).run_sync(prog, question="What is 3 + 4?", seed=0)
    assert (r.answer, r.exit_reason, r.tokens.main, r.tokens.probe) == ("7", "certaindex", 256, 9)
    assert [o.at for o in r.state.probes] == [128, 192, 256]


THINKS = "Let me think about it. "
SHORT = chain([THINKS, THINKS, "</think> The answer is \\boxed{7}."], ["", "", None], pred="7")  # ends at 192
BOXES = chain([THINKS, THINKS, THINKS, "So \\boxed{7}.\n", THINKS, THINKS, "</think> \\boxed{7}"],
              ["7"] * 6 + [None], pred="7")  # boxes 7 in its thinking at 256: stops itself there
LONG = chain([THINKS] * 15 + ["</think> \\boxed{9}"], ["9"] * 15 + [None], pred="9", correct=False)  # 1024 tokens


def test_sc_over_cot_stops_every_chain_in_lock_step_hand_counted():
    # round 3 (192): chain 0 finished (7), 1 of 3 ended -> vote not settled. Round 4 (256): chain 1
    # boxes 7 and stops itself; 7 leads by 2 > 1 chain running -> stop; chain 2 is cut at 256.
    # Tokens: 192 + 256 + 256 = 704 (no statement before the boxes: no probe). Full majority: 192 + 448 + 1024.
    p = parse_trace_line(json.dumps(problem(0, [SHORT, BOXES, LONG])))
    prog = sc_cot_program(3, chain=cot_program(max_tokens=4096, probe_tokens=32))
    r = ct.Runtime(ChainReplayBackend(p)).run_sync(prog, question="What is 3 + 4?")
    assert (r.answer, r.exit_reason, r.tokens.main, r.tokens.probe) == ("7", "certaindex", 704, 0)
    assert r.state.ended == [True, True, False] and r.state.order == [0, 1]  # chain 2 was running: stopped
    assert [c.exit_reason for c in r.state.chains] == ["done", "certaindex", "cancelled"]
    report = bench_sc_cot([p], reps=20, votes=())
    full, default = report["methods"]["baseline-even"], report["methods"]["certa-default"]
    assert (full["tokens"], default["tokens"], default["token_ratio"]) == (1664, 704, round(704 / 1664, 6))
    assert default["accuracy_delta"] == 0 and default["lost"] == 0 and default["n"] == 1


def test_bench_chains_rows_carry_what_pools_and_reserved_rows_wait_for_final():
    probs = [parse_trace_line(json.dumps(problem(i, [SETTLES, SETTLES]))) for i in (0, 1, 300)]
    r = bench_chains(probs, reps=20)
    assert r["problems"] == 2 and r["reserved_skipped"] == 1 and r["chains"] == 4
    for name in ("baseline-even", "certa-default", "dynasor-k8", "oracle-settled", "oracle-first-correct"):
        m = r["methods"][name]
        assert {"token_ratio", "accuracy_delta", "tokens", "baseline_tokens", "correct", "n", "ci95"} <= set(m)
    assert r["methods"]["oracle-settled"]["oracle"] and r["methods"]["baseline-even"]["baseline_tokens"] == 640
    assert bench_chains(probs, reps=20, final=True, rules=())["problems"] == 3
    h = headroom(probs)
    assert h["bounds"]["oracle-settled"]["token_ratio"] == round((128 + 3 * 2) / 640, 6)  # probes at 64, 128 paid


def test_cli_scores_a_bank_and_reports_its_headroom(tmp_path):
    bank = dump_traces([parse_trace_line(json.dumps(problem(i, [SETTLES, BOXES, LONG]))) for i in range(2)],
                       tmp_path / "bank.jsonl")
    runner = CliRunner()
    for program in ("cot", "sc-cot"):
        out = tmp_path / f"{program}.json"
        res = runner.invoke(app, ["bench", "tokens", "--program", program, "--traces", str(bank), "--json", str(out),
                                  "--reps", "20"])
        assert res.exit_code == 0, res.output
        assert "certa-default" in json.loads(out.read_text())["methods"]
    res = runner.invoke(app, ["traces", "headroom", "--traces", str(bank)])
    assert res.exit_code == 0 and "oracle-settled" in res.output


def test_sc_over_cot_runs_eight_chains_of_a_bank_probed_every_128_tokens():
    # 8 chains, probes every 128 tokens (rounds of 128): chains 0-4 box 7 in their thinking at 256
    # (round 2), chains 5-7 think on until 1024 and answer 9. Round 2: five ended on 7, three running:
    # 5 - 0 > 3, so the vote is settled; every chain has 256 tokens: 8 * 256 = 2048.
    def bank_chain(box_at: int, answer: str, tokens: int) -> dict:
        segs = [THINKS] * (tokens // 64)
        segs[box_at // 64 - 1] = f"So \\boxed{{{answer}}}.\n"
        c = chain(segs, [answer] * len(segs), pred=answer, correct=answer == "7")
        c["probes"] = [q for q in c["probes"] if q["at"] % 128 == 0 and q["at"] < tokens]
        return c
    chains = [bank_chain(256, "7", 640)] * 5 + [bank_chain(1024, "9", 1088)] * 3
    p = parse_trace_line(json.dumps({**problem(0, chains), "interval": 128}))
    report = bench_sc_cot([p], reps=20, votes=())
    default = report["methods"]["certa-default"]
    assert report["round_tokens"] == 128 and report["chains_per_problem"] == [8]
    assert default["tokens"] == 8 * 256 and default["accuracy"] == 1.0 and default["lost"] == 0

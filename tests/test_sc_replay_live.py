"""Replayed SC is what ``sc_program()`` does live (issue 39 item 5).

Trace replay (:class:`certa.eval.replay.ReplaySC`) is a separate Program that reproduces
Self-Consistency from recorded samples; calibration and ``certa bench tokens`` trust it to
decide as the library's ``sc_program`` would. Here the same samples run both ways — live, on
the scripted backend answering branch ``i`` with sample ``i``'s text, and replayed in the same
order — and everything a policy decides on must agree: exit reason, knob, answer, tokens and
the certaindex trajectory, for the shipped default and the published peers.
"""

from __future__ import annotations

import json

import pytest

import certa as ct
from certa.algorithms.policies import ESC, AdaptiveConsistency
from certa.algorithms.policies.votes import sc_default_policy
from certa.algorithms.programs.self_consistency import sc_program
from certa.eval.replay import ReplaySC, run_replay
from certa.eval.traces import parse_trace_line

MAX_TOKENS = 512
PREDS = ["18", "18", "17", "18", "21", "18", "18", "17", "18", "18", "18", "18"]
LENGTHS = [40, 55, 120, 38, 90, 47, 61, 200, 44, 52, 49, 58]


def sample_text(pred: str, tokens: int) -> str:
    """A solution of exactly ``tokens`` scripted tokens (words) ending in ``\\boxed{pred}``."""
    return " ".join(["step"] * (tokens - 3) + ["so", "answer:", f"\\boxed{{{pred}}}"])


def problem(preds=PREDS, lengths=LENGTHS):
    samples = [{"tokens": n, "pred": p, "correct": p == "18", "finished": True} for p, n in zip(preds, lengths)]
    return parse_trace_line(json.dumps({"idx": 0, "gold": "18", "max_tokens": MAX_TOKENS, "samples": samples}))


def live(policy, preds=PREDS, lengths=LENGTHS, lanes: int = 1):
    texts = [sample_text(p, n) for p, n in zip(preds, lengths)]
    backend = ct.ScriptedBackend(responses=texts)  # request i (branch i) gets sample i
    prog = sc_program(branches_per_round=lanes, cap=len(texts), policy=policy, max_tokens=MAX_TOKENS)
    return ct.Runtime(backend).run_sync(prog, question="What is 9 * 2?")


def replayed(policy, preds=PREDS, lengths=LENGTHS):
    prog = ReplaySC(problem(preds, lengths), list(range(len(preds))), policy)
    reason = run_replay(prog)
    return reason, prog


POLICIES = {
    "default": sc_default_policy,
    "paper threshold": lambda: ct.Threshold(0.55, detect_at=4, every=4),
    "watch": lambda: ct.Watch(0.7, detect_at=3),
    "esc": lambda: ESC(window=3),
    "adaptive-consistency": lambda: AdaptiveConsistency(0.9),
    "even": lambda: ct.Even(6),
}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_replayed_sc_decides_as_sc_program_does_live(name):
    r = live(POLICIES[name]())
    reason, prog = replayed(POLICIES[name]())
    assert r.exit_reason == reason
    assert r.knob_used == prog.knob_used
    assert r.answer == prog.answer()
    assert r.tokens.main == prog.tokens.main == sum(LENGTHS[:r.knob_used])
    assert [(p.knob, round(p.value, 9)) for p in r.certaindex] == \
        [(p.knob, round(p.value, 9)) for p in prog.trajectory]


def test_the_comparison_can_fail():
    """A replay on other samples than the live run's disagrees (the test above is not vacuous)."""
    r = live(ct.Threshold(0.55, detect_at=4, every=4))
    reason, prog = replayed(ct.Threshold(0.55, detect_at=4, every=4), preds=["1", "2", "3", "4"] * 3)
    assert (r.exit_reason, r.answer) != (reason, prog.answer())


def test_parallel_lanes_finishing_in_issue_order_replay_the_same():
    """With four lanes whose branches finish in the order they started (the scripted backend
    answers at once), live SC still matches the replay in that order."""
    policy = ct.Threshold(0.55, detect_at=4, every=4)
    r = live(policy, lanes=4)
    reason, prog = replayed(ct.Threshold(0.55, detect_at=4, every=4))
    assert (r.exit_reason, r.answer) == (reason, prog.answer())
    assert [round(p.value, 9) for p in r.certaindex] == [round(p.value, 9) for p in prog.trajectory]

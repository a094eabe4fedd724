"""Self-Consistency: entropy certaindex, detection-step threshold, majority vote, aborts, the shipped
stable-vote default (scripted fake backend)."""

from __future__ import annotations

import certa as ct
from certa.algorithms.policies import ESC
from certa.algorithms.policies.votes import SC_DEFAULT, StableVote
from certa.algorithms.programs.self_consistency import sc_program
from certa.algorithms.signals import entropy_certainty

PAPER = dict(detect_at=4, every=4)  # the paper's rule, sc_program's default before the vote default


def by_branch(answers: dict[int, str], default: str):
    """A scripted responder: branch i answers answers.get(i, default) in a \\boxed{}."""
    return lambda req: f"Some reasoning. So the answer is \\boxed{{{answers.get(req.branch, default)}}}."


async def test_exits_at_the_detection_step_when_certaindex_passes():
    b = ct.ScriptedBackend(responses=by_branch({3: "9"}, "7"))  # 3 of 4 agree: certaindex 0.594
    r = await ct.Runtime(b).run(sc_program(branches_per_round=4, cap=16, policy=ct.Threshold(0.55, **PAPER)),
                                question="q")
    assert r.ok, r.error
    assert (r.exit_reason, r.knob_used, r.answer) == ("certaindex", 4, "7")
    assert r.certaindex[-1].value > 0.55
    assert b.live_rids() == set() and r.tokens_saved > 0


async def test_stops_exactly_at_a_checkpoint_not_before_or_after():
    # answers 1, 2, then 5s: certaindex by knob 4: .25  5: .41  6: .52  7: .59  8: .65
    b = ct.ScriptedBackend(responses=by_branch({0: "1", 1: "2"}, "5"))
    prog = sc_program(branches_per_round=4, cap=16, policy=ct.Threshold(0.5, detect_at=4, every=4))
    r = await ct.Runtime(b).run(prog, question="q")
    assert r.exit_reason == "certaindex" and r.knob_used == 8, "checked at 4 (fails) and 8 (passes) only"
    by_knob = {p.knob: p.value for p in r.certaindex}
    assert by_knob[4] < 0.5 <= by_knob[6] and by_knob[7] >= 0.5, "passing between checkpoints must not stop it"
    assert abs(by_knob[8] - entropy_certainty(["1", "2"] + ["5"] * 6)) < 1e-9
    assert r.answer == "5" and sorted(r.state.answers) == ["1", "2"] + ["5"] * 6


async def test_disagreeing_answers_run_to_the_cap():
    b = ct.ScriptedBackend(responses=lambda req: f"\\boxed{{{req.branch}}}")
    r = await ct.Runtime(b).run(sc_program(branches_per_round=4, cap=12), question="q")
    assert (r.exit_reason, r.knob_used, len(r.state.answers)) == ("cap", 12, 12)
    assert all(p.value == 0.0 for p in r.certaindex)


async def test_math_equivalent_answers_cluster_together():
    forms = {0: "0.5", 1: "\\frac{1}{2}", 2: "1/2", 3: "0.50"}
    b = ct.ScriptedBackend(responses=lambda req: f"\\boxed{{{forms[req.branch % 4]}}}")
    r = await ct.Runtime(b).run(sc_program(branches_per_round=4, cap=8, policy=ct.Threshold(0.55, **PAPER)),
                                question="q")
    assert r.exit_reason == "certaindex" and r.knob_used == 4 and r.certaindex[-1].value == 1.0


async def test_early_exit_aborts_slow_branches():
    b = ct.ScriptedBackend(responses=by_branch({}, "7"), latency=lambda req: 5.0 if req.branch == 5 else 0.001)
    r = await ct.Runtime(b).run(sc_program(branches_per_round=6, cap=16,
                                           policy=ct.Threshold(0.9, detect_at=4, every=1)), question="q")
    assert r.exit_reason == "certaindex" and r.knob_used == 4
    assert b.live_rids() == set() and any(rid.split(":")[2] == "5" for rid in b.abort_calls)


async def test_branch_seeds_and_prompt():
    b = ct.ScriptedBackend(responses=by_branch({}, "7"))
    await ct.Runtime(b).run(sc_program(branches_per_round=2, cap=2), question="What is 3 + 4?", seed=3)
    assert sorted(req.seed for req in b.requests) == [300_000, 300_001]
    assert all("\\boxed{}" in req.prompt and req.prompt.startswith("What is 3 + 4?") for req in b.requests)


async def test_esc_policy_reads_the_answers_protocol():
    b = ct.ScriptedBackend(responses=by_branch({0: "1"}, "5"))
    r = await ct.Runtime(b).run(sc_program(branches_per_round=3, cap=12, policy=ESC(window=3)), question="q")
    assert (r.exit_reason, r.knob_used) == ("esc", 6), "window 1 holds the odd answer; window 2 agrees"


def test_the_default_policy_is_the_shipped_stable_vote_rule():
    policy = sc_program().policy
    assert isinstance(policy, StableVote) and policy.to_dict() == SC_DEFAULT


async def test_default_stops_once_three_branches_agree_out_of_sixteen():
    b = ct.ScriptedBackend(responses=by_branch({}, "7"))
    r = await ct.Runtime(b).run(sc_program(branches_per_round=1, cap=16, max_tokens=512), question="q")
    assert (r.exit_reason, r.knob_used, r.answer) == ("certaindex", 3, "7"), "P(change) 0.082 at 2, 0.029 at 3"
    assert r.state.complete == [True] * 3 and all(0 < x < 0.05 for x in r.state.lengths)
    assert r.state.confidence == [None] * 3, "no logprobs asked for: confidence unknown"


async def test_default_waits_longer_after_a_rival_and_an_empty_branch():
    # branch 0 answers 3 (cut at the budget: it still votes), branch 1 has no extractable answer
    long = "\\boxed{3} " + "word " * 600
    text = {0: long, 1: "no answer here"}
    b = ct.ScriptedBackend(responses=lambda req: text.get(req.branch, "So \\boxed{7}."))
    r = await ct.Runtime(b).run(sc_program(branches_per_round=1, cap=16, max_tokens=512), question="q")
    assert r.state.answers[:2] == ["3", ""] and r.state.complete[:3] == [False, False, True]
    assert (r.exit_reason, r.knob_used, r.answer) == ("certaindex", 7, "7"), "5 sevens to one 3, 9 left of 16"

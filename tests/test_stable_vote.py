"""StableVote, the shipped SC default: stop when the full-budget majority vote can hardly change.

Hand-computed figures: with two agreeing answers, six samples left and the uniform prior, the
leader's share is Beta(3, 1) against all unseen answers; the vote changes only if an unseen
answer takes 5 or 6 of the 6 (5 > 2 + 1), P = 6 B(6, 4)/B(1, 3) + B(7, 3)/B(1, 3) = 1/28 + 1/84
= 1/21.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from certa.algorithms.policies import AdaptiveConsistency, policy_from_dict
from certa.algorithms.policies.votes import SC_DEFAULT, StableVote, sc_default_policy
from certa.algorithms.signals.votes import majority_change_probability, vote_counts
from certa.eval.replay import ReplaySC, run_replay
from certa.eval.traces import parse_trace_line
from certa.runtime.errors import ConfigError


def prog(answers: list[str], cap: int | None) -> NS:
    return NS(state=NS(answers=answers), knob_value=len(answers), knob_cap=cap, policy_marks={})


def test_change_probability_hand_values():
    assert majority_change_probability([2], 0, 6) == pytest.approx(1 / 21, abs=1e-12)
    assert majority_change_probability([], 0, 6) == 1.0, "no answer yet: anything can win"
    assert majority_change_probability([1, 1], 0, 0) == 0.0, "nothing left to draw"


def test_change_probability_is_zero_once_no_rival_can_catch_up():
    assert majority_change_probability([4, 1], 0, 3) == 0.0, "the 1 reaches 4 at most, and ties go to the earlier 4"
    assert majority_change_probability([3], 0, 3) == 0.0, "an unseen answer can at most tie, and comes later"
    assert majority_change_probability([3], 0, 4) > 0.0


def test_ties_go_to_the_earliest_answer_as_the_vote_breaks_them():
    # leader is the second answer (2 votes); the earlier one (1 vote) ties it with one more and wins the tie
    # P(the one draw goes to it) = (1 + 1) / (2 + 3 + 1) = 1/3; the unseen answers cannot reach 2
    assert majority_change_probability([1, 2], 0, 1) == pytest.approx(1 / 3, abs=1e-12)
    assert majority_change_probability([2, 1], 0, 1) == 0.0, "a later rival needs to be strictly ahead"


def test_more_budget_left_or_a_less_settled_vote_mean_more_risk():
    p = [majority_change_probability([3, 1], 0, r) for r in (2, 4, 8, 12)]
    assert p == sorted(p) and p[0] == 0.0 < p[-1]
    five = [majority_change_probability(c, 0, 8) for c in ([3, 2], [3, 1, 1], [4, 1], [5])]
    assert five == sorted(five, reverse=True) and five[-1] > 0, "closer or more diverse votes are less settled"
    assert majority_change_probability([3], 2, 8) < majority_change_probability([3], 0, 8), \
        "empty samples win nothing: the same draws are less likely to feed a rival"


def test_vote_counts_keep_first_occurrence_order_and_count_empty_answers():
    assert vote_counts(["7", "", "3", "7.0", None]) == ([2, 1], 2)


def test_the_same_answers_stop_sooner_when_less_budget_is_left():
    rule = StableVote(0.04)
    assert not rule.decide(prog(["7", "7"], cap=16)).stop and rule.decide(prog(["7", "7", "7"], cap=16)).stop
    assert rule.decide(prog(["7", "7"], cap=4)).stop, "two more samples cannot outvote two agreeing ones"
    assert rule.change_probability(prog(["7", "7"], cap=8)) == pytest.approx(1 / 21)


def test_stops_when_the_vote_is_decided_where_adaptive_consistency_waits():
    answers = ["7", "7", "3", "7", "7"]  # 4 to 1 with 3 samples left of 8: the 3s can only tie
    assert StableVote(0.01).decide(prog(answers, cap=8)).stop
    assert not AdaptiveConsistency(0.9).decide(prog(answers, cap=8)).stop, "Beta(4, 1) statistic is 0.89"


def test_min_samples_cap_and_no_cap():
    assert not StableVote(0.5, min_samples=3).decide(prog(["7", "7"], cap=4)).stop
    assert not StableVote(0.5).decide(prog(["7"] * 4, cap=4)).stop, "at the cap the program exits by 'cap'"
    assert StableVote(0.04, horizon=4).decide(prog(["7", "7"], cap=None)).stop
    assert not StableVote(0.04).decide(prog(["7", "7"], cap=None)).stop, "no cap: as if the cap were 16"
    assert StableVote(0.04).decide(prog(["7", "7", "7"], cap=None)).stop


def test_round_trip_validation_and_the_shipped_default():
    p = StableVote(0.05, min_samples=3, alpha=0.5, horizon=12)
    assert policy_from_dict(p.to_dict()).to_dict() == p.to_dict()
    assert sc_default_policy().to_dict() == SC_DEFAULT and SC_DEFAULT["kind"] == "stable_vote"
    for bad in ({"delta": 0.0}, {"delta": 1.0}, {"min_samples": 0}, {"alpha": 0.0}, {"horizon": 0}):
        with pytest.raises(ConfigError):
            StableVote(**bad)


def test_replay_stops_on_a_decided_vote():
    line = ('{"idx": 0, "gold": "7", "samples": [' + ", ".join(
        '{"tokens": 100, "pred": "%s", "correct": %s}' % (a, "true" if a == "7" else "false")
        for a in ["7", "3", "7", "7", "7", "3"]) + "]}")
    rp = ReplaySC(parse_trace_line(line), [0, 1, 2, 3, 4, 5], StableVote(0.01))
    run_replay(rp)
    assert rp.knob_used == 4 and rp.answer() == "7", "3 to 1 with 2 left of 6: the 3s can only tie the earlier 7s"


def test_shipped_policies_name_the_new_default_and_the_previous_one():
    from certa.eval.bench_fixed import shipped_policy
    assert isinstance(shipped_policy("sc-default"), StableVote)
    assert shipped_policy("weighted-vote").to_dict() == {"kind": "vote", "tau": 0.8, "length_weight": 0.25,
                                                         "confidence_floor": None, "min_samples": 2, "same": "math"}


def test_a_huge_budget_left_uses_the_unbounded_limit_and_stays_cheap():
    from certa.algorithms.signals.votes import EXACT_REMAINING, beta_half
    limit = beta_half(5 + 1, 1 + 1) + beta_half(5 + 1, 0 + 1)  # the rival 1, and the unseen answers
    assert majority_change_probability([5, 1], 0, 10**9) == pytest.approx(limit)
    near = majority_change_probability([5, 1], 0, EXACT_REMAINING)
    assert 0 < near <= limit and near == pytest.approx(limit, abs=0.02), "the exact sum approaches its limit"

"""The weighted-vote certaindex and VoteStop: Adaptive-Consistency with unit weights, invalid and
long samples weigh less, DeepConf-style confidence filter, replay feeds it per-sample data."""

from __future__ import annotations

import random
from types import SimpleNamespace as NS

import pytest

from certa.algorithms.policies import AdaptiveConsistency, beta_stop_probability, policy_from_dict
from certa.algorithms.policies.votes import SC_DEFAULT, VoteStop, sc_default_policy
from certa.algorithms.signals import VoteView, sample_confidence, vote_certainty, vote_weights
from certa.algorithms.signals.votes import beta_half
from certa.eval import replay as _replay
from certa.eval.replay import ReplaySC
from certa.eval.traces import parse_trace_line


run_replay = getattr(_replay, "run_replay", None) or getattr(_replay, "drive")  # the synchronous replay loop


def prog(answers, **lists):
    return NS(state=NS(answers=list(answers), **lists), knob_value=len(answers), policy_marks={})


def test_beta_half_is_the_exact_binomial_tail_on_integers_and_smooth_between():
    for v1 in range(0, 12):
        for v2 in range(0, v1 + 1):
            assert beta_half(v2 + 1, v1 + 1) == pytest.approx(beta_stop_probability(v1, v2), abs=1e-12)
    assert beta_half(2.5, 2.5) == pytest.approx(0.5)
    assert beta_half(1.0, 2.0) < beta_half(1.0, 2.5) < beta_half(1.0, 3.0)


def test_unit_weights_decide_exactly_as_adaptive_consistency():
    rng = random.Random(0)
    for _ in range(300):
        answers = [rng.choice(["1", "2", "3", ""]) for _ in range(rng.randint(1, 10))]
        for tau in (0.8, 0.9, 0.95):
            assert VoteStop(tau).decide(prog(answers)).stop == AdaptiveConsistency(tau).decide(prog(answers)).stop


def test_truncated_and_empty_samples_get_no_vote_and_long_ones_less():
    view = VoteView(["7", "7", "", "9"], lengths=[0.2, 0.9, 0.1, 0.3], complete=[True, False, False, True])
    assert vote_weights(view) == [1.0, 0.0, 0.0, 1.0]
    assert vote_weights(view, length_weight=0.5) == pytest.approx([0.9, 0.0, 0.0, 0.85])
    assert vote_certainty(view) == pytest.approx(0.5), "one valid 7 against one valid 9"
    full = VoteView(["7", "7"], lengths=[0.1, 0.1], complete=[True, True])
    long = VoteView(["7", "7"], lengths=[0.9, 0.9], complete=[True, True])
    assert vote_certainty(full, length_weight=0.75) > vote_certainty(long, length_weight=0.75)


def test_confidence_floor_drops_low_confidence_votes():
    view = VoteView(["7", "7", "9"], confidence=[-0.2, -3.0, -0.1])
    assert vote_weights(view, confidence_floor=-1.0) == [1.0, 0.0, 1.0]
    assert vote_weights(view) == [1.0, 1.0, 1.0], "unused unless asked for"
    assert sample_confidence([-1.0] * 10 + [-5.0] * 2, window=2) == {"mean_logprob": -1.6667,
                                                                      "min_window_logprob": -5.0}


def test_min_samples_and_round_trip():
    p = VoteStop(0.7, length_weight=0.0, min_samples=2)
    assert not p.decide(prog(["7"])).stop and p.decide(prog(["7", "7"])).stop
    assert policy_from_dict(p.to_dict()).to_dict() == p.to_dict()
    assert sc_default_policy().to_dict() == SC_DEFAULT == policy_from_dict(SC_DEFAULT).to_dict()
    with pytest.raises(Exception, match="tau"):
        VoteStop(1.0)


def test_replay_feeds_lengths_and_truncation_to_the_policy():
    line = ('{"idx": 0, "gold": "7", "max_tokens": 500, "samples": ['
            '{"tokens": 500, "finished": false, "pred": "3", "correct": false},'
            '{"tokens": 500, "finished": false, "pred": "3", "correct": false},'
            '{"tokens": 100, "pred": "7", "correct": true}, {"tokens": 100, "pred": "7", "correct": true},'
            '{"tokens": 100, "pred": "7", "correct": true}]}')
    problem = parse_trace_line(line)
    rp = ReplaySC(problem, [0, 1, 2, 3, 4], VoteStop(0.8))
    run_replay(rp)
    assert rp.state.lengths[:2] == [1.0, 1.0] and rp.state.complete[:3] == [False, False, True]
    assert rp.knob_used == 5 and rp.answer() == "7", "the truncated 3s give no certainty; AC stops at 2 on them"
    ac = ReplaySC(problem, [0, 1, 2, 3, 4], AdaptiveConsistency(0.8))
    run_replay(ac)
    assert ac.knob_used == 2 and ac.answer() == "3"


def test_certainty_is_about_the_answer_given_not_a_heavier_minority():
    # the majority vote (ties to the earliest) is "3"; the 7s weigh more but are not the answer
    view = VoteView(["3", "3", "7", "7"], complete=[False, False, True, True])
    assert vote_certainty(view) == 0.0
    assert not VoteStop(0.8).decide(prog(["3", "3", "7", "7"], complete=[False, False, True, True])).stop

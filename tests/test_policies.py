"""Stopping policies: decisions, min-sample guards, serialization, and the Beta rule's closed form."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

import certa as ct
from certa.algorithms.policies import (ESC, AdaptiveConsistency, CheckEvery, MajorityMargin, Pareto,
                                       beta_stop_probability, policy_from_dict, top_two)
from certa.algorithms.programs.self_consistency import sc_program
from certa.runtime.errors import ConfigError
from certa.runtime.types import CertaindexPoint, Knob


class Fake:
    """Just enough of a Program for policies: answers, knob, certaindex, marks."""

    def __init__(self, answers=(), knob=0, certaindex=None, cap=None):
        self.state = SimpleNamespace(answers=list(answers))
        self.knob = Knob("branches", cap=cap)
        self.knob_used = knob
        self.policy_marks: dict = {}
        self.trajectory = [] if certaindex is None else [CertaindexPoint(knob, certaindex)]

    knob_value = property(lambda self: self.knob_used)
    knob_cap = property(lambda self: self.knob.cap)
    certaindex = property(lambda self: self.trajectory[-1].value if self.trajectory else None)

    def step(self, answer=None, certaindex=None):
        if answer is not None:
            self.state.answers.append(answer)
        self.knob_used += 1
        if certaindex is not None:
            self.trajectory.append(CertaindexPoint(self.knob_used, certaindex))
        return self


def stops(policy, prog) -> bool:
    return policy.decide(prog).stop


@pytest.mark.parametrize("make, match", [
    (lambda: ct.Threshold(1.5), "tau must be in"),
    (lambda: ct.Threshold({"a": -0.1}), "tau must be in"),
    (lambda: ct.Threshold("high"), "tau must be in"),
    (lambda: ct.Threshold(0.5, detect_at=0), "detect_at"),
    (lambda: ct.Threshold(0.5, every=0), "detect_at, every"),
    (lambda: ct.Threshold(0.5, min_samples=2.5), "min_samples"),
    (lambda: ct.Even(0), "Even cap"),
    (lambda: ct.Even("8"), "Even cap"),
    (lambda: ct.Length(0), "Length max_tokens"),
    (lambda: ct.Knob("furlongs"), "knob unit"),
    (lambda: ct.Knob("branches", cap=0), "knob cap"),
    (lambda: ct.Knob("branches", cap=2.5), "knob cap"),
])
def test_bad_policy_and_knob_arguments_are_coded_config_errors(make, match):
    with pytest.raises(ConfigError, match=match) as e:
        make()
    assert e.value.code == "CT300" and isinstance(e.value, ValueError)


def test_beta_rule_closed_form_matches_numeric_integration():
    def numeric(v1, v2, n=20_000):
        f = lambda x: x ** v1 * (1 - x) ** v2  # density of p1 (p2 = 1 - p1)
        xs = [(i + 0.5) / n for i in range(n)]
        return sum(f(x) for x in xs if x > 0.5) / sum(f(x) for x in xs)
    for v1, v2 in [(4, 0), (3, 0), (5, 2), (10, 6), (1, 1)]:
        assert beta_stop_probability(v1, v2) == pytest.approx(numeric(v1, v2), abs=1e-4)
    assert beta_stop_probability(4, 0) == 1 - 0.5 ** 5
    assert beta_stop_probability(2.5, 0.5) == pytest.approx(numeric(2.5, 0.5), abs=1e-3)


def test_adaptive_consistency_decisions_and_guard():
    ac = AdaptiveConsistency(0.95)
    assert not stops(ac, Fake(["7"] * 3))  # 1 - 2^-4 = 0.9375
    assert stops(ac, Fake(["7"] * 4))  # 0.969
    assert not stops(ac, Fake(["7", "7", "7", "7", "8"]))  # P = 0.89
    assert not stops(AdaptiveConsistency(0.95, min_samples=6), Fake(["7"] * 5))
    assert stops(ac, Fake(["0.5", "1/2", "\\frac{1}{2}", "0.50"])), "answers compare with math_equal"
    assert not stops(ac, Fake(["", "", "", "", ""])), "empty answers never win"
    assert top_two(["a", "b", "a", "", "c", "b", "a"], "exact") == (3, 2)


def test_esc_checks_whole_non_overlapping_windows():
    esc, prog = ESC(window=3), Fake()
    decisions = [stops(esc, prog.step(a)) for a in ["1", "2", "2", "2", "2", "3", "4", "4", "4"]]
    assert decisions == [False] * 8 + [True], "windows [1,2,2] [2,2,3] fail; [4,4,4] agrees"
    assert not stops(ESC(window=2), Fake(["", ""])), "a window of empty answers does not agree"
    guarded = ESC(window=2, min_samples=4)
    assert not stops(guarded, Fake(["5", "5"])) and stops(guarded, Fake(["5", "5", "5", "5"]))


def test_majority_margin_and_guard():
    m = MajorityMargin(2)
    assert not stops(m, Fake(["1", "2", "1"])) and stops(m, Fake(["1", "2", "1", "1"]))
    assert not stops(MajorityMargin(2, min_samples=5), Fake(["1", "1", "1"]))
    assert m.decide(Fake(["1", "1"])).reason == "margin"


def test_check_every_is_a_threshold_checked_every_k():
    ce, prog = CheckEvery(0.5, every=3), Fake()
    decisions = [stops(ce, prog.step(certaindex=0.9)) for _ in range(2)]
    assert decisions == [False, False] and stops(ce, prog.step(certaindex=0.9))
    ce, prog = CheckEvery(0.5, every=2, min_samples=4), Fake()
    assert [stops(ce, prog.step(certaindex=c)) for c in (0.9, 0.9, 0.9, 0.9)] == [False, False, False, True]


def test_pareto_fit_is_monotone_and_budgets_by_certaindex():
    points = [(0.1, 16), (0.2, 14), (0.3, 15), (0.5, 9), (0.55, 7), (0.6, 8), (0.9, 4), (0.95, 5), (1.0, 4)]
    p = Pareto.fit(points, bins=3, quantile=0.9, detect_at=4)
    budgets = [b for _, b in p.curve]
    assert budgets == sorted(budgets, reverse=True) and budgets == [16, 9, 5]
    assert (p.budget_for(0.0), p.budget_for(0.55), p.budget_for(0.97)) == (16, 9, 5)
    prog = Fake()
    assert [stops(p, prog.step(certaindex=0.96)) for _ in range(5)] == [False, False, False, False, True]
    assert p.budget_cap(prog) == 5 and p.expected_remaining(prog) == 0
    low = Fake(cap=12)
    assert not any(stops(p, low.step(certaindex=0.1)) for _ in range(11)) and p.budget_cap(low) == 12
    with pytest.raises(ConfigError):
        Pareto.fit([])


def test_pareto_guard_delays_the_budget_lookup():
    p, prog = Pareto([(0.0, 8), (0.8, 2)], detect_at=1, min_samples=3), Fake()
    assert [stops(p, prog.step(certaindex=0.9)) for _ in range(3)] == [False, False, True]


@pytest.mark.parametrize("policy", [CheckEvery(0.6, every=4, min_samples=2), Pareto([(0.0, 16), (0.7, 4)], detect_at=4),
                                    ESC(window=5, min_samples=5), AdaptiveConsistency(0.9, min_samples=3),
                                    MajorityMargin(4, min_samples=2)])
def test_policies_round_trip_through_dicts(policy):
    again = policy_from_dict(policy.to_dict())
    assert type(again) is type(policy) and again.to_dict() == policy.to_dict()


def test_answer_rules_need_the_answers_protocol():
    prog = Fake()
    prog.state = SimpleNamespace(votes=[])
    with pytest.raises(ConfigError, match="state.answers"):
        ESC().decide(prog)
    with pytest.raises(ConfigError):
        AdaptiveConsistency(1.5)
    with pytest.raises(ConfigError):
        policy_from_dict({"kind": "esc", "windw": 3})


async def test_policies_drive_a_real_program():
    b = ct.ScriptedBackend(responses=lambda req: "\\boxed{4}" if req.branch else "\\boxed{5}")
    r = await ct.Runtime(b).run(sc_program(branches_per_round=2, cap=16, policy=AdaptiveConsistency(0.95)),
                                question="q")
    assert r.exit_reason == "adaptive_consistency" and r.knob_used == 7  # one 5, six 4s
    assert math.isclose(beta_stop_probability(5, 1), 1 - 8 / 128) and beta_stop_probability(6, 1) > 0.95

"""The answer-is-final classifier on text probes (algorithms/signals/final.py)."""

from __future__ import annotations

import pytest

import certa as ct
from certa.algorithms.programs.cot_probe import cot_program
from certa.algorithms.signals.cot import AllOf, ChainView, ProbeAgreement, signal_from_dict
from certa.algorithms.signals.final import FEATURES, FinalAnswer, final_features, final_probability
from certa.algorithms.signals.text import for_problem
from certa.runtime.errors import ConfigError

Q = "Janet sells eggs for $2 each. She has 16 eggs and eats 7. How much in dollars does she make every day?"
STATES = "She has 16 - 7 = 9 eggs left, and 9 * 2 = 18. So the answer is 18.\n"
CONFIRMS = "Yes, so the answer is 18.\n" + "That matches the eggs. " * 20


def test_features_of_the_committed_answer():
    assert final_features("She has 16 - 7 = 9 eggs left.\n", Q, "gsm8k") == (None, [0.0] * len(FEATURES))
    value, f = final_features(STATES, Q, "gsm8k")
    named = dict(zip(FEATURES, f))
    assert value == "18" and len(f) == len(FEATURES)
    assert named["answer"] == 1.0 and named["boxed"] == 0.0 and named["fits"] == 1.0 and named["in_question"] == 0.0
    assert dict(zip(FEATURES, final_features("So the answer is 16.\n", Q, "gsm8k")[1]))["in_question"] == 1.0


def test_the_fitted_model_scores_a_settled_answer_above_a_doubted_one_and_a_question_number():
    rule = FinalAnswer().for_problem(Q, "gsm8k")
    settled = rule.probability(STATES + CONFIRMS)[1]
    doubted = rule.probability("So she makes 9 dollars.\nWait, but she also sells")[1]
    echoed = rule.probability("So the answer is 16.\n")[1]
    assert settled >= rule.threshold > max(doubted, echoed)
    assert rule(ChainView([], STATES + CONFIRMS, 200)) == 1.0
    assert rule(ChainView([], "She has 16 - 7 = 9 eggs left.\n", 20)) == 0.0  # no answer stated: no exit
    assert FinalAnswer(threshold=0.999).for_problem(Q, "gsm8k")(ChainView([], STATES + CONFIRMS, 200)) == 0.0


def test_round_trip_binding_and_bad_specs():
    rule = FinalAnswer(threshold=0.8)
    assert signal_from_dict(rule.to_dict()) == rule  # weights come back as a tuple
    bound = for_problem(AllOf(ProbeAgreement(1), rule), "How many?", "gsm8k")
    assert bound.parts[1].question == "How many?" and bound.parts[1].dataset == "gsm8k"
    assert final_probability([0.0] * len(FEATURES), [1.0] * len(FEATURES), 0.0) == 0.5
    with pytest.raises(ConfigError):
        FinalAnswer(weights=(1.0,))
    with pytest.raises(ConfigError):
        FinalAnswer(threshold=1.0)


def test_live_text_program_exits_on_the_classifier_and_forces_the_answer():
    chain = STATES + CONFIRMS + "and so on " * 60
    b = ct.ScriptedBackend(responses=[chain], probe=lambda text, suffix: "18}")
    prog = cot_program("text", max_tokens=400, family="r1", signal=FinalAnswer(), interval=8, dataset="gsm8k")
    r = ct.Runtime(b).run_sync(prog, question=Q)
    assert r.exit_reason == "certaindex" and r.answer == "18"
    assert r.tokens.main < len(chain.split()) and r.tokens.probe == 1


def test_doctests():
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module("certa.algorithms.signals.final"))
    assert result.attempted > 0 and result.failed == 0

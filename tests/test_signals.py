"""Certaindex signals: entropy, reward, probe consistency (Dynasor's rule done right), AND."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from certa.algorithms.signals import (
    HESITATION_WORDS, ProbeObs, all_of, entropy_certainty, has_hesitation, probe_consistency,
    reward_certainty,
)
from certa.runtime.errors import ConfigError


def test_entropy_extremes_and_values():
    assert entropy_certainty(["18"] * 5) == 1.0
    assert entropy_certainty(["1", "2", "3", "4"]) == 0.0
    assert entropy_certainty(["a", "a", "b", "b"]) == pytest.approx(0.5)
    n, h = 4, -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert entropy_certainty(["a", "a", "a", "b"]) == pytest.approx((math.log(n) - h) / math.log(n))


def test_entropy_no_evidence_below_two_answers():
    assert entropy_certainty([]) == 0.0
    assert entropy_certainty(["18"]) == 0.0


def test_entropy_empty_answers_are_distinct():
    assert entropy_certainty(["", ""]) == 0.0
    assert entropy_certainty([None, None, "5", "5"]) < 1.0
    assert entropy_certainty(["18", "18.0", r"\frac{36}{2}"], same="math") == 1.0
    assert entropy_certainty(["18", "18.0"], same="exact") == 0.0


_ANSWERS = st.lists(st.one_of(st.sampled_from(["1", "2", "3", "x", "", None]), st.text(max_size=3)),
                    max_size=40)


@settings(max_examples=300)
@given(answers=_ANSWERS)
def test_entropy_properties(answers):
    c = entropy_certainty(answers)
    assert 0.0 <= c <= 1.0
    if len(answers) < 2:
        assert c == 0.0
        return
    keys = [a.strip() if isinstance(a, str) else a for a in answers]
    nonempty = [k for k in keys if k]
    all_agree = len(nonempty) == len(keys) and len(set(keys)) == 1
    all_differ = len(set(nonempty)) == len(nonempty) and all(
        nonempty.count(k) == 1 for k in nonempty)
    assert (c == 1.0) == all_agree
    assert (c == 0.0) == all_differ


@settings(max_examples=50)
@given(n=st.integers(2, 5000), k=st.integers(1, 5000))
def test_entropy_strictly_inside_when_mixed(n, k):
    k = min(k, n - 1)
    answers = ["a"] * k + [str(i) for i in range(n - k)]
    c = entropy_certainty(answers)
    if k == 1:
        assert c == 0.0
    else:
        assert 0.0 < c < 1.0


def test_reward_certainty():
    assert reward_certainty([0.2, 0.6]) == pytest.approx(0.4)
    assert reward_certainty([0.2, 0.6], agg="max") == pytest.approx(0.6)
    assert reward_certainty([-1.0, 3.0], agg="max", low=-5, high=5) == pytest.approx(0.8)
    assert reward_certainty([2.0]) == 1.0 and reward_certainty([-2.0]) == 0.0
    assert reward_certainty([]) == 0.0
    assert reward_certainty([float("nan"), 0.5]) == 0.5
    with pytest.raises(ConfigError):
        reward_certainty([0.5], agg="median")
    with pytest.raises(ConfigError):
        reward_certainty([0.5], low=1.0, high=1.0)


@settings(max_examples=200)
@given(rewards=st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20),
       agg=st.sampled_from(["mean", "max"]))
def test_reward_certainty_in_unit_interval(rewards, agg):
    assert 0.0 <= reward_certainty(rewards, agg=agg, low=-1e300, high=1e300) <= 1.0


@pytest.mark.parametrize("text", ["Wait, that's wrong", "hmm.", "HOLD on", "but then", "Okay so",
                                  "No, 17", "it is 18 (no doubt)"])
def test_hesitation_whole_words(text):
    assert has_hesitation(text)


@pytest.mark.parametrize("text", ["not", "I know", "threshold", "distribute", "denominator",
                                  "None", "waiting", "hmmm", "nobody", "", None])
def test_no_hesitation_inside_words(text):
    assert not has_hesitation(text)


def test_hesitation_custom_words():
    assert has_hesitation("Let me double-check", words=("double-check",))
    assert not has_hesitation("wait", words=())
    assert HESITATION_WORDS == ("wait", "hold", "but", "okay", "no", "hmm")


def test_probe_consistency_accepts():
    probes = [ProbeObs(32, "17", "17}"), ProbeObs(64, "18", "18} \\]"), ProbeObs(96, "18.0", "18.0}")]
    assert probe_consistency(probes, k=2) == 1.0
    assert probe_consistency([("18", "18}"), ("18", "18}")], k=2) == 1.0
    assert probe_consistency([(1, "18", "18}"), (2, "18", "}")], k=2) == 1.0
    assert probe_consistency([{"answer": "18", "text": ""}] * 3, k=3) == 1.0


def test_probe_consistency_regression_dynasor_should_early_exit_bug():
    # Dynasor's should_early_exit returned True here (inconsistent but hesitation-free).
    probes = [ProbeObs(32, "18", "18}"), ProbeObs(64, "20", "20}")]
    assert probe_consistency(probes, k=2) == 0.0
    probes = [ProbeObs(32, "18", "18}"), ProbeObs(64, "18", "18}"), ProbeObs(96, "20", "20}")]
    assert probe_consistency(probes, k=3) == 0.0


def test_probe_consistency_rejects():
    ok = ProbeObs(0, "18", "18}")
    assert probe_consistency([ok], k=2) == 0.0  # too few probes
    assert probe_consistency([ok, ProbeObs(1, "", "")], k=2) == 0.0  # empty answer
    assert probe_consistency([ok, ProbeObs(1, "18", "18} wait")], k=2) == 0.0  # hesitation
    assert probe_consistency([ok, ProbeObs(1, "18", "18} I know it")], k=2) == 1.0  # "know" is fine
    assert probe_consistency([ProbeObs(0, "x", "wait"), ok, ok], k=2) == 1.0  # only the last k
    with pytest.raises(ConfigError):
        probe_consistency([ok], k=0)
    with pytest.raises(ConfigError):
        probe_consistency([object()], k=1)


def test_all_of():
    assert all_of(0.9, 0.4, 1.0) == 0.4
    assert all_of() == 0.0
    assert all_of(1.0) == 1.0
    assert all_of(0.5, float("nan")) == 0.0
    assert all_of(1.5, 2.0) == 1.0 and all_of(-1.0) == 0.0

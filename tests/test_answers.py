"""Answer extraction and normalization: examples, dataset quirks, and never-raise/never-hang."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certa.algorithms.answers import (
    MAX_SCAN, canonical_dataset, extract_answer, extract_boxed, extract_probe_answer,
    gold_answer, gsm8k_gold, normalize,
)


@pytest.mark.parametrize("text, want", [
    (r"so \boxed{5}.", "5"),
    (r"\boxed{1} and then \boxed{2}", "2"),
    (r"$\boxed{\frac{a}{b}}$", r"\frac{a}{b}"),
    (r"\boxed{\frac{\sqrt{3}}{2}} \]", r"\frac{\sqrt{3}}{2}"),
    (r"\fbox{7}", "7"),
    (r"\boxed{\{1,2\}}", r"\{1,2\}"),
    (r"\boxed{\left\{ x \right.}", r"\left\{ x \right."),
    (r"\boxed{3} then truncated \boxed{4", "3"),
    (r"\boxed{\boxed{9}}", r"\boxed{9}"),
    (r"\boxed 5$", "5"),
    ("no box here", None),
    (r"\boxed{", None),
    ("", None),
    (None, None),
])
def test_extract_boxed(text, want):
    assert extract_boxed(text) == want


@pytest.mark.parametrize("cont, want", [
    ("18} \\]", "18"),
    (r"\frac{1}{2}} \]", r"\frac{1}{2}"),
    (" 42 }\n\\]\nWait", "42"),
    (r"\{1,2\}} \]", r"\{1,2\}"),
    ("}", ""),
    ("18 and the probe budget ran out", ""),
    (r"\frac{1}{2", ""),
    ("", ""),
    (None, ""),
])
def test_extract_probe_answer(cont, want):
    assert extract_probe_answer(cont) == want


def test_gsm8k_gold():
    assert gsm8k_gold("Janet sells 9 eggs.\n#### 18") == "18"
    assert gsm8k_gold("x\n#### 1,000") == "1000"
    assert gsm8k_gold(None) == ""


@pytest.mark.parametrize("text, dataset, want", [
    (r"Thus \boxed{18}. The answer is 17", "gsm8k", "18"),
    ("9 * 2 = 18\n#### 18", "gsm8k", "18"),
    ("So the answer is $\\frac{3}{4}$.", "math", r"\frac{3}{4}"),
    ("The final answer is: **42**. Done.", "math500", "42"),
    ("Final Answer: 7", "math", "7"),
    ("The answer is 3.5. Indeed", "gsm8k", "3.5"),
    ("She has 3-4 apples and 1,234 pears", "gsm8k", "1234"),
    ("numbers 1,2,3", "asdiv", "3"),
    ("The answer is clear: it's 12 apples", "asdiv", "clear: it's 12 apples"),
    ("The answer is seven. I counted 7", "asdiv", "7"),
    ("we get 25 in the end", "aime24", "25"),
    ("we get 25 in the end", "math", None),
    ("", "gsm8k", None),
    (None, "math", None),
])
def test_extract_answer(text, dataset, want):
    assert extract_answer(text, dataset) == want


@pytest.mark.parametrize("text, dataset, want", [
    # a partial thought: the default guesses its last number, strict says there is no answer yet
    ("Janet sells 16 - 3 - 4 = 9 eggs, so she makes 9 * 2", "gsm8k", None),
    ("we get 25 in the end", "aime24", None),
    ("numbers 1,2,3", "asdiv", None),
    ("The answer is seven. I counted 7", "asdiv", None),   # a marked answer without a digit: no number guessed
    (r"so far \boxed{3} and then 4 + 5 = 9", "gsm8k", "3"),  # explicit markers still count
    (r"\boxed{3} then truncated \boxed{4", "gsm8k", "3"),
    ("9 * 2 = 18\n#### 18", "gsm8k", "18"),
    ("The answer is 3.5. Indeed", "gsm8k", "3.5"),
    ("So the answer is $\\frac{3}{4}$.", "math", r"\frac{3}{4}"),
    ("The answer is clear: it's 12 apples", "asdiv", "clear: it's 12 apples"),
    ("", "gsm8k", None),
    (None, "gsm8k", None),
])
def test_extract_answer_strict_never_guesses_a_number(text, dataset, want):
    assert extract_answer(text, dataset, strict=True) == want


def test_strict_is_keyword_only_and_default_keeps_the_last_number_fallback():
    partial = "Janet sells 16 - 3 - 4 = 9 eggs, so she makes 9 * 2"
    assert extract_answer(partial, "gsm8k") == "2"  # the documented default (graders rely on it)
    assert extract_answer(partial, "gsm8k", strict=False) == "2"
    with pytest.raises(TypeError):
        extract_answer(partial, "gsm8k", True)  # noqa: FBT003 - strict must be named


@pytest.mark.parametrize("raw, dataset, want", [
    ("$18$", "math", "18"),
    (r"\text{Evelyn}", "math", "Evelyn"),
    (r"\left( 3, \frac{\pi}{2} \right)", "math", r"(3,\frac{\pi}{2})"),
    (r"\dfrac{1}{2}", "math", r"\frac{1}{2}"),
    (r"90^\circ", "math", "90"),
    (r"90^{\circ}", "math", "90"),
    (r"10\%", "math", "10"),
    (r"\$18.00", "gsm8k", "18"),
    ("1,000", "gsm8k", "1000"),
    ("1{,}000", "math", "1000"),
    ("1,-2", "math", "1,-2"),
    ("5.", "math", "5"),
    (r"\!5", "math", "5"),
    ("025", "aime24", "25"),
    ("000", "aime", "0"),
    (27.0, "amc23", "27"),
    ("-1.0", "amc23", "-1"),
    ("-0.50", "math", "-0.5"),
    ("9 (apples)", "asdiv", "9"),
    ("12 (inches of snow)", "asdiv", "12"),
    ("2:3", "asdiv", "2:3"),
    (r"18 \text{ dollars}", "gsm8k", "18"),
    (r"\text{(C)}", "math", "C"),
    (r"\pi r^2", "math", r"\pi r^2"),
    (r"\mathrm{cm}^2", "math", "cm^2"),
    ("+7", "math", "7"),
    (None, "math", ""),
])
def test_normalize(raw, dataset, want):
    assert normalize(raw, dataset) == want


def test_canonical_dataset():
    assert [canonical_dataset(d) for d in ("MATH500", "aime24", "amc", "asdiv", None, "x")] == \
        ["math", "aime", "amc", "asdiv", "math", "math"]


def test_gold_answer_rows():
    assert gold_answer({"answer": "work\n#### 1,234"}, "gsm8k") == "1234"
    assert gold_answer({"answer": r"\frac{14}{3}"}, "math500") == r"\frac{14}{3}"
    assert gold_answer({"answer": "073"}, "aime24") == "73"
    assert gold_answer({"answer": -1.0}, "amc23") == "-1"
    assert gold_answer({"answer": "9 (apples)"}, "asdiv") == "9"
    assert gold_answer({"gold": "5"}, "math") == "5"
    assert gold_answer({}, "math") == ""


def test_scans_are_capped():
    text = r"\boxed{1}" + "x" * (MAX_SCAN + 10)
    assert extract_boxed(text) is None  # the early box is outside the scanned tail
    assert extract_boxed("x" * (3 * MAX_SCAN) + r"\boxed{2}") == "2"


# ---- never raise, never hang -----------------------------------------------------------
_LATEX_BITS = st.sampled_from([
    "\\boxed{", "\\fbox{", "{", "}", "\\{", "\\}", "\\frac{", "\\text{", "\\left(", "\\right)",
    "^{", "\\circ", "$", "####", "the answer is ", "Final Answer:", "1,000", "-", ".", "%",
    "\\%", " ", "\n", "9", "0", "x", "(apples)", "\\dfrac", "\\!", "\\\\",
])
_ADVERSARIAL_TEXT = st.lists(_LATEX_BITS, max_size=300).map("".join)
_ANY_TEXT = st.one_of(st.text(max_size=2000), _ADVERSARIAL_TEXT)
_DATASETS = st.sampled_from(["gsm8k", "math", "math500", "aime24", "amc23", "asdiv", "other"])


def _all_extractors(text: str, dataset: str) -> None:
    extract_boxed(text)
    extract_probe_answer(text)
    gsm8k_gold(text)
    a = extract_answer(text, dataset)
    assert a is None or isinstance(a, str)
    strict = extract_answer(text, dataset, strict=True)
    assert strict is None or strict == a  # strict only drops the last-number guess
    assert isinstance(normalize(text, dataset), str)
    assert isinstance(normalize(a, dataset), str)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(text=_ANY_TEXT, dataset=_DATASETS)
def test_extractors_never_raise(text, dataset):
    start = time.perf_counter()
    _all_extractors(text, dataset)
    assert time.perf_counter() - start < 2.0


_HUGE = [
    "{" * 50_000 + "}" * 10,
    "\\boxed{" * 20_000,
    "\\boxed{" * 5_000 + "1" + "}" * 5_000,
    "\\frac{" * 5_000 + "1}{2}" * 5_000,
    "\\text{" * 10_000 + "a",
    "\\text{" * 3_000 + "a" + "}" * 3_000,
    "10^{" + "9" * 200_000 + "}",
    "9^{9^{9^{9^{9^{9}}}}}" * 1_000,
    "1" * 200_000,
    "1," * 100_000,
    "-" * 100_000 + "1",
    "the answer is " * 10_000,
    "####" * 50_000,
    ("\\left( " * 2_000) + ("\\right)" * 2_000),
    "$" * 100_000,
    "\\boxed 1" * 20_000,
]


@pytest.mark.parametrize("text", _HUGE, ids=range(len(_HUGE)))
@pytest.mark.parametrize("dataset", ["math", "gsm8k", "asdiv"])
def test_adversarial_latex_is_fast(text, dataset):
    start = time.perf_counter()
    _all_extractors(text, dataset)
    assert time.perf_counter() - start < 2.0

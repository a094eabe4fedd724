r"""Is the chain's committed answer its final one? Text features and a small logistic model.

A reasoning chain states many values that look like answers ("so she makes 18 dollars");
most early ones are intermediate results. :func:`final_features` describes, from the text
streamed so far alone, the answer the chain has committed to (the latest statement of
:func:`~certa.algorithms.signals.text.statements`): how it was stated, how often and how long
it has been restated, what followed it (doubt, verification, new results, confirmation
words), whether it is the asked-for type and quantity and whether it is one of the question's
own numbers. :class:`FinalAnswer` is the CoT signal: 1.0 iff a logistic model on these
features says the committed answer is final with probability >= ``threshold``.

The weights are fitted on the per-probe rows of reasoning traces (label: the committed answer
equals the chain's final answer) by ``benchmarks/reasoning_final.py``, leave-one-model-out.
It exits earlier than the ``text`` preset's :class:`~certa.algorithms.signals.text.Committed`
rule but, at a threshold fixed on other models, loses more accuracy on some (the first
statement of the final value looks like an intermediate one: docs/algorithms.md), so it is an
opt-in signal (``cot_program("text", signal=FinalAnswer())``), not the default.

Example:
    >>> q = "Janet sells eggs for $2 each. How much in dollars does she make?"
    >>> value, f = final_features("She has 9 eggs. So she makes 9 * 2 = 18 dollars.\n\nYes. ", q, "gsm8k")
    >>> value, len(f) == len(FEATURES)
    ('18', True)
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from certa.runtime.errors import ConfigError

from certa.algorithms.signals.cot import ChainView
from certa.algorithms.signals import text as _text

__all__ = ["FEATURES", "FINAL_BIAS", "FINAL_THRESHOLD", "FINAL_WEIGHTS", "FinalAnswer", "final_features",
           "final_probability"]

FEATURES: tuple[str, ...] = (
    "boxed", "answer", "run", "count", "distinct", "since_last", "since_first", "doubt_tail", "doubt_recent",
    "check_tail", "new_results", "last_result_is_value", "mentions_tail", "new_numbers_tail", "in_question",
    "fits", "names_quantity", "question_numbers_used", "length", "ever_answer", "confirm_words",
)
"""The feature names of :func:`final_features`, in order."""

FINAL_WEIGHTS: tuple[float, ...] = (
    0.8672, 1.8769, 0.8395, 1.4666, -0.3844, -0.046, -0.2672, 0.1389, -0.0557, 0.2718, 0.2285, 0.886, -0.2559,
    -0.4026, -0.6634, 1.0502, -0.11, 1.654, -0.0651, 0.2937, 0.386)
FINAL_BIAS = -4.0362
FINAL_THRESHOLD = 0.93
"""The logistic model fitted on the three GSM8K reasoning dev files (Qwen3-0.6B, Phi-4-mini-
reasoning, R1-Distill-Llama-8B; ``benchmarks/reasoning_final.py``) and the threshold chosen on
them (the lowest mean token ratio within 1 point on each). NOT the ``text`` preset's default:
leave-one-model-out it does not beat :class:`~certa.algorithms.signals.text.Committed` at
equal accuracy on every left-out model (docs/results/reasoning/final_classifier.json)."""

_WINDOW = 3000  # characters of the tail read (the latest statement's aftermath); bounds the cost per probe
_CHECK = re.compile(r"\b(?:check|verify|verif|confirm|double|re-?calculate|recompute|again)", re.IGNORECASE)
_CONFIRM = re.compile(r"\b(?:yes|yep|yeah|correct|right|consistent|makes sense|matches|checks out|same|"
                      r"confirms?|that's it|i think that's)\b", re.IGNORECASE)
_NUM = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


def _num(s: str) -> str:
    return s.replace(",", "").rstrip(".")


def _log(x: float) -> float:
    return math.log1p(max(0.0, x))


def final_features(text: str, question: str, dataset: str) -> tuple[str | None, list[float]]:
    """The committed answer of ``text`` (None when it has stated none) and its features
    (:data:`FEATURES`; all zeros without an answer)."""
    found = _text.statements(text, dataset=dataset, question=question)
    if not found:
        return None, [0.0] * len(FEATURES)
    last = found[-1]
    value = last.value
    same = [_text.same_answer(st.value, value) for st in found]
    run = 0
    for s in reversed(same):
        if not s:
            break
        run += 1
    first = next(st for st, s in zip(found, same) if s)
    tail = text[last.end:][-_WINDOW:]
    recent = text[-200:]
    doubt = len(_text.DOUBT_RE.findall(tail))
    results = [_num(r) for r in _text.RESULT_RE.findall(tail)]
    other = [r for r in results if not _text.same_answer(r, value)]
    nums = [_num(n) for n in _NUM.findall(tail)]
    qnums = {_num(n) for n in _NUM.findall(question)}
    plain = _num(value.replace("\\%", "").rstrip("%"))
    mentions = sum(n == plain for n in nums)
    fresh = {n for n in nums if n != plain and n not in qnums}
    used = sum(n in text for n in qnums) / len(qnums) if qnums else 1.0
    sentence = text[text.rfind("\n", 0, max(0, last.end - 1)) + 1:last.done]
    f = [
        float(last.kind == "boxed"), float(last.kind == "answer"), _log(run), _log(sum(same)),
        _log(len({st.value for st in found})), _log((len(text) - last.end) / 100), _log((len(text) - first.end) / 100),
        _log(doubt), float(bool(_text.DOUBT_RE.search(recent))), _log(len(_CHECK.findall(tail))), _log(len(other)),
        float(bool(results) and _text.same_answer(results[-1], value)), _log(mentions), _log(len(fresh)),
        float(plain in qnums), float(_text.fits(value, dataset, question)),
        float(_text.names_quantity(sentence, _text.asked_quantity(question) if question else frozenset())),
        used, _log(len(text) / 1000), float(any(st.kind != "conclude" for st in found)),
        _log(len(_CONFIRM.findall(tail))),
    ]
    return value, f


def final_probability(features: Sequence[float], weights: Sequence[float], bias: float) -> float:
    """The logistic model's probability that the committed answer is final."""
    z = bias + sum(w * x for w, x in zip(weights, features))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


@dataclass(frozen=True)
class FinalAnswer(_text.ProblemBound):
    """1.0 iff the committed answer is final with probability >= ``threshold`` (see the module
    docstring). ``weights``/``bias``: the logistic model over :data:`FEATURES`."""

    weights: tuple[float, ...] = FINAL_WEIGHTS
    bias: float = FINAL_BIAS
    threshold: float = FINAL_THRESHOLD
    dataset: str = "math"
    question: str = ""
    kind: ClassVar[str] = "final"

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))  # to_dict writes a list
        if len(self.weights) != len(FEATURES):
            raise ConfigError(f"final needs {len(FEATURES)} weights, got {len(self.weights)}",
                              hint="one per name of FEATURES")
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError(f"final needs 0 < threshold < 1, got {self.threshold}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "weights": list(self.weights), "bias": self.bias, "threshold": self.threshold}

    def probability(self, text: str) -> tuple[str | None, float]:
        """The committed answer and the probability that it is final."""
        value, f = final_features(text, self.question, self.dataset)
        return value, (0.0 if value is None else final_probability(f, self.weights, self.bias))

    def __call__(self, view: ChainView) -> float:
        value, p = self.probability(view.text)
        if value is None or p < self.threshold:
            return 0.0
        return float(not view.probes or not view.probes[-1].answer or _text.same_answer(view.probes[-1].answer, value))

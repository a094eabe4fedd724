r"""CoT certaindex signals: when is a chain of thought's answer settled? (robust past Dynasor).

Dynasor's rule (:class:`ProbeAgreement`: the last ``k`` probed answers agree, no hesitation
word) works on R1-style reasoning models; a small non-reasoning model answers a probe with a
confident default guess long before it has computed anything, so agreement alone is weak
evidence. Each class here is one more piece of evidence, with one interface — called on a
:class:`ChainView` (the probes so far, the chain's text so far, its main tokens), returning a
value in [0, 1] — and composable with :class:`AllOf` (AND = minimum):

- :class:`Grounded` — the probed answer has been *produced by the reasoning text*: it is the
  right-hand side of an ``=`` (``computed``: whose left side holds an arithmetic operator;
  ``stated``: any ``=``, or "answer is ...").
- :class:`Confident` — the probability the model gives its probed answer (from the greedy
  probe tokens' logprobs, recorded by the llama.cpp engine) is at least ``min_prob``.
- :class:`Progress` — the chain has reached ``fraction`` of the typical chain length
  (``typical``: learned from history — calibration sets it from the calibration split's
  finished chains, as SJF learns tokens per step).
- :class:`Settled` — no hesitation word ("wait", "hmm", "let me check", ...) in the last
  ``chars`` characters of the chain's own text, not only in the probe.

Signals serialize with ``to_dict`` / :func:`signal_from_dict`, so a calibrated policy file
carries its CoT signal. Two hints let programs skip probes that could not matter:
``min_tokens`` (the main-token count before which the signal is 0.0) and ``probe_due(new_text)``
(event-triggered probing: :class:`Grounded` probes only after the chain has written a new
result since the last probe).

Example:
    >>> from certa.algorithms.signals import ProbeObs
    >>> text = "She sells 16 - 3 - 4 = 9 eggs at $2 each: 9 * 2 = 18 dollars."
    >>> view = ChainView([ProbeObs(32, "18", "18}"), ProbeObs(64, "18", "18}")], text, 64)
    >>> rule = AllOf(ProbeAgreement(2), Grounded("computed"))
    >>> rule(view), Grounded()(ChainView([ProbeObs(32, "3", "3}")], text, 32))
    (1.0, 0.0)
    >>> signal_from_dict(rule.to_dict()) == rule
    True
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from certa.runtime.errors import ConfigError
from certa.runtime.registry import Registry

from certa.algorithms.signals.multipath import HESITATION_WORDS, ProbeObs, has_hesitation, probe_consistency

__all__ = ["AllOf", "AnyOf", "COT_SIGNALS", "ChainView", "Confident", "CoTSignal", "Grounded", "MAIN_TEXT_HESITATION",
           "ProbeAgreement", "Progress", "Settled", "answer_probability", "signal_from_dict"]

MAIN_TEXT_HESITATION: tuple[str, ...] = ("wait", "hmm", "hold on", "actually", "mistake", "re-evaluate",
                                         "reconsider", "recheck", "double-check", "let me check", "let's check")
"""Hesitation in the chain's own text (whole words/phrases, case-insensitive)."""


@dataclass(frozen=True)
class ChainView:
    """What a CoT signal sees: every probe so far, the chain's text so far, its main tokens."""

    probes: Sequence[ProbeObs]
    text: str
    tokens: int


class CoTSignal:
    """Base of CoT signals: ``signal(view) -> float`` in [0, 1]; ``window``/``min_tokens`` hints."""

    kind: ClassVar[str] = ""
    window: int = 1  # probes the signal looks back over
    reads_probes: ClassVar[bool] = True  # False: reads the chain's text only (a probe cannot change it)

    def __call__(self, view: ChainView) -> float:
        raise NotImplementedError

    @property
    def min_tokens(self) -> int:
        """Main tokens before which the signal is 0.0 whatever the probes say."""
        return 0

    @property
    def needs(self) -> frozenset[str]:
        """Probe fields this signal reads beyond ``answer``/``text`` (e.g. ``logprobs``)."""
        return frozenset()

    def probe_due(self, new_text: str, view: ChainView | None = None) -> bool:
        """Whether a probe now could change anything, given the chain text written since the
        last probe and (when given) the chain so far, its probes before this one (event-triggered
        probing: a signal that needs new evidence says no)."""
        return True

    def answer(self, view: ChainView) -> str | None:
        """The answer this signal vouches for when it reads 1.0 (default: the latest probe's)."""
        return view.probes[-1].answer if view.probes else None

    def settled_by_text(self, view: ChainView) -> bool:
        """Whether the chain's text alone already sets this signal to 1.0 (a probe is then moot)."""
        return not self.reads_probes and self(view) >= 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: v for k, v in vars(self).items()}}


@dataclass(frozen=True)
class ProbeAgreement(CoTSignal):
    """Dynasor's rule (correctly): the last ``k`` probed answers are non-empty, equivalent and
    hesitation-free (:func:`~certa.algorithms.signals.probe_consistency`)."""

    k: int = 3
    kind: ClassVar[str] = "agree"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"probe window k must be >= 1, got {self.k}")

    @property
    def window(self) -> int:  # type: ignore[override]
        return self.k

    def __call__(self, view: ChainView) -> float:
        return probe_consistency(view.probes, self.k, words=HESITATION_WORDS)


_NUM = r"-?\d[\d,]*(?:\.\d+)?"
_OPERATOR = re.compile(r"[+\-*/×÷]|\\times|\\cdot|\\div|\\frac")
_ANSWER_IS = re.compile(r"\banswer\s+is\s*:?\s*", re.IGNORECASE)
_OUTPUT = re.compile(r"```output\s*\n")  # a code model's (imagined) program output: a computed result
_VALUE = r"\s*[^\s=]"  # a value has started after the anchor
_NEW_RESULT = re.compile(r"(?:=|```output\s*\n)" + _VALUE)
_NEW_STATED = re.compile(r"(?:=|```output\s*\n|\banswer\s+is\s*:?)" + _VALUE, re.IGNORECASE)
_STRIP = re.compile(r"\\[$%!,;]|[$%\s]|\\text\{[^}]*\}|\\(?:left|right|mathrm|textbf)|\\[()\[\]]")


def _norm(s: str) -> str:
    s = _STRIP.sub("", s)
    return re.sub(r"(?<=\d),(?=\d{3})", "", s).rstrip(".")


def _as_number(s: str) -> float | None:
    m = re.fullmatch(_NUM, s)
    if not m:
        return None
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def _produces(rhs: str, answer: str) -> bool:
    """Whether the text right after an ``=`` starts with ``answer`` (as a whole value, on its line)."""
    rhs, ans = _norm(rhs.lstrip().split("\n", 1)[0][:60]), _norm(answer)
    if not ans:
        return False
    a, lead = _as_number(ans), re.match(_NUM, rhs)
    if a is not None and lead is not None:  # numbers: compare values (18 = 18.00 = 18.0)
        value = _as_number(lead.group(0).rstrip(".,"))
        return value is not None and math.isclose(value, a, rel_tol=0, abs_tol=1e-9)
    if not rhs.startswith(ans):
        return False
    rest = rhs[len(ans):]
    return not rest or not (rest[0].isdigit() or (rest[0] == "." and rest[1:2].isdigit()))


@dataclass(frozen=True)
class Grounded(CoTSignal):
    """1.0 iff the latest probed answer was produced by the chain's own text.

    ``computed``: it is the right-hand side of an ``=`` whose left side (same line) holds an
    arithmetic operator — the result of a computation, not a restated given — or the first line
    of a code model's `````output`` block. ``stated``: also the right-hand side of any ``=``,
    or what follows "answer is".
    """

    mode: Literal["computed", "stated"] = "computed"
    kind: ClassVar[str] = "grounded"

    def __post_init__(self) -> None:
        if self.mode not in ("computed", "stated"):
            raise ConfigError(f"unknown grounding mode {self.mode!r}", hint="computed or stated")

    def probe_due(self, new_text: str, view: ChainView | None = None) -> bool:
        """Only once the chain has written a new result: an ``=`` or output block (or "answer
        is", when stated) followed by a value. An anchor whose value is not written yet is not
        due; the caller keeps the text since the last probe, so the next chunk completes it."""
        return bool((_NEW_STATED if self.mode == "stated" else _NEW_RESULT).search(new_text))

    def __call__(self, view: ChainView) -> float:
        if not view.probes or not view.probes[-1].answer:
            return 0.0
        answer, text = view.probes[-1].answer, view.text
        for m in re.finditer(r"=", text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            if self.mode == "computed" and not _OPERATOR.search(text[line_start:m.start()]):
                continue
            if _produces(text[m.end():], answer):
                return 1.0
        if any(_produces(text[m.end():], answer) for m in _OUTPUT.finditer(text)):
            return 1.0
        if self.mode == "stated":
            return float(any(_produces(text[m.end():], answer) for m in _ANSWER_IS.finditer(text)))
        return 0.0


def answer_probability(probe: ProbeObs) -> float | None:
    """Probability of the probe's greedy continuation (product over its tokens), or None."""
    if probe.logprobs is None:
        return None
    return math.exp(min(0.0, math.fsum(probe.logprobs)))


@dataclass(frozen=True)
class Confident(CoTSignal):
    """1.0 iff the model gives the latest probed answer probability >= ``min_prob``."""

    min_prob: float = 0.5
    kind: ClassVar[str] = "confident"

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_prob <= 1.0:
            raise ConfigError(f"min_prob must be in [0, 1], got {self.min_prob}")

    @property
    def needs(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset({"logprobs"})

    def __call__(self, view: ChainView) -> float:
        if not view.probes:
            return 0.0
        p = answer_probability(view.probes[-1])
        return float(p is not None and p >= self.min_prob)


@dataclass(frozen=True)
class Progress(CoTSignal):
    """1.0 once the chain has ``fraction`` x ``typical`` main tokens (``typical`` learned from history)."""

    fraction: float = 0.5
    typical: float = 0.0
    kind: ClassVar[str] = "progress"

    def __post_init__(self) -> None:
        if self.fraction < 0 or self.typical < 0 or not (math.isfinite(self.fraction) and math.isfinite(self.typical)):
            raise ConfigError(f"progress needs finite fraction, typical >= 0, got {self.fraction}, {self.typical}")

    @property
    def min_tokens(self) -> int:  # type: ignore[override]
        return math.ceil(self.fraction * self.typical)

    def __call__(self, view: ChainView) -> float:
        return float(view.tokens >= self.min_tokens)


@dataclass(frozen=True)
class Settled(CoTSignal):
    """1.0 iff the last ``chars`` characters of the chain's own text hold no hesitation phrase."""

    chars: int = 300
    kind: ClassVar[str] = "settled"

    def __call__(self, view: ChainView) -> float:
        return float(not has_hesitation(view.text[-self.chars:], MAIN_TEXT_HESITATION))


@dataclass(frozen=True, init=False)
class AllOf(CoTSignal):
    """AND of signals: the minimum of their values."""

    parts: tuple[CoTSignal, ...]
    kind: ClassVar[str] = "all"

    def __init__(self, *parts: CoTSignal) -> None:
        if not parts:
            raise ConfigError("AllOf needs at least one signal")
        object.__setattr__(self, "parts", tuple(parts))

    @property
    def window(self) -> int:  # type: ignore[override]
        return max(p.window for p in self.parts)

    @property
    def min_tokens(self) -> int:  # type: ignore[override]
        return max(p.min_tokens for p in self.parts)

    @property
    def needs(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset().union(*(p.needs for p in self.parts))

    @property
    def reads_probes(self) -> bool:  # type: ignore[override]
        return any(p.reads_probes for p in self.parts)

    def probe_due(self, new_text: str, view: ChainView | None = None) -> bool:
        return all(p.probe_due(new_text, view) for p in self.parts)

    def for_problem(self, question: str, dataset: str | None = None) -> "AllOf":
        """This rule with every problem-bound part (a text reader) bound to one problem."""
        return type(self)(*(_bind(p, question, dataset) for p in self.parts))

    def __call__(self, view: ChainView) -> float:
        out = 1.0
        for p in self.parts:  # cheapest evidence first is the caller's choice; stop at the first 0
            out = min(out, p(view))
            if out <= 0.0:
                return 0.0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "parts": [p.to_dict() for p in self.parts]}

    def answer(self, view: ChainView) -> str | None:
        """The first part's answer (put the part whose answer should be returned first)."""
        return self.parts[0].answer(view)


@dataclass(frozen=True, init=False)
class AnyOf(AllOf):
    """OR of signals: the maximum of their values. A probe is due when a part that reads probes
    wants one; :meth:`answer` is the answer of the first part that reads 1.0."""

    kind: ClassVar[str] = "any"

    def probe_due(self, new_text: str, view: ChainView | None = None) -> bool:
        return any(p.probe_due(new_text, view) for p in self.parts if p.reads_probes)

    def settled_by_text(self, view: ChainView) -> bool:
        return any(p.settled_by_text(view) for p in self.parts)

    @property
    def min_tokens(self) -> int:  # type: ignore[override]
        return min(p.min_tokens for p in self.parts)

    def __call__(self, view: ChainView) -> float:
        out = 0.0
        for p in self.parts:
            out = max(out, p(view))
            if out >= 1.0:
                return 1.0
        return out

    def answer(self, view: ChainView) -> str | None:
        return next((p.answer(view) for p in self.parts if p(view) >= 1.0), super().answer(view))


def _bind(signal: CoTSignal, question: str, dataset: str | None) -> CoTSignal:
    bind = getattr(signal, "for_problem", None)
    return bind(question, dataset) if callable(bind) else signal


COT_SIGNALS: Registry[CoTSignal] = Registry("CoT signal kind")
"""Every CoT signal by ``kind`` (what ``to_dict`` writes); :func:`signal_from_dict` rebuilds from it."""
for _cls in (ProbeAgreement, Grounded, Confident, Progress, Settled, AllOf, AnyOf):
    COT_SIGNALS.register(_cls.kind, _cls)  # help: the class docstring's first paragraph
for _kind, _name, _help in (("boxed", "Boxed", "the chain's thinking holds its boxed answer (text only)"),
                            ("stated", "TextAgrees", "the latest probe names the chain's committed answer"),
                            ("vote", "ProbeVote", "the latest probe holds a share of the probes of the last span")):
    COT_SIGNALS.register(_kind, f"certa.algorithms.signals.reasoning:{_name}", help=_help)
COT_SIGNALS.register("committed", "certa.algorithms.signals.text:Committed",
                     help="the chain's text has committed to its answer (a text probe: no decode tokens)")
COT_SIGNALS.register("final", "certa.algorithms.signals.final:FinalAnswer",
                     help="a logistic model on the chain's text says its committed answer is final (a text probe)")


def signal_from_dict(spec: dict[str, Any]) -> CoTSignal:
    """Rebuild a signal from ``to_dict`` output (ConfigError on an unknown kind or field)."""
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ConfigError(f"a CoT signal spec is a dict with a 'kind', got {spec!r}")
    kind, args = spec["kind"], {k: v for k, v in spec.items() if k != "kind"}
    if kind in (AllOf.kind, AnyOf.kind):
        return (AllOf if kind == AllOf.kind else AnyOf)(*(signal_from_dict(p) for p in args.get("parts", [])))
    cls = COT_SIGNALS.get(kind)
    try:
        return cls(**args)
    except TypeError as exc:
        raise ConfigError(f"bad {kind} signal spec {spec!r}: {exc}") from None

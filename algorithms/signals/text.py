r"""Text probes: CoT certaindex read from the streamed chain itself, at zero decode cost.

A reasoning model (R1-style, Qwen3, Phi-4-reasoning) states its answer long before it stops
thinking, then re-verifies it. Instead of asking the model (a probe costs decode tokens),
these signals read the answer the chain has *committed to* so far:

- :func:`statements` finds answer statements in the text: ``\boxed{X}`` and "the (final)
  answer is X" / "final answer: X" (kind ``answer``), and conclusions — a sentence opened by
  a conclusion marker ("so", "therefore", "thus", ...) whose clause ends in ``= X`` or
  ``is X`` (kind ``conclude``; intermediate results look like this too, so a conclusion
  only counts when it names the quantity the question asks for, :func:`asked_quantity`);
- :func:`committed_answer` is the value of the latest statement;
- :class:`Committed` is the signal: 1.0 iff the committed answer has been stated ``confirm``
  times in a row (each restatement after re-verification counts), the text since the latest
  statement holds no doubt ("wait", "but", "let me double-check", ...) and is at least
  ``quiet`` characters long (what follows a statement decides whether it was final), the run
  of statements has survived ``survive`` characters, and the value has the type the question
  asks for (a number for numeric datasets, an integer 0..999 for AIME, a percent when asked).

It implements :class:`~certa.algorithms.signals.cot.CoTSignal`, so it combines with the
probe signals through :class:`~certa.algorithms.signals.cot.AllOf` and round-trips through
``to_dict``/:func:`~certa.algorithms.signals.cot.signal_from_dict` (kind ``committed``).
Traces imported with ``certa traces import`` carry text probes (the committed answer every T
tokens); live, ``cot_program(probe="text")`` reads the stream and forces the answer on exit.

Example:
    >>> q = "Janet sells eggs for $2 each. How much in dollars does she make?"
    >>> t = "16 - 3 - 4 = 9 eggs. So she makes 9 * 2 = 18 dollars.\n\nWait, let me double-check: 9 * 2 = 18. "
    >>> [(s.kind, s.value) for s in statements(t, question=q)]
    [('conclude', '18')]
    >>> rule = Committed(confirm=1, quiet=0, question=q)
    >>> rule(ChainView([], t, 60)), rule(ChainView([], t + "So the answer is 18.\n", 70))
    (0.0, 1.0)
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeVar

from certa.runtime.errors import ConfigError

from certa.algorithms.answers.equivalence import math_equal
from certa.algorithms.answers.extract import NUMERIC_DATASETS, canonical_dataset
from certa.algorithms.signals.cot import AllOf, ChainView, CoTSignal

__all__ = ["Committed", "DOUBT_WORDS", "ProblemBound", "Statement", "asked_quantity", "check_statement_kinds",
           "committed_answer", "for_problem", "same_answer", "statements"]

DOUBT_WORDS: tuple[str, ...] = ("wait", "hmm", "hold on", "actually", "double-check", "double check", "recheck",
                                "re-check", "let me check", "let me verify", "let me recheck", "mistake",
                                "alternatively", "reconsider", "re-evaluate", "not sure", "is that right")
"""What follows a tentative answer: the chain is re-verifying it (whole words, case-insensitive)."""

DOUBT_RE = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in DOUBT_WORDS) + r")\b", re.IGNORECASE)
_HYPOTHETICAL = re.compile(r"\b(?:if|would|could|might|maybe|perhaps|suppose|assuming|unless|whether|or)\b",
                           re.IGNORECASE)
_NOT_FINAL = re.compile(r"^\s*(?:\?|[-+*/×÷^=]|\\times|\\cdot|\(|[a-z]*\s*[-+*/×÷=]\s*\d)")
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER = re.compile(r"\b(?:final\s+answer|answer)\s*(?:is|should\s+be|would\s+be|will\s+be|=|:)\s*:?\s*",
                     re.IGNORECASE)
_CONCLUDE = re.compile(r"(?:^|(?<=[.!\n:]))\s*(?:\*\*)?\s*(?:so|therefore|thus|hence|that\s+means|which\s+means|"
                       r"in\s+total|altogether|overall|finally)\b(?:[^.\n?]|\.(?=\d))*(?:=|\bis\b|\bare\b|\bmakes\b|"
                       r"\bearns\b|\bpays\b|\bneeds\b|\bhas\b|\bhave\b)\s*", re.IGNORECASE)
_NUMBER = re.compile(r"-?\$?\s*\d[\d,]*(?:\.\d+)?\s*(?:\\?%|percent)?")
_LATEX_VALUE = re.compile(r"\\[dt]?frac\{[^{}]*\}\{[^{}]*\}|\\sqrt\{[^{}]*\}|[-\d\w\\{}^+*/().,√π]+")
_WRAP = re.compile(r"^\s*(?:\*\*|\$+|\\\(|\\\[)\s*|\s*(?:\*\*|\$+|\\\)|\\\])\s*$")
_ASK = re.compile(r"\bhow\s+(?:many|much)\s+(?:more\s+|less\s+|fewer\s+)?([a-z]+)|\bwhat\s+(?:is|was|are|were)\s+"
                  r"(?:the\s+)?(?:total\s+)?([a-z]+)|\b(percent(?:age)?)\b", re.IGNORECASE)
_GENERIC = {"the", "a", "an", "is", "does", "do", "did", "will", "would", "can", "of", "in", "it", "he", "she",
            "they", "we", "you", "his", "her", "their", "total", "value", "number", "amount"}


@dataclass(frozen=True)
class Statement:
    """An answer statement in the chain's text: where it ends, its value and its kind."""

    end: int
    value: str
    kind: Literal["boxed", "answer", "conclude"]
    done: int = 0  # where its sentence closes: the statement is complete from here on


def _balanced(text: str, start: int) -> int | None:
    depth = 1
    for i in range(start, min(len(text), start + 400)):
        c = text[i]
        if c == "\\" and text[i + 1:i + 2] in "{}":
            continue
        depth += (c == "{") - (c == "}")
        if depth == 0:
            return i
    return None


def _value(rest: str, numeric: bool) -> tuple[str, int] | None:
    """The value a statement names at the start of ``rest`` and where it ends in ``rest``
    (None: no value written yet, or a box, which counts as its own statement)."""
    line = rest[:200].split("\n", 1)[0]
    lead = len(line) - len(line.lstrip(" *$\\([:"))
    body = line[lead:]
    if _BOX.match(rest[lead - 1 if lead else 0:].lstrip(" $*(\\[")) or body.startswith(("boxed", "fbox")):
        return None
    m = (_NUMBER if numeric else _LATEX_VALUE).match(body)
    if m is None:
        return None
    raw = m.group(0).rstrip(".,")
    v = raw.replace("$", "").replace(" ", "").replace(",", "") if numeric else raw
    v = v.rstrip(".")
    if not v or (numeric and not any(ch.isdigit() for ch in v)):
        return None
    return v, lead + len(raw)


RESULT_RE = re.compile(r"=\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)")
_UNITS = re.compile(r"(?:\s*(?:[A-Za-z]+|\$|%|\\%|\\text\{[^{}]*\}|\}|\\\)|\$))*")


def not_final(after: str) -> bool:
    """Whether what follows a value shows it is not a final one: a question mark, or more
    arithmetic (an operator or ``=`` after optional unit words)."""
    rest = after[_UNITS.match(after[:60]).end():]  # type: ignore[union-attr]
    return bool(re.match(r"\s*(?:\?|[-+*/×÷^=]\s*[\w(\\]|\\times|\\cdot|\(\w+\)\s*[-+*/×])", rest))


def _hypothetical(text: str, anchor: int) -> bool:
    """Whether the sentence before ``anchor`` is conditional ("if the answer is", "would be")."""
    start = max(text.rfind(". ", 0, anchor), text.rfind("\n", 0, anchor), anchor - 120) + 1
    return bool(_HYPOTHETICAL.search(text[start:anchor + 12]))


@functools.lru_cache(maxsize=4096)
def asked_quantity(question: str) -> frozenset[str]:
    """Words naming what the question asks for ("how many apples" -> {"apple", "apples"};
    money and percent questions also accept ``$``/``%``). Empty: no constraint.

    >>> sorted(asked_quantity("How much in dollars does she make?"))
    ['$', 'dollar', 'dollars', 'make']
    """
    out: set[str] = set()
    last = question.strip().rsplit(".", 2)[-1] if "?" not in question else question[:question.rfind("?")]
    for m in _ASK.finditer(last):
        word = (m.group(1) or m.group(2) or m.group(3) or "").lower()
        if word and word not in _GENERIC:
            out |= {word, word.rstrip("s")}
    low = last.lower()
    if "$" in question or "dollar" in low or "money" in low or "cost" in low or "earn" in low or "pay" in low:
        out |= {"$", "dollar", "dollars"}
    if "percent" in low or "%" in low:
        out |= {"%", "percent"}
    for verb in ("make", "earn", "pay", "spend", "save", "cost"):
        if re.search(rf"\b{verb}", low):
            out.add(verb)
    return frozenset(out)


def names_quantity(sentence: str, wanted: frozenset[str]) -> bool:
    if not wanted:
        return True
    low = sentence.lower()
    return any(w in low if not w.isalpha() else re.search(rf"\b{re.escape(w)}", low) for w in wanted)


_CLOSE = re.compile(r"\n|[.?!]\s")


def _close(text: str, pos: int) -> int | None:
    """Where the sentence holding ``pos`` ends (a newline, or ".", "?", "!" and a space), within
    200 chars; None when the text ends first (the statement is not complete yet)."""
    m = _CLOSE.search(text, pos, pos + 200)  # "18." at the very end may still become "18.5"
    if m is not None:
        return m.end()
    return pos + 200 if len(text) >= pos + 200 else None


def _scan(text: str, dataset: str, question: str) -> list[Statement]:
    """Every complete statement of ``text``; a statement depends only on the text up to its
    ``done``, so the statements of a prefix are those of the whole text done within it."""
    numeric = canonical_dataset(dataset) in NUMERIC_DATASETS
    wanted = asked_quantity(question) if question else frozenset()
    found: list[Statement] = []
    for m in _BOX.finditer(text):
        close = _balanced(text, m.end())
        if close is not None and text[m.end():close].strip():
            done = _close(text, close + 1)
            if done is not None and not text[close + 1:done].lstrip(" $.\\)]").startswith("?"):
                found.append(Statement(close + 1, text[m.end():close].strip(), "boxed", done))
    for kind, pattern in (("answer", _ANSWER), ("conclude", _CONCLUDE)):
        for m in pattern.finditer(text):
            got = _value(text[m.end():], numeric)
            if got is None:
                continue
            v, end = got[0], m.end() + got[1]
            done = _close(text, end)
            if done is None or not_final(text[end:done]) or _hypothetical(text, m.start()):
                continue
            if kind == "conclude":
                if "=" in text[end:done]:  # "so 3 + 4 = 7 ... = 9": the clause's last value is its result
                    continue
                if not names_quantity(text[text.rfind("\n", 0, m.start()) + 1:done], wanted):
                    continue
            found.append(Statement(end, v, kind, done))  # type: ignore[arg-type]
    rank = {"boxed": 0, "answer": 1, "conclude": 2}
    best: dict[int, Statement] = {}
    for st in found:  # one statement per value: "so the answer is 18" is an answer, not also a conclusion
        if st.end not in best or rank[st.kind] < rank[best[st.end].kind]:
            best[st.end] = st
    return sorted(best.values(), key=lambda s: (s.done, s.end))


class _Chains:
    """Statements per chain: a prefix of a text seen before reuses its statements (replay
    cuts chains at many positions), so such a probe costs a prefix comparison, not a rescan;
    a text that extends it is rescanned, so the result never depends on what was seen first.
    Chains that open alike (several samples of one question) keep their own entries."""

    def __init__(self, size: int = 4096, per_key: int = 16) -> None:
        self.size, self.per_key, self.seen = size, per_key, {}

    def get(self, text: str, dataset: str, question: str) -> list[Statement]:
        key = (text[:256], dataset, question)
        entries: list[tuple[str, list[Statement]]] = self.seen.get(key, [])
        for seen_text, found in entries:
            if len(seen_text) >= len(text) and seen_text.startswith(text):
                return found if len(seen_text) == len(text) else [s for s in found if s.done <= len(text)]
        # a longer text is scanned whole: rescanning only its end (from a line break) missed
        # statements that span the cut and depended on which prefix was seen first
        found = _scan(text, dataset, question)
        if key not in self.seen and len(self.seen) >= self.size:
            self.seen.pop(next(iter(self.seen)))
        kept = [e for e in entries if not text.startswith(e[0])]  # a prefix of this text is covered by it now
        self.seen[key] = [(text, found), *kept][:self.per_key]
        return found


_CHAINS = _Chains()


def statements(text: str, *, dataset: str = "math", question: str = "",
               kinds: tuple[str, ...] = ("boxed", "answer", "conclude")) -> list[Statement]:
    """Answer statements in ``text`` in order of their end (see the module docstring)."""
    return [s for s in _CHAINS.get(text, dataset, question) if s.kind in kinds]


def committed_answer(text: str, *, dataset: str = "math", question: str = "") -> str:
    """The value of the chain's latest answer statement ("" when it has stated none).

    >>> committed_answer("so x = 4. Then 2 + 2 = 4. Thus the answer is 5.\\n")
    '5'
    """
    found = statements(text, dataset=dataset, question=question)
    return found[-1].value if found else ""


@functools.lru_cache(maxsize=65536)
def same_answer(a: str, b: str) -> bool:
    """Whether two answers are the same value (exact, else :func:`~certa.algorithms.answers.math_equal`; cached).

    >>> same_answer("18", "18.0"), same_answer("18", "19")
    (True, False)
    """
    return a == b or bool(math_equal(a, b))



def fits(value: str, dataset: str, question: str) -> bool:
    """Whether ``value`` has the type the question asks for."""
    family = canonical_dataset(dataset)
    plain = value.replace("\\%", "%").rstrip("%").replace("percent", "")
    if family in NUMERIC_DATASETS and not re.fullmatch(r"-?\d+(?:\.\d+)?", plain):
        return False
    if family == "aime":
        return plain.isdigit() and 0 <= int(plain) <= 999
    return True


_Bound = TypeVar("_Bound", bound="ProblemBound")


class ProblemBound(CoTSignal):
    """Base of the signals that read a chain's text for one problem (:class:`Committed`,
    ``TextAgrees``, ``FinalAnswer``): dataclasses whose ``dataset`` and ``question`` fields say
    what the question asks for, bound per problem by :meth:`for_problem`."""

    def for_problem(self: _Bound, question: str, dataset: str | None = None) -> _Bound:
        """This rule for one problem (its question, and dataset when given)."""
        return dataclasses.replace(self, dataset=dataset or self.dataset, question=question)  # type: ignore[attr-defined]


def check_statement_kinds(kinds: str, allowed: tuple[str, ...]) -> None:
    """ConfigError unless ``kinds`` (which statements a rule counts) is one of ``allowed``."""
    if kinds not in allowed:
        raise ConfigError(f"unknown statement kinds {kinds!r}", hint=" or ".join(allowed))


@dataclass(frozen=True)
class Committed(ProblemBound):
    """1.0 iff the chain has committed to its answer (see the module docstring).

    ``kinds``: ``strict`` counts boxes and "answer is" only, ``conclude`` also conclusions
    naming the asked quantity. ``confirm``: consecutive statements of the same value needed;
    ``quiet``: doubt-free characters after the latest statement; ``survive``: characters from
    the run's first statement. ``dataset``/``question`` give the asked type and quantity.
    """

    kinds: Literal["strict", "conclude"] = "strict"
    confirm: int = 1
    quiet: int = 0
    survive: int = 0
    dataset: str = "math"
    question: str = ""
    kind: ClassVar[str] = "committed"

    def __post_init__(self) -> None:
        check_statement_kinds(self.kinds, ("strict", "conclude"))
        if self.confirm < 1 or self.quiet < 0 or self.survive < 0:
            raise ConfigError(f"committed needs confirm >= 1, quiet >= 0, survive >= 0, got "
                              f"{self.confirm}, {self.quiet}, {self.survive}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "kinds": self.kinds, "confirm": self.confirm, "quiet": self.quiet,
                "survive": self.survive}  # dataset and question are the problem's (bound when run)

    def __call__(self, view: ChainView) -> float:
        return float(self.committed(view.text) is not None and
                     (not view.probes or not view.probes[-1].answer
                      or same_answer(view.probes[-1].answer, self.committed(view.text) or "")))

    def committed(self, text: str) -> str | None:
        """The answer the chain has committed to under this rule, or None (no exit yet)."""
        found = statements(text, dataset=self.dataset, question=self.question)
        anchors = ("boxed", "answer") if self.kinds == "strict" else ("boxed", "answer", "conclude")
        at = [i for i, st in enumerate(found) if st.kind in anchors]
        if not at:
            return None
        value = found[at[-1]].value
        start = next((i + 1 for i in reversed(at) if not same_answer(found[i].value, value)), 0)
        run = [st for st in found[start:] if same_answer(st.value, value)]  # restatements of any kind count
        tail = text[run[-1].end:]
        if len(run) < self.confirm or len(tail) < self.quiet or DOUBT_RE.search(tail):
            return None
        results = RESULT_RE.findall(tail)
        if results and not same_answer(results[-1].replace(",", ""), value):
            return None  # the chain has computed something else since: the value was a step
        if len(text) - run[0].end < self.survive or not fits(value, self.dataset, self.question):
            return None
        return value


def for_problem(signal: CoTSignal, question: str, dataset: str | None = None) -> CoTSignal:
    """``signal`` with every text-probe part (:class:`Committed`, or any signal with a
    ``for_problem`` method) bound to one problem's question (and dataset, when given); other
    signals are returned unchanged.

    >>> rule = AllOf(Committed(confirm=2), Committed("conclude"))
    >>> [p.question for p in for_problem(rule, "How many?", "gsm8k").parts]
    ['How many?', 'How many?']
    """
    bind = getattr(signal, "for_problem", None)  # Committed, TextAgrees, FinalAnswer, AllOf/AnyOf of them
    return bind(question, dataset) if callable(bind) else signal

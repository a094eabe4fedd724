r"""CoT certaindex for reasoning models: survive false consensus by reading the chain, not only its probes.

A reasoning model's forced-answer probes (``**Final Answer** \[ \boxed{``, sampled at the
chain's temperature) often agree on a *wrong* answer for hundreds of tokens before the chain
has computed anything (false consensus: on the dev probe banks, Dynasor's rule "the last k
probes agree" loses 31 pt at k=8 on Qwen3-8B AIME24 and still 2 pt at k=48). What tells a
settled answer from a guess is whether the chain's *own text* has arrived at it. The signals:

- :class:`Boxed` — the chain has written its boxed answer in its thinking (``\boxed{X}``
  before ``</think>``, or anywhere in a chain without a thinking block): the reasoning is over
  and what follows is a summary (4–14% of a reasoning chain's tokens). Reads text only: no
  probe, no decode cost; the answer is the box's value.
- :class:`TextAgrees` — the latest probe's answer is the value of the chain's latest answer
  statement (a box, "the answer is X", or — ``kinds="any"`` — a conclusion naming the asked
  quantity: :func:`~certa.algorithms.signals.text.statements`). A guess the text never stated
  does not count. It asks for probes only once the text has stated something.
- :class:`ProbeVote` — over the probes of the last ``span`` tokens, the latest answer's share
  is at least ``share`` and none hesitates: stability measured in tokens, not probe counts,
  and robust to one sampled probe out of line. It asks for a probe every ``every`` tokens.

The default (:func:`reasoning_signal`, ``cot_program()``'s certaindex) composes them: exit
when the chain boxed its answer, or when its text and a stable majority of its probes name the
same value — for ``span`` tokens after "the answer is X", for the longer ``conclude_span``
after a conclusion ("so the total is X"), which intermediate results look like too. Chosen
leave-one-model-out and leave-one-dataset-out on the dev probe banks
(``benchmarks/reasoning_probes.py``; docs/evaluation.md).

Example:
    >>> from certa.algorithms.signals import ProbeObs
    >>> rule = reasoning_signal()
    >>> text = "<think>So the answer is 18. Let me verify: 9 * 2 = 18."
    >>> probes = [ProbeObs(at, "18", "18}") for at in (256, 512, 768, 1024, 1280)]
    >>> rule(ChainView(probes, text, 1280)), rule(ChainView(probes[:1], text, 256))
    (1.0, 0.0)
    >>> Boxed()(ChainView([], "<think>... so \\boxed{18}.\n", 300)), Boxed().answer(ChainView([], "\\boxed{18}.\n", 9))
    (1.0, '18')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from certa.runtime.errors import ConfigError

from certa.algorithms.signals.cot import AllOf, AnyOf, ChainView, CoTSignal
from certa.algorithms.signals.multipath import HESITATION_WORDS, ProbeObs, has_hesitation
from certa.algorithms.signals.text import ProblemBound, check_statement_kinds, same_answer, statements

__all__ = ["Boxed", "ProbeVote", "REASONING_DEFAULT", "TextAgrees", "reasoning_signal"]

_THINK_END = "</think>"


def _thinking(text: str) -> str:
    """The chain's thinking: the text before ``</think>`` (all of it when there is none)."""
    end = text.find(_THINK_END)
    return text if end < 0 else text[:end]


@dataclass(frozen=True)
class Boxed(CoTSignal):
    r"""1.0 iff the chain's thinking holds a complete ``\boxed{X}`` answer (its sentence closed).

    Text only (``reads_probes`` is False): costs no probe. :meth:`answer` is the latest box's value.
    """

    kind: ClassVar[str] = "boxed"
    reads_probes: ClassVar[bool] = False

    def __call__(self, view: ChainView) -> float:
        return float(self.answer(view) is not None)

    def answer(self, view: ChainView) -> str | None:
        found = statements(_thinking(view.text), kinds=("boxed",))
        return found[-1].value if found else None


@dataclass(frozen=True)
class TextAgrees(ProblemBound):
    """1.0 iff the latest probe's answer equals the chain's committed answer (the value of its
    latest answer statement, :func:`~certa.algorithms.signals.text.statements`).

    ``kinds``: ``"answer"`` — only when that statement is a box or "the answer is X";
    ``"any"`` — a conclusion naming the asked quantity counts too ("so the total is X", which
    intermediate results also look like). Probes are due only once the text has stated an
    answer. ``dataset``/``question`` say what the question asks for (bound per problem by
    :meth:`for_problem`)."""

    kinds: Literal["answer", "any"] = "any"
    dataset: str = "math"
    question: str = ""
    kind: ClassVar[str] = "stated"

    def __post_init__(self) -> None:
        check_statement_kinds(self.kinds, ("answer", "any"))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "kinds": self.kinds}  # dataset and question are the problem's (bound when run)

    def committed(self, view: ChainView) -> str:
        found = statements(_thinking(view.text), dataset=self.dataset, question=self.question)
        if not found or (self.kinds == "answer" and found[-1].kind == "conclude"):
            return ""
        return found[-1].value

    def probe_due(self, new_text: str, view: ChainView | None = None) -> bool:
        return view is None or bool(self.committed(view))

    def answer(self, view: ChainView) -> str | None:
        """The chain's own statement of the value (``18``, where a probe may say ``15+3``)."""
        return self.committed(view) or super().answer(view)

    def __call__(self, view: ChainView) -> float:
        if not view.probes or not view.probes[-1].answer:
            return 0.0
        stated = self.committed(view)
        return float(bool(stated) and same_answer(view.probes[-1].answer, stated))


@dataclass(frozen=True)
class ProbeVote(CoTSignal):
    """1.0 iff the latest probe's answer holds at least ``share`` of the probes taken in the last
    ``span`` tokens, those probes reach back the whole span, and the latest is non-empty and
    free of hesitation words. Probes are due every ``every`` tokens."""

    span: int = 1024
    share: float = 0.75
    every: int = 256
    kind: ClassVar[str] = "vote"

    def __post_init__(self) -> None:
        if self.span < 1 or self.every < 1 or not 0.0 < self.share <= 1.0:
            raise ConfigError(f"probe vote needs span, every >= 1 and share in (0, 1], got "
                              f"{self.span}, {self.every}, {self.share}")

    @property
    def window(self) -> int:  # type: ignore[override]
        return max(1, -(-self.span // self.every))

    def probe_due(self, new_text: str, view: ChainView | None = None) -> bool:
        return view is None or not view.probes or view.tokens - view.probes[-1].at >= self.every

    def __call__(self, view: ChainView) -> float:
        if not view.probes:
            return 0.0
        latest = view.probes[-1]
        if not latest.answer or has_hesitation(latest.text, HESITATION_WORDS):
            return 0.0
        recent = _since(view.probes, latest.at - self.span)
        if recent is None:
            return 0.0  # the probes do not reach back the whole span yet
        agree = sum(1 for p in recent if p.answer and same_answer(p.answer, latest.answer))
        return float(agree >= self.share * len(recent) - 1e-9)


def _since(probes: Sequence[ProbeObs], start: int) -> list[ProbeObs] | None:
    """The probes taken after token ``start``, or None when no probe was taken at or before it
    (the history does not cover the span)."""
    for i in range(len(probes) - 1, -1, -1):
        if probes[i].at <= start:
            return list(probes[i + 1:])
    return None


REASONING_DEFAULT: dict[str, float | int] = {"span": 256, "conclude_span": 2048, "share": 1.0, "every": 128}
"""The shipped default's parameters (see :func:`reasoning_signal`)."""


def reasoning_signal(span: int | None = None, share: float | None = None, every: int | None = None,
                     conclude_span: int | None = None) -> CoTSignal:
    """``cot_program()``'s default certaindex, with :data:`REASONING_DEFAULT` unless overridden::

        AnyOf(Boxed(),
              AllOf(TextAgrees("answer"), ProbeVote(span, share, every)),         # "the answer is X"
              AllOf(TextAgrees("any"), ProbeVote(conclude_span, share, every)))   # "so the total is X"

    A conclusion that may be an intermediate result must hold the probes longer."""
    d = REASONING_DEFAULT
    share_, every_ = float(share or d["share"]), int(every or d["every"])
    return AnyOf(Boxed(), AllOf(TextAgrees("answer"), ProbeVote(int(span or d["span"]), share_, every_)),
                 AllOf(TextAgrees("any"), ProbeVote(int(conclude_span or d["conclude_span"]), share_, every_)))


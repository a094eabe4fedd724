r"""Monotone families of certaindex settings for label-free calibration, and what is "the same answer".

A :class:`Family` orders one knob of a program's shipped certaindex from most patient (later
exits, lower risk) to least; calibration (:mod:`certa.eval.labelfree`) tests them in that order.

* ``sc`` — :class:`~certa.algorithms.policies.votes.StableVote` ``delta`` (:data:`DELTAS`; the
  shipped default is 0.04): a larger delta stops on every draw no later;
* ``cot`` — *patience* ``p`` (:data:`PATIENCE`) of the reasoning certaindex
  (:func:`~certa.algorithms.signals.reasoning.reasoning_signal`): both probe spans times ``p``,
  rounded to the probe spacing (:func:`patience_signal`; ``p = 1`` is ``cot_program()``'s
  default). Larger ``p`` holds the probes longer before an exit;
* ``sc-cot`` — the same patience for every chain of ``sc_cot_program``.

The spans do not change *when* a chain is probed (probes are due on the chain's text and the
probe spacing), so one run that never exits but probes on that schedule (:func:`explorer_signal`)
shows what every setting would have done: what an explored program of ``--self-calibrate``
runs, and what it costs.

Example:
    >>> fam = family("cot")
    >>> fam.values[0] > fam.default > fam.values[-1], fam.spec(1.0)["program"]["signal"] == reasoning_signal().to_dict()
    (True, True)
    >>> patience_signal(2.0).parts[1].parts[1].span, explorer_signal()(ChainView([], "\\boxed{4}", 9))
    (1024, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from certa.algorithms.answers.clustering import cluster
from certa.algorithms.answers.equivalence import math_equal
from certa.algorithms.policies.votes import SC_DEFAULT, StableVote
from certa.algorithms.signals.cot import AllOf, ChainView, CoTSignal
from certa.algorithms.signals.reasoning import REASONING_DEFAULT, reasoning_signal
from certa.eval.traces import TraceProblem
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Threshold

__all__ = ["DELTAS", "PATIENCE", "Family", "Hold", "changed", "explorer_signal", "family", "leaders", "patience_signal",
           "same_answer", "unlabeled"]

DELTAS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4)
"""SC: the StableVote ``delta`` grid, most patient first (the default is 0.04)."""

PATIENCE: tuple[float, ...] = (8.0, 6.0, 4.0, 3.0, 2.0, 1.5, 1.25, 1.0, 0.75, 0.5, 0.25)
"""CoT: the patience grid, most patient first (the default is 1.0). The least patient, 0.25, holds
the probes 128 tokens after "the answer is X" and 512 after a conclusion; 0.125 (two agreeing
probes after "the answer is X") lost 1.4 pt on the dev R1-Llama banks although its answer change
was certified below 5%, so the family stops at 0.25."""


def patience_signal(p: float) -> CoTSignal:
    """The reasoning certaindex with both probe spans scaled by ``p`` (rounded to the probe
    spacing, at least one spacing). ``patience_signal(1.0)`` is ``cot_program()``'s default."""
    if not p > 0:
        raise ConfigError(f"patience must be > 0, got {p!r}")
    every = int(REASONING_DEFAULT["every"])
    span = lambda base: max(every, round(float(base) * p / every) * every)  # noqa: E731
    return reasoning_signal(span=span(REASONING_DEFAULT["span"]), conclude_span=span(REASONING_DEFAULT["conclude_span"]))


@dataclass(frozen=True)
class Hold(CoTSignal):
    """Never 1.0, and never in the way of a probe: AND-ed with a rule, its probes are taken on
    the rule's schedule while the chain runs to its end."""

    kind: ClassVar[str] = "hold"

    def __call__(self, view: ChainView) -> float:
        return 0.0


def explorer_signal(p: float = PATIENCE[0]) -> CoTSignal:
    """A chain that runs to its end probing where every patience setting would (see module docstring)."""
    return AllOf(Hold(), patience_signal(p))


@dataclass(frozen=True)
class Family:
    """A program's family: ``values`` of its knob, most patient first; ``default`` the shipped one."""

    program: Literal["sc", "cot", "sc-cot"]
    values: tuple[float, ...]
    default: float

    def spec(self, value: float) -> dict[str, Any]:
        """The policy-file sections (``policy``, ``program``) of the setting ``value``."""
        if self.program == "sc":
            return {"policy": self.sc_policy(value).to_dict(), "program": {"name": "sc"}}
        key = "signal" if self.program == "cot" else "chain_signal"
        return {"policy": Threshold(1.0, detect_at=1, every=1).to_dict(),
                "program": {"name": self.program, key: patience_signal(value).to_dict()}}

    def signal(self, value: float) -> CoTSignal:
        """The CoT certaindex of the setting ``value`` (``cot``, ``sc-cot``: :func:`patience_signal`)."""
        return patience_signal(value)

    @staticmethod
    def sc_policy(value: float) -> StableVote:
        """The shipped SC default with ``delta = value``."""
        return StableVote(**{**{k: v for k, v in SC_DEFAULT.items() if k != "kind"}, "delta": value})

    def label(self, value: float) -> str:
        return f"stable_vote(delta={value:g})" if self.program == "sc" else f"patience {value:g}"

    def index(self, value: float) -> int:
        """The position of ``value`` in the family (ConfigError when it is not a member)."""
        for i, v in enumerate(self.values):
            if abs(v - value) < 1e-12:
                return i
        raise ConfigError(f"{value!r} is not a setting of the {self.program} family",
                          hint=f"one of {', '.join(f'{v:g}' for v in self.values)}")


def family(program: str) -> Family:
    """The label-free family of ``program`` (``sc``, ``cot`` or ``sc-cot``)."""
    if program == "sc":
        return Family("sc", DELTAS, float(SC_DEFAULT["delta"]))
    if program in ("cot", "sc-cot"):
        return Family(program, PATIENCE, 1.0)  # type: ignore[arg-type]
    raise ConfigError(f"no label-free family for program {program!r}", hint="sc, cot or sc-cot")


def unlabeled(problems: Sequence[TraceProblem]) -> list[TraceProblem]:
    """The problems with every label removed: ``gold`` None and each sample's ``correct`` False."""
    return [p.model_copy(update={"gold": None, "samples": [s.model_copy(update={"correct": False})
                                                          for s in p.samples]}) for p in problems]


def leaders(answers: Sequence[str | None]) -> list[str]:
    """Full compute's answers when it votes: every answer tied for the most votes (math-equal
    clusters, empty answers left out). A tie's winner is an accident of order, so an early vote
    for any of them is not a change.

    >>> leaders(["3", "4", "4", "3", "5"]), leaders(["", ""])
    (['3', '4'], [])
    """
    kept = [str(a) for a in answers if a]
    groups = cluster(kept, "math") if kept else []
    top = max((len(g) for g in groups), default=0)
    return [kept[g[0]] for g in groups if len(g) == top]


def changed(answer: str | None, full: Sequence[str]) -> bool:
    """Whether ``answer`` differs from every one of full compute's answers ``full`` (:func:`leaders`)."""
    return not any(same_answer(answer, f) for f in full) if full else bool(answer)


def same_answer(a: str | None, b: str | None) -> bool:
    """Whether two answers agree (math-equal; two empty answers agree)."""
    a, b = (a or "").strip(), (b or "").strip()
    return a == b or bool(a and b and math_equal(a, b))

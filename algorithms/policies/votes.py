r"""Vote-based stopping for Self-Consistency, and the shipped default SC policy.

:class:`StableVote` (the default) stops when the vote can hardly change any more: when
:func:`~certa.algorithms.signals.votes.majority_change_probability` — the posterior-predictive
probability that the vote of the whole budget (``knob_cap`` samples) would differ from the vote
now — is at most ``delta``. ``delta`` means the same on every data set (a chance of answering
differently from full-budget majority voting), the rule needs the remaining budget and so
stops sooner when few samples are left, and it waits longer when the answers seen are diverse.

:class:`VoteStop` stops when the vote certaindex of
:func:`~certa.algorithms.signals.votes.vote_certainty` — the Beta probability that the
majority answer beats the heaviest other answer, votes weighted by validity, length and (where
recorded) token confidence — reaches ``tau``. It reads the SC answers protocol
(``state.answers``) plus the optional aligned lists ``state.lengths`` (tokens / decode
budget), ``state.complete`` (ended naturally) and ``state.confidence`` (lowest-window mean
logprob); ``sc_program`` and the SC replay keep all of them. With ``length_weight=0`` and
no ``complete``/``confidence`` lists it is exactly Adaptive-Consistency.

:data:`SC_DEFAULT` is the policy ``sc_program()`` uses when given none, chosen by
leave-one-dataset-out over the dev trace sets (``benchmarks/sc_default.py``,
``docs/results/sc_default.json``; how, in ``docs/algorithms.md``).

Example:
    >>> from types import SimpleNamespace as NS
    >>> prog = NS(state=NS(answers=["18", "18", "18"], lengths=[0.3, 0.3, 0.4],
    ...                    complete=[True, True, True]), knob_value=3, policy_marks={})
    >>> VoteStop(0.9).decide(prog)
    Decision(stop=True, reason='certaindex')
    >>> prog = NS(state=NS(answers=["18", "18", "18"]), knob_value=3, knob_cap=16, policy_marks={})
    >>> StableVote(0.04).decide(prog), round(StableVote(0.04).change_probability(prog), 4)
    (Decision(stop=True, reason='certaindex'), 0.0294)
    >>> sc_default_policy().to_dict() == SC_DEFAULT
    True
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from certa.runtime.errors import ConfigError
from certa.runtime.policy import CONTINUE, Decision, Policy, is_unit

from certa.algorithms.answers.clustering import Same, cluster
from certa.algorithms.policies.stopping import ESC, AdaptiveConsistency, answers_of, check_rule
from certa.algorithms.signals.votes import (VoteView, beta_half, leader_weights, majority_change_probability,
                                            vote_counts, vote_view, vote_weights)

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.program import Program

__all__ = ["NO_CAP_HORIZON", "SC_DEFAULT", "SC_PEERS", "StableVote", "VoteStop", "sc_default_policy"]

NO_CAP_HORIZON = 16
"""The budget :class:`StableVote` assumes for a program whose knob has no cap (``sc_program``'s default cap)."""

SC_DEFAULT: dict[str, Any] = {"kind": "stable_vote", "delta": 0.04, "min_samples": 2, "alpha": 1.0,
                              "horizon": None, "same": "math"}
"""The shipped SC stopping policy (``policy_from_dict`` form); see ``docs/results/sc_default.json``."""

SC_PEERS: dict[str, dict[str, Any]] = {"esc": ESC(window=3).to_dict(),
                                       "adaptive-consistency": AdaptiveConsistency(0.9).to_dict()}
"""ESC's and Adaptive-Consistency's fixed parameters chosen by the same rule on the same dev sets."""


@functools.lru_cache(maxsize=65536)
def _counts(answers: tuple, same: str) -> tuple[tuple[int, ...], int]:
    sizes, empty = vote_counts(list(answers), same)
    return tuple(sizes), empty


@functools.lru_cache(maxsize=65536)
def _clusters(answers: tuple, same: str) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(c) for c in cluster(list(answers), same))


class VoteStop(Policy):
    """Stop when the weighted-vote certaindex reaches ``tau`` (checked after every sample).

    Args:
        tau: threshold on P(leader's share > runner-up's), in (0, 1).
        length_weight: a sample's weight is ``1 - length_weight * tokens / budget``.
        confidence_floor: samples whose lowest-window mean logprob is below this get weight 0
            (``None``: confidence unused).
        min_samples: never stop before this many samples.
        same: answer equivalence (``"math"`` as ``sc_program`` votes).
    """

    kind = "vote"
    fields = {"tau": "fraction", "min_samples": "knob"}

    def __init__(self, tau: float = 0.9, length_weight: float = 0.0, confidence_floor: float | None = None,
                 min_samples: int = 1, same: Same = "math") -> None:
        if not (is_unit(tau) and 0.0 < tau < 1.0):
            raise ConfigError(f"vote tau must be in (0, 1), got {tau!r}")
        if not is_unit(length_weight):
            raise ConfigError(f"vote length_weight must be in [0, 1], got {length_weight!r}")
        if confidence_floor is not None and (isinstance(confidence_floor, bool)
                                             or not isinstance(confidence_floor, (int, float))):
            raise ConfigError(f"vote confidence_floor must be a number or None, got {confidence_floor!r}")
        check_rule("vote", min_samples=min_samples, same=same)
        self.tau, self.length_weight, self.confidence_floor = float(tau), float(length_weight), confidence_floor
        self.min_samples, self.same = min_samples, same

    def validate(self, program: Program) -> None:
        answers_of(program)  # the SC answers protocol, checked before the first step

    def certainty(self, view: VoteView) -> float:
        """The vote certaindex of ``view`` under this policy's weights."""
        w = vote_weights(view, length_weight=self.length_weight, confidence_floor=self.confidence_floor)
        clusters = _clusters(tuple(view.answers), self.same) if isinstance(self.same, str) else \
            cluster(list(view.answers), self.same)
        w1, w2 = leader_weights(view, clusters, w)
        return beta_half(w2 + 1.0, w1 + 1.0) if w1 > 0 else 0.0

    def decide(self, program: Program) -> Decision:
        view = vote_view(program.state)
        if len(view.answers) < self.min_samples or not view.answers:
            return CONTINUE
        return Decision(True, "certaindex") if self.certainty(view) >= self.tau else CONTINUE

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tau": self.tau, "length_weight": self.length_weight,
                "confidence_floor": self.confidence_floor, "min_samples": self.min_samples,
                "same": self.same if isinstance(self.same, str) else "custom"}

    def __repr__(self) -> str:
        return f"VoteStop(tau={self.tau}, length_weight={self.length_weight})"


class StableVote(Policy):
    """Stop when P(the full-budget majority vote differs from the vote now) <= ``delta``.

    Args:
        delta: the accepted chance of answering differently from voting on the whole budget, in (0, 1).
        min_samples: never stop before this many samples (answers, empty ones included).
        alpha: the Dirichlet prior added to each answer seen (1.0: uniform, as Adaptive-Consistency).
        horizon: the budget when the program's knob has no cap (``None``: :data:`NO_CAP_HORIZON`).
        same: answer equivalence (``"math"`` as ``sc_program`` votes).
    """

    kind = "stable_vote"
    fields = {"min_samples": "knob"}

    def __init__(self, delta: float = 0.04, min_samples: int = 2, alpha: float = 1.0, horizon: int | None = None,
                 same: Same = "math") -> None:
        if not (is_unit(delta) and 0.0 < delta < 1.0):
            raise ConfigError(f"stable_vote delta must be in (0, 1), got {delta!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0.0:
            raise ConfigError(f"stable_vote alpha must be > 0, got {alpha!r}")
        check_rule("stable_vote", min_samples=min_samples, same=same, horizon=horizon)
        self.delta, self.min_samples, self.alpha, self.horizon, self.same = \
            float(delta), min_samples, float(alpha), horizon, same

    def validate(self, program: Program) -> None:
        answers_of(program)  # without state.answers this rule would never stop: say so before the first step

    def change_probability(self, program: Program) -> float:
        """The certaindex this rule reads (see :func:`majority_change_probability`)."""
        answers = list(getattr(program.state, "answers", None) or [])
        n = len(answers)
        cap = getattr(program, "knob_cap", None)
        budget = cap if cap is not None else (self.horizon if self.horizon is not None else NO_CAP_HORIZON)
        used = getattr(program, "knob_value", n) if cap is not None else n
        counts, empty = _counts(tuple(answers), self.same) if isinstance(self.same, str) else \
            vote_counts(answers, self.same)
        return majority_change_probability(counts, empty, max(0, budget - used), alpha=self.alpha)

    def decide(self, program: Program) -> Decision:
        answers = getattr(program.state, "answers", None) or []
        cap = getattr(program, "knob_cap", None)
        if len(answers) < self.min_samples or (cap is not None and getattr(program, "knob_value", 0) >= cap):
            return CONTINUE  # at the cap the program ends there anyway ("cap", not a certaindex exit)
        return Decision(True, "certaindex") if self.change_probability(program) <= self.delta else CONTINUE

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "delta": self.delta, "min_samples": self.min_samples, "alpha": self.alpha,
                "horizon": self.horizon, "same": self.same if isinstance(self.same, str) else "custom"}

    def __repr__(self) -> str:
        return f"StableVote(delta={self.delta})"


def sc_default_policy() -> StableVote:
    """A fresh instance of the shipped SC default (:data:`SC_DEFAULT`)."""
    return StableVote(**{k: v for k, v in SC_DEFAULT.items() if k != "kind"})

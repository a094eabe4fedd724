r"""Vote certaindex for Self-Consistency: how sure is the weighted majority of the samples so far?

A sample's vote is weighted by what the program knows about it besides its answer:

- **validity** — an empty answer (nothing extracted) or a sample cut at the decode budget
  (``complete`` false) gets weight 0 (truncated samples are rarely right);
- **length** — ``1 - length_weight * tokens / budget`` (long samples are more often wrong);
- **confidence** (optional, DeepConf's idea) — where the engine gave token logprobs, a sample
  whose lowest-window mean logprob is below ``confidence_floor`` gets weight 0.

:func:`vote_certainty` is the Beta stopping probability (Adaptive-Consistency's rule) on
*weighted* counts: ``P(p1 > p2) = I_0.5(w2 + 1, w1 + 1)``, ``w1`` the weight of the majority
vote's cluster (the answer the program gives), ``w2`` the heaviest other cluster's. With unit
weights it is exactly Adaptive-Consistency's statistic. :func:`sample_confidence` computes the per-sample
figures ``certa traces collect`` records (mean and lowest-window token logprob).

:func:`majority_change_probability` answers the question an early stop actually risks: would the
vote of the *whole* budget differ from the vote now? With the answer counts so far and ``r``
samples still to come, the answer shares get a Dirichlet posterior (``alpha`` added to each
seen answer, ``alpha_new`` for answers not seen yet plus the empty samples), and the next ``r``
answers are its Dirichlet-multinomial predictive. The figure is the union bound
``sum_j P(answer j ends ahead of the leader)`` (ties to the earliest answer, as the vote breaks
them; all unseen answers lumped as one rival), so it is 0 once no rival can catch up and it
grows with the remaining budget and the diversity of the answers seen. Beyond
:data:`EXACT_REMAINING` samples left it uses the limit of an unbounded budget (each rival's
posterior chance of the larger share, Adaptive-Consistency's statistic per pair), so a huge cap
costs no more than a small one.

Example:
    >>> v = VoteView(["18", "18", "7"], lengths=[0.3, 0.4, 0.9], complete=[True, True, True])
    >>> round(vote_certainty(v), 4), round(vote_certainty(v, length_weight=0.5), 4)
    (0.6875, 0.7252)
    >>> vote_weights(VoteView(["18", "", "18"], complete=[True, True, False]))
    [1.0, 0.0, 0.0]
    >>> sample_confidence([-0.1, -0.2, -3.0, -0.1], window=2)
    {'mean_logprob': -0.85, 'min_window_logprob': -1.6}
    >>> round(majority_change_probability([2], 0, 6), 4), majority_change_probability([4, 1], 0, 3)
    (0.0476, 0.0)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from certa.algorithms.answers.clustering import Same, cluster, is_empty

__all__ = ["EXACT_REMAINING", "VoteView", "beta_half", "leader_weights", "majority_change_probability", "sample_confidence",
           "vote_certainty", "vote_counts", "vote_view", "vote_weights"]


@dataclass(frozen=True)
class VoteView:
    """What a vote signal reads: answers and, per sample where known, its length as a fraction
    of the decode budget, whether it ended naturally, and its lowest-window mean logprob."""

    answers: Sequence[Any]
    lengths: Sequence[float] | None = None
    complete: Sequence[bool] | None = None
    confidence: Sequence[float | None] | None = None


def vote_view(state: Any) -> VoteView:
    """The view of a program state that keeps the SC answers protocol (``answers``) and,
    optionally, ``lengths`` / ``complete`` / ``confidence`` lists aligned with it."""
    answers = list(getattr(state, "answers", None) or [])
    n = len(answers)

    def aligned(name: str) -> list | None:
        vals = getattr(state, name, None)
        return list(vals) if isinstance(vals, list) and len(vals) == n else None
    return VoteView(answers, aligned("lengths"), aligned("complete"), aligned("confidence"))


def vote_weights(view: VoteView, *, length_weight: float = 0.0, confidence_floor: float | None = None
                 ) -> list[float]:
    """Each sample's vote weight in [0, 1] (see the module docstring)."""
    out = []
    for i, a in enumerate(view.answers):
        w = 0.0 if is_empty(a) else 1.0
        if view.complete is not None and not view.complete[i]:
            w = 0.0
        if view.lengths is not None and length_weight:
            w *= max(0.0, 1.0 - length_weight * float(view.lengths[i]))
        if confidence_floor is not None and view.confidence is not None:
            c = view.confidence[i]
            if c is not None and c < confidence_floor:
                w = 0.0
        out.append(w)
    return out


def leader_weights(view: VoteView, clusters: Sequence[Sequence[int]], weights: Sequence[float]
                   ) -> tuple[float, float]:
    """(weight of the majority vote's cluster, weight of the heaviest other cluster).

    The majority vote is the unweighted one the program answers with (largest non-empty
    cluster, ties to the earliest), so certainty is always about the answer actually given."""
    valid = [c for c in clusters if not is_empty(view.answers[c[0]])]
    if not valid:
        return 0.0, 0.0
    lead = max(range(len(valid)), key=lambda k: (len(valid[k]), -k))
    mass = [sum(weights[i] for i in c) for c in valid]
    return mass[lead], max((m for k, m in enumerate(mass) if k != lead), default=0.0)


def vote_certainty(view: VoteView, *, length_weight: float = 0.0, confidence_floor: float | None = None,
                   same: Same = "math") -> float:
    """P(the majority answer's weighted share > the heaviest other's), uniform prior; 0.0 if it has no weight."""
    w = vote_weights(view, length_weight=length_weight, confidence_floor=confidence_floor)
    w1, w2 = leader_weights(view, cluster(list(view.answers), same), w)
    return beta_half(w2 + 1.0, w1 + 1.0) if w1 > 0 else 0.0


def beta_half(a: float, b: float) -> float:
    """The regularized incomplete beta function ``I_0.5(a, b)`` (a, b > 0), to ~1e-12, pure Python.

    >>> round(beta_half(1.0, 3.0), 6), round(beta_half(2.5, 2.5), 6)
    (0.875, 0.5)
    """
    if a <= 0 or b <= 0:
        raise ValueError(f"beta_half needs a, b > 0, got {a}, {b}")
    if a > b:  # symmetry keeps the continued fraction in its fast-converging region
        return 1.0 - beta_half(b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + (a + b) * math.log(0.5))
    return front * _betacf(a, b, 0.5) / a


def _betacf(a: float, b: float, x: float) -> float:
    """Lentz's continued fraction for the incomplete beta (Numerical Recipes ``betacf``)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-13:
            break
    return h


def sample_confidence(logprobs: Sequence[float], window: int = 32) -> dict[str, float]:
    """Per-sample token confidence: mean logprob and the lowest mean over any ``window``
    consecutive tokens (DeepConf's lowest group confidence; the whole sample if shorter)."""
    lp = [float(x) for x in logprobs]
    if not lp:
        return {}
    w = max(1, min(window, len(lp)))
    run = sum(lp[:w])
    low = run
    for i in range(w, len(lp)):
        run += lp[i] - lp[i - w]
        low = min(low, run)
    return {"mean_logprob": round(sum(lp) / len(lp), 4), "min_window_logprob": round(low / w, 4)}


EXACT_REMAINING = 256
"""Most samples left for which :func:`majority_change_probability` sums the predictive exactly."""


def vote_counts(answers: Sequence[Any], same: Same = "math") -> tuple[list[int], int]:
    """(sizes of the non-empty answer clusters in first-occurrence order, number of empty answers)."""
    clusters = cluster(list(answers), same)
    sizes = [len(c) for c in clusters if not is_empty(answers[c[0]])]
    return sizes, len(answers) - sum(sizes)


def majority_change_probability(counts: Sequence[int], empty: int, remaining: int, *, alpha: float = 1.0,
                                alpha_new: float = 1.0) -> float:
    """P(the majority vote after ``remaining`` more samples is not today's leader), a union bound.

    ``counts``: cluster sizes in first-occurrence order (the vote's tie order); ``empty``: samples
    with no answer. See the module docstring for the model; 1.0 when nothing has been answered.
    """
    if remaining < 0 or empty < 0 or any(c < 0 for c in counts) or alpha <= 0 or alpha_new < 0:
        raise ValueError("majority_change_probability needs non-negative counts/remaining, alpha > 0, alpha_new >= 0")
    if not counts or max(counts) == 0:
        return 1.0
    if remaining == 0:
        return 0.0
    lead = max(range(len(counts)), key=lambda i: (counts[i], -i))
    cl = counts[lead]
    total = sum(c + alpha for c in counts) + alpha_new + empty
    rivals = [(counts[j], alpha, j < lead) for j in range(len(counts)) if j != lead]
    if alpha_new > 0:
        rivals.append((0, alpha_new, False))  # every unseen answer at once, after the leader in tie order
    if remaining > EXACT_REMAINING:  # the unbounded-budget limit: P(rival's share > leader's), pair by pair
        return min(1.0, sum(beta_half(cl + alpha, cj + aj) for cj, aj, _ in rivals))
    p = sum(_overtake(cl, cj, total - cl - alpha - cj - aj, remaining, alpha, aj, earlier) for cj, aj, earlier in rivals)
    return min(1.0, p)


@functools.lru_cache(maxsize=65536)
def _overtake(cl: int, cj: int, rest: float, r: int, alpha: float, aj: float, earlier: bool) -> float:
    """P(cj + xj > cl + xl, or == when j is earlier) for (xl, xj, r - xl - xj) ~ DirMult(r; cl+alpha, cj+aj, rest)."""
    if cj + r < cl or (cj + r == cl and not earlier):
        return 0.0
    a1, a2, a3 = cl + alpha, cj + aj, max(rest, 0.0)
    lg = math.lgamma
    base = lg(r + 1) + lg(a1 + a2 + a3) - lg(a1 + a2 + a3 + r) - lg(a1) - lg(a2) - (lg(a3) if a3 > 0 else 0.0)
    out = 0.0
    for xl in range(r + 1):
        for xj in range(max(0, cl + xl - cj + (0 if earlier else 1)), r - xl + 1):
            x3 = r - xl - xj
            if a3 == 0 and x3:
                continue
            lp = base + lg(a1 + xl) + lg(a2 + xj) - lg(xl + 1) - lg(xj + 1) - lg(x3 + 1)
            out += math.exp(lp + (lg(a3 + x3) if a3 > 0 else 0.0))
    return out

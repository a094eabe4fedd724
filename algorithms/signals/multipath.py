r"""Certaindex signals: normalized certainty measures in [0, 1] computed while programs run.

- :func:`entropy_certainty` — semantic entropy of answer clusters (SC, MCTS, REBASE);
- :func:`reward_certainty` — a reward model's normalized score (MCTS: mean, REBASE: max);
- :func:`probe_consistency` — probe-in-the-middle agreement for CoT (Dynasor's rule,
  implemented correctly);
- :func:`all_of` — AND composition (minimum).

Example:
    >>> entropy_certainty(["18", "18", "18"]), entropy_certainty(["1", "2", "3"])
    (1.0, 0.0)
    >>> probes = [ProbeObs(32, "18", "18} \\]"), ProbeObs(64, "18.0", "18.0}")]
    >>> probe_consistency(probes, k=2)
    1.0
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from certa.runtime.errors import ConfigError

from certa.algorithms.answers.clustering import Same, cluster, is_empty, resolve_same

__all__ = [
    "HESITATION_WORDS", "ProbeObs", "entropy_certainty", "reward_certainty",
    "has_hesitation", "probe_consistency", "all_of",
]

HESITATION_WORDS: tuple[str, ...] = ("wait", "hold", "but", "okay", "no", "hmm")
"""Words whose presence in a probe continuation blocks an early exit (Dynasor's list)."""

_TINY = math.nextafter(0.0, 1.0)
_BELOW_ONE = math.nextafter(1.0, 0.0)


@dataclass(frozen=True)
class ProbeObs:
    """One probe: the token position it was taken at, the extracted answer and the raw text
    (and, where the engine gives them, the greedy probe tokens' ``logprobs``)."""

    at: int
    answer: str
    text: str = ""
    logprobs: tuple[float, ...] | None = None


def entropy_certainty(answers: Sequence[Any], same: Same = "exact") -> float:
    """Normalized semantic entropy certainty ``(log n - H) / log n`` over answer clusters.

    ``n`` is the number of answers and ``H = -sum(|C|/n * log(|C|/n))`` over clusters
    (empty answers are singleton clusters). The result is exactly 1.0 iff all answers agree
    (one cluster), exactly 0.0 iff all differ (``n`` clusters), strictly between otherwise.
    With fewer than two answers there is no evidence of agreement, so the result is 0.0.

    >>> round(entropy_certainty(["a", "a", "b", "b"]), 3)
    0.5
    """
    n = len(answers)
    if n < 2:
        return 0.0
    sizes = [len(c) for c in cluster(answers, same)]
    if len(sizes) == 1:
        return 1.0
    if len(sizes) == n:
        return 0.0
    h = -sum((s / n) * math.log(s / n) for s in sizes)
    value = (math.log(n) - h) / math.log(n)
    return min(max(value, _TINY), _BELOW_ONE)


def reward_certainty(rewards: Iterable[float], agg: str = "mean", low: float = 0.0,
                     high: float = 1.0) -> float:
    """Aggregate reward scores (``"mean"`` or ``"max"``) mapped from ``[low, high]`` to [0, 1].

    Non-finite rewards are ignored; no finite reward gives 0.0. Values outside the range are
    clamped.

    >>> reward_certainty([0.2, 0.6]), reward_certainty([-1.0, 3.0], agg="max", low=-5, high=5)
    (0.4, 0.8)
    """
    if agg not in ("mean", "max"):
        raise ConfigError(f"unknown reward aggregation {agg!r}", hint="use 'mean' or 'max'")
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ConfigError(f"reward range must satisfy low < high, got [{low}, {high}]")
    values = []
    for r in rewards:
        try:
            v = float(r)
        except (TypeError, ValueError):
            continue
        if math.isfinite(v):
            values.append(min(max(v, low), high))  # clamp first: also keeps the mean finite
    if not values:
        return 0.0
    v = max(values) if agg == "max" else math.fsum(values) / len(values)
    scaled = (v / 2 - low / 2) / (high / 2 - low / 2)  # halves: no overflow on huge ranges
    return min(max(scaled, 0.0), 1.0) if not math.isnan(scaled) else 0.0


@lru_cache(maxsize=64)
def _hesitation_re(words: tuple[str, ...]) -> re.Pattern[str] | None:
    words = tuple(w.strip() for w in words if w and w.strip())
    if not words:
        return None
    return re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b", re.IGNORECASE)


def has_hesitation(text: str | None, words: Sequence[str] = HESITATION_WORDS) -> bool:
    """Whether ``text`` contains one of ``words`` as a whole word, case-insensitively.

    Unlike Dynasor's substring test, "not", "know", "threshold" or "distribute" do not count.

    >>> has_hesitation("Wait, 18?"), has_hesitation("I know it's not 17; threshold")
    (True, False)
    """
    if not text:
        return False
    pattern = _hesitation_re(tuple(words))
    return bool(pattern and pattern.search(str(text)))


def _fields(probe: Any) -> tuple[Any, str]:
    if hasattr(probe, "answer"):
        return probe.answer, getattr(probe, "text", "") or ""
    if isinstance(probe, dict):
        return probe.get("answer"), probe.get("text") or ""
    if isinstance(probe, (tuple, list)):
        if len(probe) == 2:
            return probe[0], probe[1] or ""
        if len(probe) == 3:
            return probe[1], probe[2] or ""
    raise ConfigError(f"cannot read a probe from {type(probe).__name__}",
                      hint="use ProbeObs(at, answer, text), (answer, text) or (at, answer, text)")


def probe_consistency(probes: Sequence[Any], k: int, same: Same = "math",
                      words: Sequence[str] = HESITATION_WORDS) -> float:
    """Probe-in-the-middle certaindex: 1.0 iff the last ``k`` probes agree confidently.

    1.0 when there are at least ``k`` probes and the last ``k`` answers are all non-empty,
    pairwise equivalent under ``same``, and none of their texts has a hesitation word;
    otherwise 0.0. (Dynasor's public ``should_early_exit`` returns True on every path that
    reaches its end, so inconsistent answers exit too; here they give 0.0.)

    ``probes`` holds :class:`ProbeObs`, objects with ``.answer``/``.text``, dicts, or tuples
    ``(answer, text)`` / ``(at, answer, text)``.

    >>> probe_consistency([("18", "18}"), ("20", "20}")], k=2)
    0.0
    """
    if k < 1:
        raise ConfigError(f"probe window k must be >= 1, got {k}")
    if len(probes) < k:
        return 0.0
    window = [_fields(p) for p in list(probes)[-k:]]
    answers = [a for a, _ in window]
    if any(is_empty(a) for a in answers):
        return 0.0
    if any(has_hesitation(t, words) for _, t in window):
        return 0.0
    eq = resolve_same(same)
    for i in range(len(answers)):
        for j in range(i + 1, len(answers)):
            if not eq(answers[i], answers[j]):
                return 0.0
    return 1.0


def all_of(*values: float) -> float:
    """AND of certaindex values: their minimum; no values (or a NaN) give 0.0.

    >>> all_of(0.9, 0.4, 1.0), all_of()
    (0.4, 0.0)
    """
    if not values:
        return 0.0
    out = 1.0
    for v in values:
        v = float(v)
        if math.isnan(v):
            return 0.0
        out = min(out, v)
    return min(max(out, 0.0), 1.0)

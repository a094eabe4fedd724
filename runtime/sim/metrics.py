"""Serving metrics over simulated (or measured) program records.

* SLO attainment — fraction of programs finishing by their deadline; the headline figure
  is the largest arrival rate whose attainment is still >= 90% (:func:`max_rate_at`);
* latency mean / P50 / P90 / P99; programs/s and decode tokens/s over the run's span;
* finish-time fairness — per program ``latency / decode tokens`` (seconds per token), its
  mean, P90, Jain index and CDF (:func:`cdf`).

Example:
    >>> percentile([1, 2, 3, 4], 50)
    2.5
    >>> max_rate_at([0.1, 0.2, 0.4], [1.0, 0.95, 0.5])   # interpolated crossing of 0.9
    0.222222
    >>> cdf([3.0, 1.0, 2.0], points=3)
    [[1.0, 0.333333], [2.0, 0.666667], [3.0, 1.0]]
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from certa.runtime.policy import ExitReason


class _Rec(Protocol):
    arrival: float
    finish: float
    tokens: int
    correct: bool
    exit_reason: ExitReason

    @property
    def latency(self) -> float: ...

    @property
    def met(self) -> bool: ...


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` in [0, 100] (NaN for no data)."""
    if not xs:
        return math.nan
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def jain(xs: Sequence[float]) -> float:
    """Jain's fairness index ``(Σx)² / (n·Σx²)`` in (0, 1]; 1 = perfectly even."""
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if xs and sq > 0 else math.nan


def cdf(xs: Sequence[float], points: int = 50) -> list[list[float]]:
    """Up to ``points`` ``[value, fraction <= value]`` pairs of the empirical CDF."""
    s = sorted(xs)
    if not s:
        return []
    n = len(s)
    idx = sorted({min(n - 1, max(0, round(i * n / points) - 1)) for i in range(1, points + 1)})
    return [[round(s[i], 6), round((i + 1) / n, 6)] for i in idx]


def attainment(records: Sequence[_Rec]) -> float:
    """Fraction of programs that met their deadline."""
    return sum(r.met for r in records) / len(records) if records else math.nan


def summarize(records: Sequence[_Rec], *, cdf_points: int = 50) -> dict[str, Any]:
    """All metrics of one run as a JSON-ready dict."""
    if not records:
        return {"n": 0}
    lat = [r.latency for r in records]
    span = max(r.finish for r in records) - min(r.arrival for r in records)
    ftf = [r.latency / max(r.tokens, 1) for r in records]
    exits: dict[str, int] = {}
    for r in records:
        exits[r.exit_reason] = exits.get(r.exit_reason, 0) + 1
    tokens = sum(r.tokens for r in records)
    return {
        "n": len(records),
        "attainment": attainment(records),
        "latency": {"mean": statistics.fmean(lat), "p50": percentile(lat, 50), "p90": percentile(lat, 90),
                    "p99": percentile(lat, 99)},
        "programs_per_s": len(records) / span if span > 0 else math.nan,
        "tokens_per_s": tokens / span if span > 0 else math.nan,
        "tokens": tokens,
        "accuracy": statistics.fmean(r.correct for r in records),
        "exit_reasons": exits,
        "fairness": {"mean_s_per_token": statistics.fmean(ftf), "p90_s_per_token": percentile(ftf, 90),
                     "jain": jain(ftf), "cdf": cdf(ftf, cdf_points)},
    }


def max_rate_at(rates: Sequence[float], attainments: Sequence[float], target: float = 0.9) -> float | None:
    """The largest rate with attainment >= ``target`` before it first drops below, linearly
    interpolated to the crossing; None if even the lowest rate misses the target."""
    pairs = sorted(zip(rates, attainments))
    if not pairs or pairs[0][1] < target:
        return None
    for (r0, a0), (r1, a1) in zip(pairs, pairs[1:]):
        if a1 < target:
            frac = (a0 - target) / (a0 - a1) if a0 != a1 else 0.0
            return round(r0 + frac * (r1 - r0), 6)
    return pairs[-1][0]


__all__ = ["attainment", "cdf", "jain", "max_rate_at", "percentile", "summarize"]

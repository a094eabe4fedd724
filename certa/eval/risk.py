r"""Finite-sample risk bounds for label-free calibration: Learn-then-Test with fixed-sequence testing.

A *risk* is the mean of a bounded per-problem loss (e.g. the share of a problem's runs whose
early-exit answer differs from full compute). Under exchangeable problems, each test below
says whether the evidence rejects "the risk is at least ``risk``" at level ``delta``:

* :func:`hb_pvalue` — Hoeffding–Bentkus (Bates et al. 2021; what Learn-then-Test uses): a
  p-value for losses in [0, 1] from their mean. With every loss 0 it is the exact binomial
  tail ``(1 - risk) ** n``, the least any valid test can give (see :func:`smallest_certifiable`).
* :class:`BettingTest` — a betting (test-martingale) test for losses in ``[lower, 1]`` (signed
  losses: ``lower = -1``): the capital ``prod(1 + lam_t (risk - loss_t))`` with bets chosen
  from the losses seen before. It uses the losses' spread, not only their mean (a mean of
  several runs per problem has little), and it is *anytime-valid* (Ville's inequality): it may
  be checked after every new observation, as a server does, at no cost in validity.
  :func:`betting_pvalues` is its fixed-sample form (final capital averaged over seeded orders).
* :func:`fixed_sequence` — Learn-then-Test's fixed-sequence procedure: hypotheses tested in a
  fixed order (most conservative setting first), each at level ``delta``, stopping at the first
  not rejected. The family-wise error is at most ``delta`` whatever the risks are (monotone or
  not): with probability >= 1 - delta every setting it certifies has risk < ``risk``.

Example:
    >>> round(hb_pvalue(0.0, 45, 0.05), 4), smallest_certifiable(45, 0.1) < 0.05
    (0.0994, True)
    >>> t = BettingTest(0.05); t.extend([0.0] * 120); t.rejects(0.1)
    True
    >>> fixed_sequence([0.001, 0.01, 0.2, 0.001], delta=0.1)
    1
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from certa.runtime.errors import ConfigError

__all__ = ["MAX_BET", "PRIOR_VARIANCE", "BettingTest", "next_bet", "betting_pvalues", "binom_cdf", "fixed_sequence", "hb_pvalue", "smallest_certifiable"]

MAX_BET = 0.95
"""The boldest bet, as a fraction of the largest safe one ``1 / (1 - risk)`` (a loss of 1 then
keeps 5% of the capital)."""

PRIOR_VARIANCE = 0.25
"""The loss variance the bet assumes before any loss is seen (a fair coin's: cautious first bets)."""


def _check(risk: float, delta: float | None = None) -> None:
    if not 0.0 < risk < 1.0:
        raise ConfigError(f"risk must be in (0, 1), got {risk!r}")
    if delta is not None and not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {delta!r}")


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed in log space (exact to float precision)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
             for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def hb_pvalue(mean_loss: float, n: int, risk: float) -> float:
    """Hoeffding–Bentkus p-value of "risk >= ``risk``" from ``n`` losses in [0, 1] with mean ``mean_loss``."""
    _check(risk)
    if n <= 0:
        return 1.0
    a = min(max(mean_loss, 0.0), risk)
    h = (a * math.log(a / risk) if a > 0 else 0.0) + (1 - a) * math.log((1 - a) / (1 - risk))
    hoeffding = math.exp(-n * h)
    bentkus = math.e * binom_cdf(math.ceil(n * mean_loss - 1e-9), n, risk)
    return min(1.0, hoeffding, bentkus)


def smallest_certifiable(n: int, delta: float) -> float:
    """The smallest risk any valid test can certify from ``n`` problems, even when every loss is
    0: ``1 - delta ** (1 / n)`` (a Bernoulli(risk) loss is 0 on all n with probability (1 - risk)^n)."""
    _check(0.5, delta)
    return 1.0 - delta ** (1.0 / n) if n > 0 else 1.0


def next_bet(n: Any, total: Any, squares: Any, risk: float) -> Any:
    """aGRAPA's bet after ``n`` losses with sum ``total`` and sum of squares ``squares`` (floats or
    numpy arrays): ``(risk - m) / (v + (risk - m)^2)`` clipped to ``[0, MAX_BET / (1 - risk)]``, with
    the mean ``m`` and variance ``v`` shrunk toward a prior (mean 0, :data:`PRIOR_VARIANCE`) of weight 1."""
    mean = total / (n + 1)
    var = np.maximum((squares - n * mean * mean + PRIOR_VARIANCE + mean * mean) / (n + 1), 1e-6)
    edge = risk - mean
    return np.clip(edge / (var + edge * edge), 0.0, MAX_BET / (1.0 - risk))


class BettingTest:
    """Anytime-valid test of "mean loss >= ``risk``" for losses in ``[lower, 1]`` (see module docstring).

    The capital is ``prod(1 + lam_t * (risk - loss_t))``: each bet ``lam_t`` is chosen from the
    losses *before* it (aGRAPA, Waudby-Smith & Ramdas 2023: ``(risk - mean) / (variance +
    (risk - mean)^2)``, clipped to ``[0, MAX_BET / (1 - risk)]``), so under "mean >= risk" the
    capital is a nonnegative supermartingale and reaches ``1 / delta`` with probability at most
    ``delta`` ever (Ville). The running maximum is kept, so a rejection stays.
    """

    def __init__(self, risk: float, *, lower: float = 0.0) -> None:
        _check(risk)
        if lower > 0.0 or lower < -1.0:
            raise ConfigError(f"losses' lower bound must be in [-1, 0], got {lower!r}")
        self.risk, self.lower = risk, lower
        self.cap = MAX_BET / (1.0 - risk)
        self.n, self.total, self.squares = 0, 0.0, 0.0
        self.log_capital, self.log_best = 0.0, 0.0

    def bet(self) -> float:
        """The next bet, from the losses so far (:func:`next_bet`)."""
        return float(next_bet(self.n, self.total, self.squares, self.risk))

    def update(self, loss: float) -> None:
        """One more problem's loss (in ``[lower, 1]``)."""
        if not self.lower - 1e-9 <= loss <= 1.0 + 1e-9:
            raise ConfigError(f"loss {loss!r} is outside [{self.lower}, 1]")
        factor = 1.0 + self.bet() * (self.risk - loss)
        self.log_capital += math.log(factor) if factor > 0 else -math.inf
        self.log_best = max(self.log_best, self.log_capital)
        self.n += 1
        self.total += loss
        self.squares += loss * loss

    def extend(self, losses: Iterable[float]) -> None:
        for loss in losses:
            self.update(loss)

    @property
    def capital(self) -> float:
        return math.exp(min(self.log_capital, 700.0))

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    def pvalue(self) -> float:
        """``1 / max capital so far`` (valid at any time, by Ville's inequality)."""
        return min(1.0, math.exp(-self.log_best))

    def rejects(self, delta: float) -> bool:
        _check(self.risk, delta)
        return self.log_best >= math.log(1.0 / delta)


def betting_pvalues(losses: Any, risk: float, *, lower: float = 0.0, orders: int = 16, seed: int = 0) -> np.ndarray:
    """Fixed-sample p-values from :class:`BettingTest`, one per column of ``losses`` (problems x
    settings): ``1 / mean`` of the final capital over ``orders`` seeded orders of the problems
    (each order's final capital has mean <= 1 under the null, so their mean does too: Markov).
    The same orders serve every column."""
    _check(risk)
    loss = np.asarray(losses, dtype=float)
    if loss.ndim != 2 or not loss.size:
        return np.ones(loss.shape[1] if loss.ndim == 2 else 1)
    if loss.min() < lower - 1e-9 or loss.max() > 1.0 + 1e-9:
        raise ConfigError(f"losses must lie in [{lower}, 1]")
    rng = np.random.default_rng(np.frombuffer(f"certa-betting:{seed}".encode(), dtype=np.uint8))
    perms = np.stack([rng.permutation(loss.shape[0]) for _ in range(orders)])  # orders x problems
    n = np.zeros((orders, loss.shape[1]))
    total, squares, logcap = n.copy(), n.copy(), n.copy()
    with np.errstate(divide="ignore"):
        for t in range(loss.shape[0]):
            x = loss[perms[:, t]]  # orders x settings
            logcap += np.log(np.maximum(1.0 + next_bet(t, total, squares, risk) * (risk - x), 0.0))
            total += x
            squares += x * x
    mean_cap = np.exp(np.minimum(logcap, 700.0)).mean(axis=0)
    return np.minimum(1.0, 1.0 / np.maximum(mean_cap, 1e-300))


def fixed_sequence(pvalues: Sequence[float], delta: float) -> int | None:
    """Index of the last hypothesis rejected in order (each at level ``delta``, stopping at the
    first not rejected); None when the first is not rejected."""
    _check(0.5, delta)
    last = None
    for i, p in enumerate(pvalues):
        if p > delta:
            break
        last = i
    return last

r"""Token-vs-accuracy statistics: iso-accuracy matching and bootstrap CIs over problems.

* :func:`iso_tokens` — tokens the baseline-even curve needs to reach an accuracy (linear
  interpolation on its monotone upper envelope);
* :func:`compare` — a method against baseline-even on the same problems: accuracy delta and
  token ratio vs the full budget, token ratio at matched accuracy, each with a seeded
  bootstrap 95% CI (problems resampled with replacement; every statistic is recomputed on
  each resample, the baseline curve included).

Example:
    >>> curve = [(100.0, 0.5), (200.0, 0.7), (300.0, 0.8)]
    >>> iso_tokens(curve, 0.6), iso_tokens(curve, 0.4), iso_tokens(curve, 0.9)
    (150.0, 100.0, None)
    >>> lo, hi = bootstrap_ci(lambda rows: float(np.mean(np.arange(10.0)[rows])), 10, reps=200, seed=0)
    >>> lo < 4.5 < hi
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from certa.eval.replay_eval import Scores

__all__ = ["bootstrap_ci", "compare", "iso_tokens", "iso_tokens_batch"]


def iso_tokens(curve: Sequence[tuple[float, float]], accuracy: float) -> float | None:
    """Fewest tokens at which the ``(tokens, accuracy)`` curve reaches ``accuracy``.

    Points are taken in increasing tokens; accuracy is made monotone (running maximum) and
    interpolated linearly between points. Below the first point: its tokens. Above the
    curve's best accuracy: None.
    """
    pts = sorted(curve)
    best, prev = -1.0, None
    for tokens, acc in pts:
        acc = max(acc, best)
        if acc >= accuracy - 1e-12:
            if prev is None or acc <= prev[1]:
                return float(tokens)
            t0, a0 = prev
            return float(t0 + (tokens - t0) * (accuracy - a0) / (acc - a0))
        best, prev = acc, (tokens, acc)
    return None


def iso_tokens_batch(tokens: np.ndarray, accuracy: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Vectorised :func:`iso_tokens`: ``tokens``/``accuracy`` are (points, reps), ``target`` (reps,).

    Points must already be in increasing-budget order. Unreached targets give NaN.
    """
    acc = np.maximum.accumulate(accuracy, axis=0)
    out = np.full(target.shape, np.nan)
    for r in range(target.shape[0]):
        out[r] = _iso_column(tokens[:, r], acc[:, r], target[r])
    return out


def _iso_column(tok: np.ndarray, acc: np.ndarray, target: float) -> float:
    hit = np.nonzero(acc >= target - 1e-12)[0]
    if hit.size == 0:
        return np.nan
    i = int(hit[0])
    if i == 0 or acc[i] <= acc[i - 1]:
        return float(tok[i])
    return float(tok[i - 1] + (tok[i] - tok[i - 1]) * (target - acc[i - 1]) / (acc[i] - acc[i - 1]))


def bootstrap_ci(stat: Callable[[np.ndarray], float], n: int, *, reps: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile CI of ``stat(rows)`` over ``reps`` resamples of ``n`` problem rows (seeded)."""
    rng = np.random.default_rng(seed)
    values = np.array([stat(rng.integers(0, n, size=n)) for _ in range(reps)], dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return (float("nan"), float("nan"))
    tail = (1.0 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def _ci(values: np.ndarray, level: float = 0.95) -> list[float | None]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return [None, None]
    tail = (1.0 - level) / 2 * 100
    return [round(float(np.percentile(values, tail)), 6), round(float(np.percentile(values, 100 - tail)), 6)]


def compare(method: Scores, even: Sequence[Scores], *, reps: int = 1000, seed: int = 0) -> dict:
    """``method`` vs baseline-even (``even``: budgets in increasing order, the last = full budget).

    Returns accuracy, tokens, ``baseline_tokens`` (the full budget's), ``correct`` (problems'
    worth of correct answers), ``n`` (problems), ``accuracy_delta`` and ``token_ratio`` vs the full budget,
    ``iso_token_ratio`` (tokens / tokens baseline-even needs for the same accuracy; None when
    the method beats every budget), each with a bootstrap 95% CI (``ci95``).
    """
    if any(e.idx != method.idx for e in even):
        raise ValueError("method and baseline were replayed on different problems")
    full, n = even[-1], len(method.idx)
    curve = [(e.mean_tokens, e.accuracy) for e in even]
    iso = iso_tokens(curve, method.accuracy)
    rows = np.random.default_rng(seed).integers(0, n, size=(reps, n))
    m_tok, m_acc = method.tokens[rows].mean(axis=1), method.correct[rows].mean(axis=1)
    f_tok, f_acc = full.tokens[rows].mean(axis=1), full.correct[rows].mean(axis=1)
    e_tok = np.stack([e.tokens[rows].mean(axis=1) for e in even])
    e_acc = np.stack([e.correct[rows].mean(axis=1) for e in even])
    b_iso = iso_tokens_batch(e_tok, e_acc, m_acc)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_b, iso_b = m_tok / f_tok, m_tok / b_iso
    ratio = method.mean_tokens / full.mean_tokens if full.mean_tokens else float("nan")
    return {
        "accuracy": round(method.accuracy, 6), "tokens": round(method.mean_tokens, 3),
        "baseline_tokens": round(full.mean_tokens, 3), "correct": round(float(method.correct.sum()), 6), "n": n,
        "accuracy_delta": round(method.accuracy - full.accuracy, 6), "token_ratio": round(ratio, 6),
        "iso_token_ratio": None if iso is None else round(method.mean_tokens / iso, 6),
        "ci95": {"accuracy_delta": _ci(m_acc - f_acc), "token_ratio": _ci(ratio_b), "iso_token_ratio": _ci(iso_b)},
        "bootstrap": {"reps": reps, "seed": seed, "problems": n},
    }

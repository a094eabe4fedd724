r"""Calibration grids of the CoT certaindex variants (:mod:`~certa.algorithms.signals.cot`).

Each method is a family of signals, every one ANDed with Dynasor's probe agreement over ``k``
probes (so the variants add evidence to the published rule rather than replace it):

- ``grounded``  — agreement AND the answer was produced by the chain's text (computed/stated);
- ``confident`` — agreement AND the probed answer's probability >= p (needs probe logprobs);
- ``progress``  — agreement only from a fraction of the typical chain length (probes before
  that are not taken at all);
- ``settled``   — agreement AND no hesitation in the chain's recent text;
- ``certa``     — (progress AND) agreement AND settled AND grounded and/or confident (the
  latter when the traces carry logprobs), plus Dynasor's own grid: the default CoT
  certaindex, so on the calibration split it is never worse than Dynasor's rule.

``typical`` (the typical chain length) is learned from the problems being calibrated, never
from held-out ones: :func:`typical_length`.

Example:
    >>> grid = signal_grid("grounded", interval=32, typical=300.0, logprobs=False)
    >>> len(grid), grid[0][0].to_dict()["kind"], sorted({t for _, _, t in grid})
    (12, 'all', [32, 64])
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from certa.runtime.errors import ConfigError
from certa.eval.traces import TraceProblem

from certa.algorithms.signals.cot import AllOf, Confident, CoTSignal, Grounded, ProbeAgreement, Progress, Settled

__all__ = ["COT_SIGNAL_METHODS", "has_logprobs", "signal_grid", "typical_length"]

COT_SIGNAL_METHODS: tuple[str, ...] = ("grounded", "confident", "progress", "settled", "certa")


def typical_length(problems: Sequence[TraceProblem]) -> float:
    """Median main tokens of the problems' finished samples (all samples if none finished)."""
    lengths = [s.tokens for p in problems for s in p.samples if s.finished] \
        or [s.tokens for p in problems for s in p.samples]
    return float(statistics.median(lengths)) if lengths else 0.0


def has_logprobs(problems: Sequence[TraceProblem]) -> bool:
    """Whether every probe of the problems carries ``logprobs``."""
    probes = [q for p in problems for s in p.samples for q in s.probes]
    return bool(probes) and all(q.logprobs is not None for q in probes)


Point = tuple[CoTSignal, int, int]  # (signal, window k, probe interval T)


def signal_grid(method: str, *, interval: int, typical: float, logprobs: bool) -> list[Point]:
    """The candidates of ``method``, most conservative first (ConfigError on an unknown method
    or, for ``confident``, traces without probe logprobs)."""
    intervals = (interval, 2 * interval)
    out: list[Point] = []
    if method == "grounded":
        for mode in ("computed", "stated"):
            for k in (3, 2, 1):
                out += [(AllOf(ProbeAgreement(k), Grounded(mode)), k, t) for t in intervals]
    elif method == "confident":
        if not logprobs:
            raise ConfigError("the confident CoT signal needs probe logprobs in the traces",
                              hint="collect with `certa traces collect` on the llama.cpp engine")
        for p in (0.9, 0.8, 0.7, 0.5, 0.3):
            for k in (3, 2, 1):
                out += [(AllOf(ProbeAgreement(k), Confident(p)), k, t) for t in intervals]
    elif method == "progress":
        for f in (0.9, 0.75, 0.6, 0.5):
            for k in (5, 3, 2):
                out += [(AllOf(Progress(f, typical), ProbeAgreement(k)), k, t) for t in intervals]
    elif method == "settled":
        for k in (5, 3, 2):
            out += [(AllOf(ProbeAgreement(k), Settled()), k, t) for t in intervals]
    elif method == "certa":
        for f in (0.75, 0.5, 0.0):
            for mode in ("computed", "stated", None):
                for p in ((0.9, 0.8, 0.7, 0.5, None) if logprobs else (None,)):
                    if mode is None and p is None:
                        continue  # no evidence beyond agreement: that is the progress method
                    for k in (2, 1):
                        parts: list[CoTSignal] = [ProbeAgreement(k), Settled()]
                        if f:
                            parts.insert(0, Progress(f, typical))
                        if mode is not None:
                            parts.append(Grounded(mode))
                        if p is not None:
                            parts.append(Confident(p))
                        out += [(AllOf(*parts), k, t) for t in intervals]
    else:
        raise ConfigError(f"unknown CoT signal method {method!r}", hint=f"one of {', '.join(COT_SIGNAL_METHODS)}")
    return out

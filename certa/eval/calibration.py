r"""Profiler calibration: pick a policy on a calibration split, report it on the held-out split.

:func:`split_problems` shuffles problems (by sorted idx, seeded) into a calibration part and a
held-out part. :func:`calibrate` sees the calibration part only: it replays every candidate
policy of a method's grid (:func:`candidates`) and keeps the one that spends the fewest
tokens with **no accuracy loss** on the calibration problems vs baseline-even at the full
budget. :func:`calibrate_split` then reports the choice on the held-out part (accuracy delta,
token ratio vs baseline-even, bootstrap 95% CI over problems) and returns the policy file
``{"policy": ..., "program": ..., "calibration": ..., "heldout": ...}`` that
``certa run --policy`` loads.

Methods: SC ``threshold`` (tau x detection step x check period, the paper's rule),
``pareto`` (:meth:`~certa.algorithms.policies.Pareto.fit` curves), ``esc``,
``adaptive-consistency``; CoT ``probe`` (Dynasor's rule: window k x probe interval T x first
check) and the certaindex variants of :mod:`~certa.eval.cot_grid` (``grounded``,
``confident``, ``progress``, ``settled``, ``certa``).

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> probs = synth_traces(12, seed=0, samples=8, probed=2)
    >>> out = calibrate_split(probs, "sc", cal_fraction=0.5, seed=0, reps=100)
    >>> out["policy"]["kind"], out["calibration"]["accuracy_delta"] >= 0
    ('threshold', True)
    >>> sorted(out["split"]["calibration_idx"]) != sorted(out["split"]["heldout_idx"])
    True
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from certa.eval.errors import DatasetError
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Even, Policy, Threshold
from certa.eval.traces import TraceProblem

from certa.eval.cot_grid import COT_SIGNAL_METHODS, has_logprobs, signal_grid, typical_length
from certa.algorithms.signals.cot import CoTSignal
from certa.eval.datasets import RESERVED_FROM
from certa.eval.evalstats import compare
from certa.algorithms.policies import ESC, AdaptiveConsistency, Pareto
from certa.eval.replay import ReplaySC
from certa.eval.replay_eval import ProgramKind, Replayer, Scores, check_traces

__all__ = ["Candidate", "Calibration", "METHODS", "calibrate", "calibrate_split", "candidates", "check_not_reserved",
           "even_ladder", "split_problems"]

METHODS: dict[str, tuple[str, ...]] = {"sc": ("threshold", "pareto", "esc", "adaptive-consistency"),
                                        "cot": ("certa", "probe", *(m for m in COT_SIGNAL_METHODS if m != "certa"))}
"""Calibratable methods per program."""


@dataclass(frozen=True)
class Candidate:
    """One point of a method's grid: a policy (and, for CoT, the program's ``k``/``interval``)."""

    method: str
    policy: Policy | None
    k: int | None = None
    interval: int | None = None
    signal: CoTSignal | None = None  # CoT certaindex (None: Dynasor's rule over k probes)

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "policy": None if self.policy is None else self.policy.to_dict()}
        if self.k is not None:
            out |= {"k": self.k, "interval": self.interval}
        if self.signal is not None:
            out["signal"] = self.signal.to_dict()
        return out

    def run(self, replayer: Replayer) -> Scores:
        """Replay this candidate on ``replayer``'s problems."""
        return replayer.run(self.policy, k=self.k, interval=self.interval, signal=self.signal)


@dataclass
class Calibration:
    """The choice made on the calibration split, with its calibration-split figures."""

    program: ProgramKind
    choice: Candidate
    scores: Scores
    baseline: Scores
    tried: int
    feasible: int
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        s, b = self.scores, self.baseline
        return {"problems": len(s.idx), "accuracy": round(s.accuracy, 6), "baseline_accuracy": round(b.accuracy, 6),
                "accuracy_delta": round(s.accuracy - b.accuracy, 6), "tokens": round(s.mean_tokens, 3),
                "baseline_tokens": round(b.mean_tokens, 3),
                "token_ratio": round(s.mean_tokens / b.mean_tokens, 6) if b.mean_tokens else None,
                "candidates": self.tried, "feasible": self.feasible, **self.extra}


def split_problems(problems: Sequence[TraceProblem], cal_fraction: float, seed: int
                   ) -> tuple[list[TraceProblem], list[TraceProblem]]:
    """Seeded shuffle of the problems (sorted by idx first) into (calibration, held-out).

    >>> from certa.simulation.synth import synth_traces
    >>> cal, held = split_problems(synth_traces(10, seed=0, samples=2, probed=0), 0.3, seed=1)
    >>> len(cal), len(held), {p.idx for p in cal} & {p.idx for p in held}
    (3, 7, set())
    """
    if not 0.0 < cal_fraction < 1.0:
        raise ConfigError(f"--cal-fraction must be strictly between 0 and 1, got {cal_fraction}")
    if len(problems) < 2:
        raise ConfigError(f"a calibration/held-out split needs at least 2 problems, got {len(problems)}")
    ordered = sorted(problems, key=lambda p: (str(type(p.idx)), p.idx))
    random.Random(f"certa-split:{seed}").shuffle(ordered)
    n_cal = min(len(ordered) - 1, max(1, round(len(ordered) * cal_fraction)))
    return ordered[:n_cal], ordered[n_cal:]


def check_not_reserved(problems: Sequence[TraceProblem], dataset: str | None) -> None:
    """Refuse to calibrate on reserved rows (GSM8K idx >= 800, MATH-500 idx >= 300)."""
    for p in problems:
        name = dataset or (p.model_extra or {}).get("dataset")
        cut = RESERVED_FROM.get(str(name).lower()) if name else None
        if cut is not None and isinstance(p.idx, int) and p.idx >= cut:
            raise DatasetError(f"trace problem {p.idx} is in the reserved {name} split (idx >= {cut})",
                               hint="calibrate on development rows only; reserved rows are for final reports")


def even_ladder(replayer: Replayer) -> list[Candidate]:
    """Baseline-even budgets in increasing order; the last one is the full budget.

    SC: 1..N samples. CoT: token budgets every few probe intervals (at most ~24 rungs), each
    answered by one probe when the chain is cut (the probe is counted); the last runs every
    chain to its end.
    """
    if replayer.program == "sc":
        return [Candidate("even", Even(b)) for b in range(1, replayer.n_samples + 1)]
    iv, top = replayer.interval, replayer.max_tokens
    step = iv * max(1, -(-top // (iv * 24)))
    budgets = list(range(step, top, step)) + [-(-top // iv) * iv]
    return [Candidate("even", Even(b), k=1, interval=b) for b in budgets]


def _tau_grid(values: list[float], limit: int = 14) -> list[float]:
    vals = sorted({math.floor(v * 1e6) / 1e6 for v in values if v > 0.0} | {1.0})  # floor: c >= tau holds
    if len(vals) > limit:
        vals = sorted({vals[round(i * (len(vals) - 1) / (limit - 1))] for i in range(limit)})
    return vals[::-1]  # most conservative first


def candidates(replayer: Replayer, method: str, *, typical: float | None = None) -> list[Candidate]:
    """The grid of ``method`` for the problems ``replayer`` holds (most conservative first).

    CoT signal methods learn the typical chain length from ``replayer``'s problems unless
    ``typical`` is given (a held-out report passes the calibration split's)."""
    if method not in METHODS[replayer.program]:
        raise ConfigError(f"unknown {replayer.program} method {method!r}",
                          hint=f"one of {', '.join(METHODS[replayer.program])}")
    if method in COT_SIGNAL_METHODS:
        typ = typical_length(replayer.problems) if typical is None else typical
        grid = signal_grid(method, interval=replayer.interval, typical=typ, logprobs=has_logprobs(replayer.problems))
        out = [Candidate(method, Threshold(1.0, detect_at=1, every=1), k=k, interval=t, signal=sig)
               for sig, k, t in grid]
        if method == "certa":  # the default also considers Dynasor's rule itself: never worse on calibration
            out += [Candidate(method, c.policy, k=c.k, interval=c.interval) for c in candidates(replayer, "probe")]
        return out
    n = replayer.n_samples
    detect = [d for d in (2, 3, 4, 5, 6, 8, 10, 12) if d < n] or [1]
    if method == "esc":
        return [Candidate("esc", ESC(window=w)) for w in (8, 6, 5, 4, 3, 2) if w <= n]
    if method == "adaptive-consistency":
        return [Candidate(method, AdaptiveConsistency(t)) for t in (0.999, 0.99, 0.95, 0.9, 0.8)]
    if method == "probe":
        iv = replayer.interval
        out = []
        for first in (256, 128, 1):
            for k in (8, 5, 4, 3, 2):
                for t in sorted({iv, 2 * iv, 4 * iv} | ({64} if 64 % iv == 0 else set()), reverse=True):
                    out.append(Candidate("probe", Threshold(1.0, detect_at=first, every=1), k=k, interval=t))
        return out
    runs = _full_runs(replayer)
    if method == "threshold":
        out = []
        for d in detect:
            taus = _tau_grid([c for traj, _ in runs for knob, c in traj if knob >= d])
            for every in (None, d):
                out += [Candidate("threshold", Threshold(tau, detect_at=d, every=every)) for tau in taus]
        return out
    out = []
    for d in detect:  # pareto: certaindex at the detection step -> samples needed for the full-budget outcome
        points = [(dict(traj)[d], need(d)) for traj, need in runs]
        for bins in (2, 3, 4):
            for q in (1.0, 0.9, 0.75, 0.5):
                out.append(Candidate("pareto", Pareto.fit(points, bins=bins, quantile=q, detect_at=d)))
    return out


def _full_runs(replayer: Replayer) -> list[tuple[list[tuple[int, float]], Any]]:
    """Full-budget SC runs: each unit's certaindex trajectory and a ``need(detect_at)`` function."""
    runs: list[tuple[list[tuple[int, float]], Any]] = []

    def keep(_: TraceProblem, prog: Any) -> None:
        assert isinstance(prog, ReplaySC)
        n = len(prog.state.answers)
        final = prog.correct_at(n)
        stable = n  # smallest b such that every vote from b to n has the full-budget correctness
        while stable > 1 and prog.correct_at(stable - 1) == final:
            stable -= 1
        runs.append(([(p.knob, p.value) for p in prog.trajectory], lambda d, s=stable: max(d, s)))
    replayer.run(None, on_program=keep)
    return runs


def calibrate(cal_problems: Sequence[TraceProblem], program: ProgramKind, *, method: str | None = None,
              seed: int = 0, orders: int = 1, dataset: str | None = None) -> Calibration:
    """Choose ``method``'s policy on ``cal_problems`` (and nothing else): fewest tokens with no
    accuracy loss vs baseline-even at the full budget (ties: the earlier grid point; within a
    detection step, the higher tau)."""
    check_not_reserved(cal_problems, dataset)
    method = method or METHODS[program][0]
    rep = Replayer(cal_problems, program, seed=seed, orders=orders, dataset=dataset)
    full = even_ladder(rep)[-1]
    baseline = full.run(rep)
    grid = candidates(rep, method)
    best: tuple[Candidate, Scores] = (full, baseline)  # always feasible: the full budget itself
    feasible = 0
    for cand in grid:
        scores = cand.run(rep)
        if scores.correct.sum() < baseline.correct.sum() - 1e-9:
            continue
        feasible += 1
        if scores.mean_tokens < best[1].mean_tokens - 1e-9:
            best = (cand, scores)
    extra = {"typical_tokens": typical_length(cal_problems)} if method in COT_SIGNAL_METHODS else {}
    return Calibration(program, best[0], best[1], baseline, tried=len(grid), feasible=feasible, extra=extra)


def calibrate_split(problems: Sequence[TraceProblem], program: ProgramKind, *, cal_fraction: float = 0.5,
                    seed: int = 0, method: str | None = None, orders: int = 1, dataset: str | None = None,
                    reps: int = 1000) -> dict[str, Any]:
    """Split, calibrate on the calibration part, report on the held-out part; the policy file as a dict.

    For SC's default ``threshold`` method the file also carries a Pareto curve
    (:meth:`~certa.algorithms.policies.Pareto.fit`, calibrated the same way) under ``alternatives``.
    """
    check_traces(problems, program)
    cal, held = split_problems(problems, cal_fraction, seed)
    method = method or METHODS[program][0]
    extra = ["pareto"] if program == "sc" and method == "threshold" else []
    results = [calibrate(cal, program, method=m, seed=seed, orders=orders, dataset=dataset) for m in [method, *extra]]
    reports = [report_heldout(r.choice, held, program, seed=seed, orders=orders, dataset=dataset, reps=reps)
               for r in results]  # every calibration is done before the held-out part is read
    choice = results[0].choice
    spec: dict[str, Any] = {"name": program}
    if choice.k is not None and choice.method != "even":
        spec |= {"k": choice.k, "interval": choice.interval}
    if choice.signal is not None:
        spec["signal"] = choice.signal.to_dict()
    assert choice.policy is not None
    out = {"policy": choice.policy.to_dict(), "program": spec, "method": choice.method,
           "calibration": results[0].summary(), "heldout": reports[0],
           "split": {"cal_fraction": cal_fraction, "seed": seed, "orders": orders,
                     "calibration_idx": [p.idx for p in cal], "heldout_idx": [p.idx for p in held]}}
    if extra:
        out["alternatives"] = {m: {"policy": r.choice.policy.to_dict() if r.choice.policy else None,
                                   "method": r.choice.method, "calibration": r.summary(), "heldout": rep}
                               for m, r, rep in zip(extra, results[1:], reports[1:], strict=True)}
    return out


def report_heldout(choice: Candidate, held: Sequence[TraceProblem], program: ProgramKind, *, seed: int = 0,
                   orders: int = 1, dataset: str | None = None, reps: int = 1000) -> dict[str, Any]:
    """``choice`` on the held-out problems vs baseline-even (full budget and matched accuracy), with CIs."""
    rep = Replayer(held, program, seed=seed, orders=orders, dataset=dataset)
    even = [c.run(rep) for c in even_ladder(rep)]
    scores = choice.run(rep)
    out = compare(scores, even, reps=reps, seed=seed)
    out["baseline_accuracy"] = round(even[-1].accuracy, 6)
    out["baseline_tokens"] = round(even[-1].mean_tokens, 3)
    out["tokens_by_kind"] = scores.summary()
    return out

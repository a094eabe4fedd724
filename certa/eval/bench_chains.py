r"""CoT early exit on probe banks: fixed rules scored on every chain of a file, with hindsight bounds.

A probe bank (``shared/data/probes``: reasoning chains with the same model's own sampled
forced-answer probes, several chains per problem, each probe's decode tokens recorded as
``probe_tokens``) is scored here rather than by the calibrate-then-report split of
:func:`~certa.eval.bench_tokens.bench_tokens`: every rule below is fixed (chosen on *other*
files, never on this one), so the whole file is scored. Each chain is one CoT run; a problem
scores the mean of its chains. Rows:

* ``baseline-even`` — full chains (no probes: the reference), with the even token-budget
  curve (a cut chain answers with one counted probe);
* ``certa-default`` — ``cot_program()``'s certaindex as shipped
  (:func:`~certa.algorithms.signals.reasoning.reasoning_signal`);
* ``dynasor-k{k}`` — Dynasor's rule (the last k probes agree, none hesitates) for each k of
  :data:`DYNASOR_KS`, and Dynasor's presets at T=64;
* ``oracle-settled`` — exit at the first probe from which every later probe equals the chain's
  final answer (probes paid up to it); ``oracle-first-correct`` — exit at the first correct
  probe. Both ORACLE (they read the final answer or the gold): bounds, never targets.

Every row carries ``token_ratio``/``accuracy_delta`` (vs full chains), ``tokens``,
``baseline_tokens``, ``correct`` (problems' worth of correct answers), ``n`` (problems) and
bootstrap 95% CIs, so rows pool across files. Reserved rows (MATH-500 idx >= 300) are skipped
unless ``final=True`` (a final report, whole file).

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> r = bench_chains(synth_traces(6, seed=0, samples=3, probed=3), reps=50)
    >>> sorted(r["methods"])[:3], r["methods"]["baseline-even"]["token_ratio"]
    (['baseline-even', 'certa-default', 'dynasor-high'], 1.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from certa.algorithms.programs.cot_probe import CERTA_INTERVAL, PRESETS
from certa.algorithms.signals.cot import CoTSignal, ProbeAgreement
from certa.algorithms.signals.reasoning import reasoning_signal
from certa.eval.calibration import even_ladder
from certa.eval.datasets import RESERVED_FROM
from certa.eval.evalstats import compare
from certa.eval.replay import probed
from certa.eval.replay_backend import probe_cost
from certa.eval.replay_eval import Replayer, Scores, trace_interval
from certa.eval.traces import Sample, TraceProblem
from certa.runtime.policy import Threshold

__all__ = ["DYNASOR_KS", "ORACLES", "bench_chains", "headroom", "is_probe_bank", "oracle_chains", "split_reserved"]

DYNASOR_KS: tuple[int, ...] = (4, 8, 16, 24, 32, 48)
"""The probe windows of Dynasor's rule scored beside the default (its k chosen elsewhere)."""

PROBE_BUDGET = 32
"""Probe decode budget when replaying banks (their probes were decoded up to 32 tokens)."""


def is_probe_bank(problems: Sequence[TraceProblem]) -> bool:
    """Whether ``problems`` are a probe bank: their probes record ``probe_tokens``."""
    return any("probe_tokens" in (q.model_extra or {}) for p in problems for s in p.samples for q in s.probes)


def split_reserved(problems: Sequence[TraceProblem], dataset: str | None = None
                   ) -> tuple[list[TraceProblem], list[TraceProblem]]:
    """``(development, reserved)`` rows (reserved: GSM8K idx >= 800, MATH-500 idx >= 300)."""
    dev, reserved = [], []
    for p in problems:
        name = str(dataset or (p.model_extra or {}).get("dataset") or "").lower()
        cut = RESERVED_FROM.get(name)
        (reserved if cut is not None and isinstance(p.idx, int) and p.idx >= cut else dev).append(p)
    return dev, reserved


def _settled_at(s: Sample, same: Callable[[str, str], bool]) -> int | None:
    """Index of the first probe from which every probe equals the chain's final answer."""
    out = None
    for i in range(len(s.probes) - 1, -1, -1):
        q = s.probes[i]
        if q.at < s.tokens and q.answer and s.pred and same(q.answer, s.pred):
            out = i
        else:
            break
    return out


def oracle_chains(rep: Replayer, kind: str) -> Scores:
    """ORACLE exits on every chain (``settled`` or ``first-correct``), probes every interval paid
    up to the exit; chains without such a probe run to their end."""
    cols: list[tuple[float, ...]] = []
    for problem in rep.problems:
        judge, iv, rows = rep.grader(problem), trace_interval(problem), []
        for s in (x for x in problem.samples if probed(x, iv)):
            if kind == "settled":  # the final answer, scored as the chain's ("15+3" may equal 18, not grade so)
                i = _settled_at(s, lambda a, b: rep.same(a, b) and judge(a) == bool(s.correct))
            else:
                i = next((j for j, q in enumerate(s.probes) if q.at < s.tokens and q.answer and judge(q.answer)), None)
            if i is None:
                rows.append((s.tokens, float(bool(s.correct)), s.tokens, 0.0))
                continue
            paid = float(sum(probe_cost(q, PROBE_BUDGET) for q in s.probes[:i + 1]))
            rows.append((s.probes[i].at + paid, float(judge(s.probes[i].answer or "")), s.probes[i].at, paid))
        cols.append(tuple(np.mean(np.array(rows, dtype=float), axis=0)))
    a = np.array(cols, dtype=float)
    zero = np.zeros(len(cols))
    return Scores(idx=rep.idx, tokens=a[:, 0], correct=a[:, 1], main=a[:, 2], probe=a[:, 3], score=zero,
                  prefill=zero, knob=a[:, 2], exits={"oracle": len(cols)})


ORACLES = {"settled": "ORACLE: exit at the first probe after which every probe is the final answer",
           "first-correct": "ORACLE: exit at the first correct probe"}


def headroom(problems: Sequence[TraceProblem], *, final: bool = False, dataset: str | None = None) -> dict[str, Any]:
    """The hindsight bounds of a probe bank (``certa traces headroom``): full chains and each
    :data:`ORACLES` exit, as token ratio and accuracy delta (reserved rows skipped unless ``final``)."""
    dev, reserved = split_reserved(problems, dataset)
    scored = list(problems) if final else dev
    rep = Replayer(scored, "cot", dataset=dataset, probe_tokens=PROBE_BUDGET)
    full = even_ladder(rep)[-1].run(rep)
    bounds = {}
    for kind, label in ORACLES.items():
        s = oracle_chains(rep, kind)
        bounds[f"oracle-{kind}"] = {"label": label, "token_ratio": round(s.mean_tokens / full.mean_tokens, 6),
                                    "accuracy_delta": round(s.accuracy - full.accuracy, 6), "tokens": round(s.mean_tokens, 3),
                                    "accuracy": round(s.accuracy, 6)}
    chains = sum(1 for p in scored for x in p.samples if probed(x, trace_interval(p)))
    return {"problems": len(scored), "chains": chains, "reserved_skipped": 0 if final else len(reserved),
            "models": sorted({p.model for p in scored}), "accuracy": round(full.accuracy, 6),
            "tokens": round(full.mean_tokens, 3), "bounds": bounds}


def _row(label: str, s: Scores, even: list[Scores], reps: int, seed: int, **extra: Any) -> dict[str, Any]:
    out = {"label": label, **compare(s, even, reps=reps, seed=seed), "tokens_by_kind": s.summary(), **extra}
    return out


def _rules(interval: int) -> dict[str, tuple[str, CoTSignal, int]]:
    """The fixed rules scored on a bank: name -> (label, signal, chunk tokens)."""
    out: dict[str, tuple[str, CoTSignal, int]] = {}
    sig = reasoning_signal()
    out["certa-default"] = ("certa default (cot_program(): boxed | stated & vote)", sig, CERTA_INTERVAL)
    for k in DYNASOR_KS:
        out[f"dynasor-k{k}"] = (f"Dynasor's rule, k={k} (T={interval})", ProbeAgreement(k), interval)
    for name, (k, t) in PRESETS.items():
        if t % interval == 0:
            out[f"dynasor-{name}"] = (f"Dynasor preset {name} (k={k}, T={t})", ProbeAgreement(k), t)
    return out


def bench_chains(problems: Sequence[TraceProblem], *, final: bool = False, seed: int = 0, reps: int = 1000,
                 dataset: str | None = None, rules: Sequence[str] | None = None) -> dict[str, Any]:
    """Score the fixed CoT rules on every chain of a probe bank (see the module docstring)."""
    dev, reserved = split_reserved(problems, dataset)
    scored = list(problems) if final else dev
    rep = Replayer(scored, "cot", seed=seed, dataset=dataset, probe_tokens=PROBE_BUDGET)
    ladder = even_ladder(rep)
    even = [c.run(rep) for c in ladder]
    curve = [{"label": f"{c.interval} tokens", **compare(s, even, reps=reps, seed=seed)} for c, s in zip(ladder, even)]
    methods: dict[str, Any] = {"baseline-even": {**_row("full chains", even[-1], even, reps, seed), "curve": curve}}
    first = Threshold(1.0, detect_at=1, every=1)
    for name, (label, signal, interval) in _rules(rep.interval).items():
        if rules is not None and name not in rules:
            continue
        s = rep.run(first, k=signal.window, interval=interval, signal=signal)
        methods[name] = _row(label, s, even, reps, seed, signal=signal.to_dict(), interval=interval)
    for kind, label in ORACLES.items():
        methods[f"oracle-{kind}"] = {**_row(label, oracle_chains(rep, kind), even, reps, seed), "oracle": True}
    chains = sum(1 for p in scored for s in p.samples if probed(s, trace_interval(p)))
    return {"program": "cot", "mode": "probe-bank", "final": final, "problems": len(scored), "chains": chains,
            "reserved_skipped": 0 if final else len(reserved), "seed": seed, "bootstrap_reps": reps,
            "interval": rep.interval, "models": sorted({p.model for p in scored}),
            "datasets": sorted({str((p.model_extra or {}).get("dataset", "")) for p in scored}),
            "idx": [p.idx for p in scored], "methods": methods}

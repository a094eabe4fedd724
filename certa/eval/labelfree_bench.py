r"""Bench rows for label-free calibration: ``certa-labelfree`` (cross-fitted) and ``certa-online`` (streamed).

Both start from one loss table (:func:`~certa.eval.outcomes.outcomes`: every setting of the
program's family replayed on every problem, labels removed) and are *scored* with the labels:

* ``certa-labelfree`` — the problems are split into ``folds`` seeded folds (2: the issue's
  halves); each fold is served with the setting certified on the other folds' losses alone
  (:func:`~certa.eval.labelfree.certify`; the shipped default when nothing is certified);
* ``certa-online`` — the problems arrive one by one in ``streams`` seeded orders; each is
  explored (run to full compute, probed where every setting would; its answer is full
  compute's, its cost counted) with the probability :class:`~certa.selfcal.ExploreRate` gives,
  else served with the current setting, which moves only when the anytime-valid tests on the
  explored problems so far certify one (:class:`~certa.selfcal.OnlineCertifier`);
* ``fixed-default`` — the shipped setting on every problem; ``hindsight-labels`` (ORACLE: chosen
  on this very file *with* its labels) — the family's cheapest setting within ``tolerance`` of
  full compute's accuracy: the bound a label-free choice is compared with.

Rows carry ``token_ratio``/``accuracy_delta`` vs full compute with bootstrap CIs, as every
bench row does (``iso_token_ratio`` None: no baseline curve here), plus what was certified per
fold or stream.

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> rows = labelfree_rows(synth_traces(30, seed=0, samples=8, probed=0), "sc", risk=0.2, orders=2, reps=50)
    >>> sorted(rows), rows["certa-labelfree"]["folds"][0]["problems"]
    (['certa-labelfree', 'certa-online', 'fixed-default', 'hindsight-labels'], 15)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from certa.algorithms.answers.clustering import majority
from certa.algorithms.answers.equivalence import grade
from certa.eval.evalstats import compare
from certa.eval.families import Family, family
from certa.eval.labelfree import certify
from certa.eval.outcomes import Outcomes, Reference, outcomes
from certa.eval.replay_eval import Replayer, Scores
from certa.eval.traces import TraceProblem
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Even

__all__ = ["ROWS", "crossfit", "graded", "labelfree_rows", "online_stream", "rows_from"]

ROWS: tuple[str, ...] = ("fixed-default", "certa-labelfree", "certa-online", "hindsight-labels")
"""Every row :func:`labelfree_rows` can make."""


def _scores(idx: Sequence[Any], tokens: Sequence[float], correct: Sequence[float], label: str) -> Scores:
    t, c = np.asarray(tokens, dtype=float), np.asarray(correct, dtype=float)
    zero = np.zeros(len(t))
    return Scores(idx=tuple(idx), tokens=t, correct=c, main=t, probe=zero, score=zero, prefill=zero, knob=zero,
                  exits={label: len(t)})


def graded(problems: Sequence[TraceProblem], out: Outcomes, program: str, *, dataset: str | None = None,
           orders: int = 20, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """With the labels (scoring only): each setting's per-problem accuracy, and full compute's."""
    n, m = out.loss.shape
    right, count = np.zeros((n, m)), np.zeros((n, m))
    cache: dict[tuple, bool] = {}
    for row, col, _, answer, judge, _, _ in out.units:
        p = problems[row]
        name = dataset or (p.model_extra or {}).get("dataset") or "math"
        if judge is not None:
            ok = bool(p.samples[judge].correct)
        else:
            key = (answer, str(p.gold), name)
            if key not in cache:
                cache[key] = bool(answer) and p.gold is not None and bool(grade(answer, str(p.gold), name))
            ok = cache[key]
        right[row, col] += ok
        count[row, col] += 1
    if program == "sc":
        rep = Replayer(problems, "sc", seed=seed, orders=orders, dataset=dataset)
        full = rep.run(Even(rep.n_samples)).correct
    elif program == "cot":
        full = np.array([np.mean([bool(s.correct) for s in p.samples if s.probes]) for p in problems])
    else:
        full = np.array([float(bool(p.gold is not None and grade(str(majority([s.pred or "" for s in p.samples],
                                                                             same="math")[0] or ""), str(p.gold),
                                                                dataset or (p.model_extra or {}).get("dataset") or "math")))
                         for p in problems])
    return right / np.maximum(count, 1), np.asarray(full, dtype=float)


def _folds(n: int, k: int, seed: int) -> list[list[int]]:
    rows = list(range(n))
    random.Random(f"certa-labelfree:{seed}").shuffle(rows)
    return [sorted(rows[i::k]) for i in range(k)]


def crossfit(out: Outcomes, fam: Family, *, risk: float, delta: float, folds: int, seed: int
             ) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Per problem the setting column it is served with (certified on the other folds), and per fold what was chosen."""
    n = len(out.idx)
    if not 2 <= folds <= n:
        raise ConfigError(f"--folds must be between 2 and the number of problems ({n}), got {folds}")
    col = np.zeros(n, dtype=int)
    info = []
    for test in _folds(n, folds, seed):
        train = [r for r in range(n) if r not in set(test)]
        cert = certify(out.subset(train), risk, delta, seed=seed)
        c = cert.chosen if cert.chosen is not None else fam.index(fam.default)
        col[test] = c
        info.append({"problems": len(test), "calibration_problems": len(train), "certified": cert.chosen is not None,
                     "setting": fam.label(fam.values[c])})
    return col, info


def online_stream(out: Outcomes, fam: Family, *, risk: float, delta: float, order: Sequence[int], rng: random.Random,
                  explore: Any = None) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """One stream in ``order``: per problem the served column (-1: explored) and its tokens, and the stream's story."""
    from certa.selfcal import ExploreRate, OnlineCertifier
    rate = explore or ExploreRate()
    cert = OnlineCertifier(fam, risk, delta=delta, lower=out.lower)
    col, tokens = np.zeros(len(order), dtype=int), np.zeros(len(order))
    moves, extra, spent = [], 0.0, 0.0
    for t, row in enumerate(order):
        current = cert.current_index
        if rng.random() < rate(cert.explored, cert.certified):
            col[row], tokens[row] = -1, out.explore_tokens[row]
            extra += out.explore_tokens[row] - out.tokens[row, current]
            cert.observe(out.loss[row], out.tokens[row])
            if cert.current_index != current:
                moves.append({"after": t + 1, "explored": cert.explored, "setting": fam.label(cert.current)})
        else:
            col[row], tokens[row] = current, out.tokens[row, current]
        spent += tokens[row]
    story = {"explored": cert.explored, "final_setting": fam.label(cert.current), "moves": moves,
             "explore_cost_share": round(extra / spent, 6) if spent else 0.0}
    return col, tokens, story


def labelfree_rows(problems: Sequence[TraceProblem], program: str, *, risk: float, delta: float = 0.1,
                   reference: Reference = "final", folds: int = 2, streams: int = 5, seed: int = 0, orders: int = 20,
                   reps: int = 1000, dataset: str | None = None, tolerance: float | None = None,
                   explore: Any = None, rows: Sequence[str] = ROWS) -> dict[str, dict[str, Any]]:
    """The label-free ``rows`` on ``problems`` (see the module docstring), scored vs full compute."""
    ref: Reference = reference if program == "cot" else "final"
    out = outcomes(problems, family(program), reference=ref, orders=orders, seed=seed)
    acc, full_acc = graded(problems, out, program, dataset=dataset, orders=orders, seed=seed)
    return rows_from(out, acc, full_acc, program, risk=risk, delta=delta, folds=folds, streams=streams, seed=seed,
                     reps=reps, tolerance=tolerance, explore=explore, rows=rows)


def rows_from(out: Outcomes, acc: np.ndarray, full_acc: np.ndarray, program: str, *, risk: float, delta: float = 0.1,
              folds: int = 2, streams: int = 5, seed: int = 0, reps: int = 1000, tolerance: float | None = None,
              explore: Any = None, rows: Sequence[str] = ROWS) -> dict[str, dict[str, Any]]:
    """:func:`labelfree_rows` from a loss table and its graded accuracies (:func:`graded`)."""
    fam = family(program)
    n, idx, pick, ref = len(out.idx), out.idx, np.arange(len(out.idx)), "consensus" if out.lower < 0 else "final"
    full = _scores(idx, out.full_tokens, full_acc, "full")
    def row(s: Scores, **extra: Any) -> dict[str, Any]:  # vs full compute only: no baseline curve, no iso ratio
        got = compare(s, [full], reps=reps, seed=seed)
        got["iso_token_ratio"], got["ci95"]["iso_token_ratio"] = None, [None, None]
        return {**got, **extra}
    got: dict[str, dict[str, Any]] = {}
    d = fam.index(fam.default)
    if "fixed-default" in rows:
        got["fixed-default"] = row(_scores(idx, out.tokens[:, d], acc[:, d], "default"),
                                   label=f"shipped default ({fam.label(fam.default)})")
    if "certa-labelfree" in rows:
        cols, info = crossfit(out, fam, risk=risk, delta=delta, folds=folds, seed=seed)
        got["certa-labelfree"] = row(_scores(idx, out.tokens[pick, cols], acc[pick, cols], "labelfree"),
                                     label=f"label-free, {folds}-fold cross-fitted, risk {risk:g} ({ref})",
                                     folds=info, risk=risk, delta=delta, reference=ref)
    if "certa-online" in rows:
        tok_sum, acc_sum, stories = np.zeros(n), np.zeros(n), []
        for s in range(streams):
            order = list(range(n))
            random.Random(f"certa-online:{seed}:{s}").shuffle(order)
            col, tokens, story = online_stream(out, fam, risk=risk, delta=delta, order=order,
                                               rng=random.Random(f"certa-explore:{seed}:{s}"), explore=explore)
            tok_sum += tokens
            acc_sum += np.where(col < 0, full_acc, acc[pick, np.maximum(col, 0)])
            stories.append(story)
        got["certa-online"] = row(_scores(idx, tok_sum / streams, acc_sum / streams, "online"),
                                  label=f"online, risk {risk:g} ({ref}), {streams} streams, exploration counted",
                                  streams=stories, risk=risk, delta=delta, reference=ref)
    if "hindsight-labels" in rows:
        tol = tolerance if tolerance is not None else (0.005 if program == "sc" else 0.01)
        ratios = out.tokens.sum(0) / out.full_tokens.sum()
        ok = [c for c in range(len(fam.values)) if acc[:, c].mean() >= full_acc.mean() - tol - 1e-12]
        best = min(ok, key=lambda c: ratios[c]) if ok else 0
        got["hindsight-labels"] = row(_scores(idx, out.tokens[:, best], acc[:, best], "hindsight"), oracle=True,
                                      label=f"ORACLE: the family's cheapest setting within {100 * tol:g} pt, "
                                            f"chosen on this file with labels ({fam.label(fam.values[best])})")
    return got

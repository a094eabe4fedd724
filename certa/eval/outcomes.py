r"""What every setting of a family does on each problem, scored without labels: the loss table.

:func:`outcomes` removes the labels (:func:`~certa.eval.families.unlabeled`), replays each
setting of a :class:`~certa.eval.families.Family` on every problem through the real replay code
(SC: :class:`~certa.eval.replay_eval.Replayer` draw orders; CoT: each chain, as ``cot_program``
reads it; SC over CoT: ``sc_cot_program`` on the recorded chains), and scores each *unit*
against full compute:

* ``final`` — loss 1 when the unit's answer differs from full compute's (the chain's own final
  answer; the vote of all N samples; the vote of all chains — any answer tied for the lead of
  that vote counts as full compute's, :func:`~certa.eval.families.leaders`), else 0;
* ``consensus`` (``cot``) — the accuracy the exit loses against the problem's *other* chains,
  each other chain's final answer a pseudo-label: ``soft(final) - soft(exit)``, ``soft(a)`` the
  share of the other chains that answer ``a``. In [-1, 1]: an exit back to the answer most
  other chains give counts as a gain. A problem with fewer than 3 chains scores ``final``.

A problem's loss is the mean over its units (problems are the exchangeable draws; a problem's
chains or draw orders are not independent of each other). ``explore_tokens`` is what running
the problem to full compute costs while probing where every setting would (the price of one
explored program online).

Example:
    >>> from certa.eval.families import family
    >>> from certa.simulation.synth import synth_traces
    >>> out = outcomes(synth_traces(6, seed=0, samples=8, probed=0), family("sc"), orders=2)
    >>> out.loss.shape, bool((out.tokens[:, 0] >= out.tokens[:, -1]).all())
    ((6, 14), True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from certa.eval.families import Family, changed, explorer_signal, leaders, same_answer, unlabeled
from certa.eval.bench_sc_cot import round_tokens
from certa.eval.calibration import even_ladder
from certa.eval.replay_eval import Replayer, check_traces
from certa.eval.traces import TraceProblem
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Even, Threshold

__all__ = ["PROBE_TOKENS", "Outcomes", "Reference", "Unit", "outcomes", "rescore"]

Reference = Literal["final", "consensus"]

PROBE_TOKENS = 32
"""Probe decode budget of the CoT replays (the probe banks' probes were decoded up to 32 tokens)."""

class Unit(NamedTuple):
    """One replayed unit: its problem row, setting column, decode tokens, answer, loss; ``chain``:
    the CoT chain (else -1); ``judge``: the sample whose recorded ``correct`` grades the answer
    (a chain that ended naturally; an SC vote's first voter), else None (grade the answer)."""

    row: int
    col: int
    tokens: float
    answer: str
    judge: int | None
    loss: float
    chain: int = -1


@dataclass
class Outcomes:
    """Per problem (rows) and setting (columns): mean loss and decode tokens of its units; per
    problem the tokens of full compute and of an explored run; ``lower``: the losses' lower bound."""

    idx: list
    values: tuple[float, ...]
    loss: np.ndarray
    tokens: np.ndarray
    full_tokens: np.ndarray
    explore_tokens: np.ndarray
    lower: float
    units: list[Unit] = field(default_factory=list)

    def subset(self, rows: Sequence[int]) -> "Outcomes":
        """The same table restricted to ``rows`` (renumbered in that order)."""
        keep = {r: i for i, r in enumerate(rows)}
        rows = list(rows)
        units = [u._replace(row=keep[u.row]) for u in self.units if u.row in keep]
        return Outcomes([self.idx[r] for r in rows], self.values, self.loss[rows], self.tokens[rows],
                        self.full_tokens[rows], self.explore_tokens[rows], self.lower, units)  # type: ignore[arg-type]


def outcomes(problems: Sequence[TraceProblem], fam: Family, *, reference: Reference = "final", orders: int = 20,
             seed: int = 0) -> Outcomes:
    """Replay every setting of ``fam`` on ``problems`` with their labels removed; losses vs ``reference``."""
    if reference not in ("final", "consensus"):
        raise ConfigError(f"unknown reference {reference!r}", hint="final or consensus")
    probs = unlabeled(problems)
    if fam.program == "sc":
        return _sc(probs, fam, orders=orders, seed=seed)
    return _cot(probs, fam, reference=reference) if fam.program == "cot" else _sc_cot(probs, fam)


def rescore(out: Outcomes, problems: Sequence[TraceProblem], fam: Family, reference: Reference) -> Outcomes:
    """A CoT table scored against another ``reference`` (no replay: the units' answers are kept)."""
    if fam.program != "cot":
        raise ConfigError("only CoT tables have another reference to rescore against")
    probs = unlabeled(problems)
    units = [u._replace(loss=_chain_loss(probs[u.row], u.chain, u.answer, reference)) for u in out.units]
    return _table(probs, fam, units, out.full_tokens, out.explore_tokens, -1.0 if reference == "consensus" else 0.0)


def _table(probs: Sequence[TraceProblem], fam: Family, units: list[Unit], full: Sequence[float],
           explore: Sequence[float], lower: float) -> Outcomes:
    n, m = len(probs), len(fam.values)
    loss, tok, cnt = np.zeros((n, m)), np.zeros((n, m)), np.zeros((n, m))
    for u in units:
        loss[u.row, u.col] += u.loss
        tok[u.row, u.col] += u.tokens
        cnt[u.row, u.col] += 1
    cnt = np.maximum(cnt, 1)
    return Outcomes([p.idx for p in probs], fam.values, loss / cnt, tok / cnt, np.asarray(full, dtype=float),
                    np.asarray(explore, dtype=float), lower, units)


def _sc(probs: list[TraceProblem], fam: Family, *, orders: int, seed: int) -> Outcomes:
    check_traces(probs, "sc")
    rep = Replayer(probs, "sc", seed=seed, orders=orders)
    rows = {str(p.idx): i for i, p in enumerate(probs)}
    units: list[Unit] = []
    votes: dict[tuple, Any] = {}
    for col, value in enumerate(fam.values):
        def keep(problem: TraceProblem, prog: Any, col: int = col) -> None:
            key = (str(problem.idx), tuple(sorted(prog.order)))  # full compute: the vote of all N (its leaders)
            if key not in votes:
                votes[key] = leaders([problem.samples[j].pred for j in prog.order])
            ans = prog.answer()
            judge = prog.order[prog.state.answers.index(ans)] if ans is not None else None
            units.append(Unit(rows[str(problem.idx)], col, float(prog.tokens.total), ans or "", judge,
                              float(changed(ans, votes[key]))))
        rep.run(fam.sc_policy(value), on_program=keep)
    full = rep.run(Even(rep.n_samples)).tokens
    return _table(probs, fam, units, full, full, 0.0)


def _soft(answer: str, others: Sequence[str]) -> float:
    """The share of ``others`` (non-empty) that give ``answer``."""
    return sum(1 for o in others if o and same_answer(answer, o)) / len(others) if answer and others else 0.0


def _chain_loss(problem: TraceProblem, j: int, answer: str, reference: Reference) -> float:
    pred = problem.samples[j].pred or ""
    if reference == "final" or len(problem.samples) < 3:
        return float(not same_answer(answer, pred))
    others = [s.pred or "" for i, s in enumerate(problem.samples) if i != j]
    return _soft(pred, others) - _soft(answer, others)


def _cot(probs: list[TraceProblem], fam: Family, *, reference: Reference) -> Outcomes:
    rep = Replayer(probs, "cot", probe_tokens=PROBE_TOKENS)
    chunk = round_tokens(probs)
    rows = {str(p.idx): i for i, p in enumerate(probs)}
    first = Threshold(1.0, detect_at=1, every=1)
    units: list[Unit] = []
    for col, value in enumerate(fam.values):
        def keep(problem: TraceProblem, prog: Any, col: int = col) -> None:
            ans = prog.answer() or ""
            units.append(Unit(rows[str(problem.idx)], col, float(prog.tokens.total), ans,
                              prog.index if prog.state.finished else None,
                              _chain_loss(problem, prog.index, ans, reference), prog.index))
        sig = fam.signal(value)
        rep.run(first, k=sig.window, interval=chunk, signal=sig, on_program=keep)
    full = even_ladder(rep)[-1].run(rep).tokens  # every chain to its end, unprobed
    probe = explorer_signal()
    explore = rep.run(first, k=probe.window, interval=chunk, signal=probe).tokens
    return _table(probs, fam, units, full, explore, -1.0 if reference == "consensus" else 0.0)


def _sc_cot(probs: list[TraceProblem], fam: Family) -> Outcomes:
    from certa.algorithms.programs.cot_probe import cot_program
    from certa.algorithms.programs.sc_cot import sc_cot_program
    from certa.eval.bench_sc_cot import MAX_CHAIN_TOKENS
    from certa.eval.replay_backend import ChainReplayBackend
    from certa.runtime.runtime import Runtime
    check_traces(probs, "cot")
    chunk = round_tokens(probs)
    units: list[Unit] = []
    for col, value in enumerate(fam.values):
        chain = cot_program(max_tokens=MAX_CHAIN_TOKENS, interval=chunk, probe_tokens=PROBE_TOKENS,
                            signal=fam.signal(value))
        built: dict[int, Any] = {}
        for row, p in enumerate(probs):
            prog = built.setdefault(len(p.samples), sc_cot_program(len(p.samples), chain=chain))
            r = Runtime(ChainReplayBackend(p)).run_sync(prog, question=str((p.model_extra or {}).get("question") or p.idx))
            units.append(Unit(row, col, float(r.tokens.total), str(r.answer or ""), None,
                              float(changed(r.answer, leaders([s.pred for s in p.samples])))))
    chains = Replayer(probs, "cot", probe_tokens=PROBE_TOKENS)
    probe = explorer_signal()
    per_chain = chains.run(Threshold(1.0, detect_at=1, every=1), k=probe.window, interval=chunk, signal=probe).tokens
    explore = [t * len(p.samples) for t, p in zip(per_chain, probs)]
    return _table(probs, fam, units, [float(sum(s.tokens for s in p.samples)) for p in probs], explore, 0.0)

r"""SC over CoT on probe banks: the live composition replayed on recorded chains, with its peers.

Every problem's chains (a probe bank holds several per problem) run as the chains of
:func:`~certa.algorithms.programs.sc_cot.sc_cot_program` — the same program ``certa run`` and
``certa serve`` run — on a :class:`~certa.eval.replay_backend.ChainReplayBackend` (chain ``i``
is the recorded chain ``i``; probes answer what was recorded; tokens are each chain's tokens up
to the stop plus its probes' decode tokens). Chains advance in lock-step, one chunk a round.
Rows (every problem uses all its chains, or the first ``chains``):

* ``baseline-even`` — full majority over all chains (no probes, no early stop);
* ``certa-default`` — ``sc_cot_program()``: each chain with ``cot_program()``'s certaindex,
  the ended chains' vote settled (:class:`~certa.algorithms.signals.chain_vote.SettledVote`);
* ``finished-plurality`` — no per-chain exit; stop once the naturally finished chains' plurality
  can no longer change;
* ``esc-finished`` — no per-chain exit; ESC over finished chains (the first two agree);
* ``probe-vote-s{share}-k{rounds}`` — every chain probed every chunk, none stopping on its own;
  stop once one answer holds ``share`` of the chains for ``rounds`` rounds.

Rows carry ``token_ratio``/``accuracy_delta`` vs full majority, ``tokens``, ``baseline_tokens``,
``correct``, ``n`` and bootstrap CIs; ``lost``/``gained``: problems the full majority answers
right and the row wrong (and the reverse). Reserved rows are skipped unless ``final=True``.

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> r = bench_sc_cot(synth_traces(4, seed=0, samples=3, probed=3), reps=50, votes=((1.0, 2),))
    >>> sorted(r["methods"]), r["methods"]["baseline-even"]["token_ratio"]
    (['baseline-even', 'certa-default', 'esc-finished', 'finished-plurality', 'probe-vote-s1-k2'], 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from certa.algorithms.answers.equivalence import grade
from certa.algorithms.programs.cot_probe import CERTA_INTERVAL, cot_program
from certa.algorithms.programs.sc_cot import sc_cot_program
from certa.algorithms.signals.chain_vote import FinishedPlurality, FirstAgree, RoundsVote, SettledVote
from certa.algorithms.signals.cot import ProbeAgreement
from certa.eval.bench_chains import PROBE_BUDGET, split_reserved
from certa.eval.evalstats import compare
from certa.eval.replay_backend import ChainReplayBackend
from certa.eval.replay_eval import Scores, check_traces, trace_interval
from certa.eval.traces import TraceProblem
from certa.runtime.policy import Even
from certa.runtime.runtime import Runtime

__all__ = ["PROBE_VOTES", "bench_sc_cot", "replay_sc_cot", "round_tokens"]

PROBE_VOTES: tuple[tuple[float, int], ...] = tuple((s, k) for s in (0.5, 2 / 3, 1.0) for k in (4, 8, 16, 32))
"""The plain probe vote's (share, rounds) grid scored beside the default."""

MAX_CHAIN_TOKENS = 32_768
"""Each chain's token cap in replay (the banks' chains ran to at most 16,384)."""

NEVER = 10**9
"""A probe window no chain reaches: chains probed every chunk that never stop on their own."""


def round_tokens(problems: Sequence[TraceProblem]) -> int:
    """Tokens per round: the default's 64, or the banks' probe interval when that is coarser."""
    return math.lcm(CERTA_INTERVAL, *[trace_interval(p) or 1 for p in problems])


def replay_sc_cot(problems: Sequence[TraceProblem], program: Any, *, chains: int | None = None,
                  dataset: str | None = None) -> Scores:
    """Run ``program`` (an SC-over-CoT graph) on every problem's recorded chains; per-problem scores."""
    cols: dict[str, list[float]] = {k: [] for k in ("tokens", "correct", "main", "probe", "prefill", "knob")}
    exits: dict[str, int] = {}
    for p in problems:
        extra = p.model_extra or {}
        r = Runtime(ChainReplayBackend(p)).run_sync(program, question=str(extra.get("question") or p.idx))
        name = dataset or extra.get("dataset") or "math"
        ok = r.answer is not None and p.gold is not None and bool(grade(str(r.answer), str(p.gold), name))
        exits[r.exit_reason] = exits.get(r.exit_reason, 0) + 1
        for k, v in (("tokens", r.tokens.total), ("correct", float(ok)), ("main", r.tokens.main),
                     ("probe", r.tokens.probe), ("prefill", r.tokens.prompt), ("knob", r.knob_used)):
            cols[k].append(float(v))
    a = {k: np.array(v, dtype=float) for k, v in cols.items()}
    return Scores(idx=tuple(p.idx for p in problems), score=np.zeros(len(problems)), exits=exits, **a)


def _programs(n: int, chunk: int, votes: Sequence[tuple[float, int]]) -> dict[str, tuple[str, Any]]:
    plain = cot_program(max_tokens=MAX_CHAIN_TOKENS, probe="none", interval=chunk)
    probed = cot_program(max_tokens=MAX_CHAIN_TOKENS, interval=chunk, signal=ProbeAgreement(NEVER), probe_tokens=PROBE_BUDGET,
                         probe_style="forced")
    default = cot_program(max_tokens=MAX_CHAIN_TOKENS, interval=chunk, probe_tokens=PROBE_BUDGET)
    out = {"baseline-even": (f"full majority over {n} chains", sc_cot_program(n, chain=plain, policy=Even(NEVER), max_rounds=NEVER)),
           "certa-default": ("certa default: each chain's own certaindex, the ended chains' vote settled",
                             sc_cot_program(n, chain=default, rule=SettledVote())),
           "finished-plurality": ("no per-chain exit; the finished chains' plurality can no longer change",
                                  sc_cot_program(n, chain=plain, rule=FinishedPlurality())),
           "esc-finished": ("no per-chain exit; ESC over finished chains (the first 2 agree)",
                            sc_cot_program(n, chain=plain, rule=FirstAgree(2)))}
    for share, rounds in votes:
        out[f"probe-vote-s{share:.2g}-k{rounds}"] = (
            f"plain probe vote: one answer holds {share:.2g} of the chains for {rounds} rounds",
            sc_cot_program(n, chain=probed, rule=RoundsVote(share, rounds)))
    return out


def bench_sc_cot(problems: Sequence[TraceProblem], *, chains: int | None = None, final: bool = False, seed: int = 0,
                 reps: int = 1000, dataset: str | None = None,
                 votes: Sequence[tuple[float, int]] = PROBE_VOTES) -> dict[str, Any]:
    """Score SC over CoT and its peers on a probe bank (see the module docstring)."""
    check_traces(problems, "sc")  # one line per problem; and chains with probes have one every interval:
    probed_problems = [p for p in problems if any(s.probes for s in p.samples)]
    if probed_problems:
        check_traces(probed_problems, "cot")
    dev, reserved = split_reserved(problems, dataset)
    scored = list(problems) if final else dev
    if chains is not None:
        scored = [p.model_copy(update={"samples": p.samples[:chains]}) for p in scored if len(p.samples) >= chains]
    chunk = round_tokens(scored)
    sizes = sorted({len(p.samples) for p in scored})
    runs: dict[str, Scores] = {}
    labels: dict[str, str] = {}
    for size in sizes:  # problems with the same number of chains run the same programs
        group = [p for p in scored if len(p.samples) == size]
        for name, (label, prog) in _programs(size, chunk, votes).items():
            labels[name] = label
            runs.setdefault(name, []).append(replay_sc_cot(group, prog, dataset=dataset))  # type: ignore[arg-type]
    merged = {name: _concat(parts) for name, parts in runs.items()}  # type: ignore[arg-type]
    full = merged["baseline-even"]
    methods: dict[str, Any] = {}
    for name, s in merged.items():
        lost = int(np.sum((full.correct > 0.5) & (s.correct < 0.5)))
        gained = int(np.sum((full.correct < 0.5) & (s.correct > 0.5)))
        methods[name] = {"label": labels[name], **compare(s, [full], reps=reps, seed=seed), "lost": lost,
                         "gained": gained, "tokens_by_kind": s.summary()}
    return {"program": "sc-cot", "final": final, "problems": len(scored), "chains_per_problem": sizes,
            "reserved_skipped": 0 if final else len(reserved), "round_tokens": chunk, "seed": seed,
            "bootstrap_reps": reps, "models": sorted({p.model for p in scored}), "idx": list(full.idx),
            "methods": methods}


def _concat(parts: list[Scores]) -> Scores:
    if len(parts) == 1:
        return parts[0]
    cat = lambda name: np.concatenate([getattr(p, name) for p in parts])  # noqa: E731
    exits: dict[str, int] = {}
    for p in parts:
        for k, v in p.exits.items():
            exits[k] = exits.get(k, 0) + v
    return Scores(idx=tuple(i for p in parts for i in p.idx), tokens=cat("tokens"), correct=cat("correct"),
                  main=cat("main"), probe=cat("probe"), score=cat("score"), prefill=cat("prefill"), knob=cat("knob"),
                  exits=exits)

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
  certaindex, so on the calibration split it is never worse than Dynasor's rule;
- ``text``      — :class:`~certa.algorithms.signals.text.Committed` alone (no agreement: it
  reads the chain's own answer statements, so it needs no probe answers), over its
  statement kinds x confirmations x quiet characters x survival; for traces with text probes
  (``certa traces import``) every probe is free and only the forced final answer costs tokens
  (:func:`forced_answer_run` counts it).

``typical`` (the typical chain length) is learned from the problems being calibrated, never
from held-out ones: :func:`typical_length`.

Example:
    >>> grid = signal_grid("grounded", interval=32, typical=300.0, logprobs=False)
    >>> len(grid), grid[0][0].to_dict()["kind"], sorted({t for _, _, t in grid})
    (12, 'all', [32, 64])
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from certa.runtime.errors import ConfigError
from certa.eval.replay_backend import estimate_probe_tokens
from certa.eval.replay_eval import Replayer, Scores
from certa.eval.traces import TraceProblem
from certa.runtime.policy import Policy

from certa.algorithms.signals.cot import AllOf, Confident, CoTSignal, Grounded, ProbeAgreement, Progress, Settled
from certa.algorithms.signals.text import Committed

__all__ = ["COT_SIGNAL_METHODS", "FORCE_PREFILL_TOKENS", "TEXT_GRID", "forced_answer_oracle", "forced_answer_run",
           "has_logprobs", "has_text_probes", "signal_grid", "typical_length"]

FORCE_PREFILL_TOKENS = 10
"""Prefill of the text that closes the thought and asks for the answer (``</think>`` +
"**Final Answer**" + ``\\boxed{``: 10 Qwen2.5 tokens), reported apart from decode tokens."""

COT_SIGNAL_METHODS: tuple[str, ...] = ("grounded", "confident", "progress", "settled", "certa", "text")

TEXT_GRID: tuple[Committed, ...] = tuple(
    Committed(kinds, confirm, quiet, survive)
    for kinds in ("strict", "conclude") for confirm in (3, 2, 1) for quiet in (400, 150, 60, 0) for survive in (800, 0))
"""The ``text`` method's candidates, most conservative first (the dataset is the traces')."""


def typical_length(problems: Sequence[TraceProblem]) -> float:
    """Median main tokens of the problems' finished samples (all samples if none finished)."""
    lengths = [s.tokens for p in problems for s in p.samples if s.finished] \
        or [s.tokens for p in problems for s in p.samples]
    return float(statistics.median(lengths)) if lengths else 0.0


def has_text_probes(problems: Sequence[TraceProblem]) -> bool:
    """Whether the problems' probes are text probes (``kind: "text"``, read from the chain, free)."""
    probes = [q for p in problems for s in p.samples for q in s.probes]
    return bool(probes) and all((q.model_extra or {}).get("kind") == "text" for q in probes)


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
    elif method == "text":
        out += [(sig, 1, interval) for sig in TEXT_GRID]
    else:
        raise ConfigError(f"unknown CoT signal method {method!r}", hint=f"one of {', '.join(COT_SIGNAL_METHODS)}")
    return out


def forced_answer_run(rep: Replayer, policy: Policy | None, *, k: int | None, interval: int | None,
                      signal: CoTSignal | None = None) -> Scores:
    """Replay on ``rep``; on text-probe traces every chain stopped before its end also pays
    the forced final answer (``</think>`` ... ``\\boxed{`` then the answer and its closing
    brace: :func:`~certa.eval.replay_backend.estimate_probe_tokens` decode tokens, counted as
    ``probe``; :data:`FORCE_PREFILL_TOKENS` prefill). Other traces: a plain replay (their
    probes already paid for the answer)."""
    if not has_text_probes(rep.problems):
        return rep.run(policy, k=k, interval=interval, signal=signal)
    cost: dict[str, list[tuple[int, int]]] = {}

    def seen(problem: TraceProblem, prog) -> None:
        stopped = not prog.state.finished
        paid = (estimate_probe_tokens(prog.answer() or ""), FORCE_PREFILL_TOKENS) if stopped else (0, 0)
        cost.setdefault(str(problem.idx), []).append(paid)
    s = rep.run(policy, k=k, interval=interval, signal=signal, on_program=seen)
    dec = np.array([np.mean([c[0] for c in cost[str(i)]]) for i in s.idx], dtype=float)
    pre = np.array([np.mean([c[1] for c in cost[str(i)]]) for i in s.idx], dtype=float)
    return replace(s, tokens=s.tokens + dec, probe=s.probe + dec, prefill=s.prefill + pre)


def forced_answer_oracle(rep: Replayer) -> Scores:
    """ORACLE bound on text-probe traces (uses each chain's final answer, unknowable live):
    each chain exits at its first text probe whose committed answer equals the chain's final
    answer and pays the forced answer; chains without one run to their end."""
    from certa.algorithms.answers.equivalence import math_equal
    from certa.eval.replay import probed
    from certa.eval.replay_eval import trace_interval
    rows: list[tuple[float, ...]] = []
    exits: Counter = Counter()
    for problem in rep.problems:
        judge, per = rep.grader(problem), []
        for smp in (x for x in problem.samples if probed(x, trace_interval(problem))):
            hit = next((q for q in smp.probes if q.at < smp.tokens and q.answer and smp.pred
                        and math_equal(q.answer, smp.pred)), None)
            exits["oracle" if hit else "done"] += 1
            if hit is None:
                per.append((smp.tokens, float(bool(smp.correct)), smp.tokens, 0, 0))
            else:
                c = estimate_probe_tokens(hit.answer)
                per.append((hit.at + c, float(judge(hit.answer or "")), hit.at, c, FORCE_PREFILL_TOKENS))
        rows.append(tuple(np.mean(np.array(per, dtype=float), axis=0)))
    a = np.array(rows, dtype=float)
    return Scores(idx=rep.idx, tokens=a[:, 0], correct=a[:, 1], main=a[:, 2], probe=a[:, 3],
                  score=np.zeros(len(rows)), prefill=a[:, 4], knob=a[:, 2], exits=dict(exits))

r"""Replay many policies over one set of trace problems: per-problem :class:`Scores`.

A :class:`Replayer` holds a fixed list of trace problems (it never sees others — calibration
builds one on the calibration split only) and replays a policy over each problem's *units*:
for SC, ``orders`` seeded draw orders; for CoT, each probed sample as its own chain. A
problem's score is the mean over its units, so every problem weighs the same in accuracy,
token means and the bootstrap.

Example:
    >>> from certa.runtime.policy import Even, Threshold
    >>> from certa.simulation.synth import synth_traces
    >>> r = Replayer(synth_traces(6, seed=0, samples=8, probed=2), "sc", seed=0)
    >>> full, early = r.run(Even(8)), r.run(Threshold(1.0, detect_at=3))
    >>> early.mean_tokens < full.mean_tokens, len(early.idx)
    (True, 6)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from certa.eval.replay_backend import PROBE_MAX_TOKENS, ReplayBackend, probe_cost, probe_prefill
from certa.eval.errors import TraceFormatError
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy
from certa.eval.traces import TraceProblem

from certa.algorithms.answers.clustering import majority
from certa.algorithms.signals.cot import CoTSignal
from certa.algorithms.answers.equivalence import grade, math_equal
from certa.eval.replay import SAME, ReplayCoT, ReplaySC, probed, run_replay, sample_order

__all__ = ["MISSING_TAIL", "ProgramKind", "Replayer", "Scores", "check_traces", "trace_interval"]

ProgramKind = Literal["sc", "cot"]

MISSING_TAIL = 2
"""Probes a probed chain may lack at its end (the source of the probe banks did not probe the
last positions of ~1.5% of chains); a replay asking there gets an empty answer at no cost."""


@dataclass(frozen=True)
class Scores:
    """Per-problem results of one policy (means over each problem's replay units).

    ``tokens`` is decode tokens (main + probe + score); ``prefill`` the probe prefill tokens,
    counted apart; ``correct`` the fraction of the problem's units answered correctly.
    """

    idx: tuple
    tokens: np.ndarray
    correct: np.ndarray
    main: np.ndarray
    probe: np.ndarray
    score: np.ndarray
    prefill: np.ndarray
    knob: np.ndarray
    exits: dict[str, int] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean())

    @property
    def mean_tokens(self) -> float:
        return float(self.tokens.mean())

    def summary(self) -> dict:
        """Means per problem, JSON-ready."""
        r = lambda x: round(float(x.mean()), 3)  # noqa: E731
        return {"accuracy": round(self.accuracy, 6), "tokens": r(self.tokens), "main": r(self.main),
                "probe": r(self.probe), "score": r(self.score), "probe_prefill": r(self.prefill),
                "knob": r(self.knob), "exits": dict(sorted(self.exits.items()))}


def trace_interval(problem: TraceProblem) -> int | None:
    """The problem's probe spacing: its ``interval``, else the gcd of its probe positions."""
    if problem.interval:
        return problem.interval
    ats = [p.at for s in problem.samples for p in s.probes if p.at > 0]
    return math.gcd(*ats) if ats else None


def check_traces(problems: Sequence[TraceProblem], program: ProgramKind) -> None:
    """Refuse traces a replay of ``program`` cannot use (TraceFormatError naming the problem)."""
    if not problems:
        raise TraceFormatError("no trace problems to replay")
    seen: set[str] = set()
    for p in problems:
        if str(p.idx) in seen:
            raise TraceFormatError(f"problem idx {p.idx!r} appears twice", hint="one line per problem")
        seen.add(str(p.idx))
        if program != "cot":
            continue
        iv = trace_interval(p)
        chains = [j for j, s in enumerate(p.samples) if probed(s, iv)]
        if not chains:
            raise TraceFormatError(f"problem {p.idx}: no probed samples, and CoT replay needs probes",
                                   hint="collect with --probe-samples >= 1, or replay with --program sc")
        for j in chains:
            s = p.samples[j]
            if iv is None:
                if s.tokens > 0 and s.probes:
                    raise TraceFormatError(f"problem {p.idx}: probes but no interval")
                continue
            have = {q.at for q in s.probes}
            missing = [at for at in range(iv, s.tokens, iv) if at not in have]
            if len(missing) <= MISSING_TAIL and all(at > max(have, default=0) for at in missing):
                missing = []  # a probe bank lacks the last probe or two before a chain's end: valid
            if missing:
                raise TraceFormatError(f"problem {p.idx} sample {j}: no probe at token {missing[0]} "
                                       f"(interval {iv}, {s.tokens} tokens)",
                                       hint="a probed sample needs a probe every `interval` tokens before its end")


class Replayer:
    """Replays policies over ``problems`` (and nothing else).

    Args:
        problems: trace problems; program: ``"sc"`` or ``"cot"``.
        seed, orders: SC draw orders (``orders`` seeded permutations per problem).
        dataset: how probe answers are graded (default: the trace's ``dataset`` field, else
            ``"math"``); probe_tokens: the CoT probe decode budget.
    """

    def __init__(self, problems: Sequence[TraceProblem], program: ProgramKind, *, seed: int = 0, orders: int = 1,
                 dataset: str | None = None, probe_tokens: int = PROBE_MAX_TOKENS) -> None:
        if program not in ("sc", "cot"):
            raise ConfigError(f"unknown replay program {program!r}", hint="sc or cot")
        if orders < 1:
            raise ConfigError(f"orders must be >= 1, got {orders}")
        self.problems, self.program = list(problems), program
        check_traces(self.problems, program)
        self.seed, self.orders, self.dataset, self.probe_tokens = seed, orders, dataset, probe_tokens
        self.backend = ReplayBackend(self.problems)
        self._memo: dict = {}
        self._grades: dict = {}
        n = self.n_samples  # every problem gets the same budget: the fewest samples any problem has
        self._orders = {str(p.idx): [sample_order(p, seed, r)[:n] for r in range(orders)] for p in self.problems} \
            if program == "sc" else {}

    @property
    def idx(self) -> tuple:
        return tuple(p.idx for p in self.problems)

    @property
    def n_samples(self) -> int:
        """Fewest samples of any problem (the SC budget every problem can afford)."""
        return min(len(p.samples) for p in self.problems)

    @property
    def interval(self) -> int:
        """The probe spacing every problem supports (lcm of their trace intervals)."""
        ivs = [trace_interval(p) or 1 for p in self.problems]
        return math.lcm(*ivs)

    @property
    def max_tokens(self) -> int:
        return max(s.tokens for p in self.problems for s in p.samples)

    def grader(self, problem: TraceProblem) -> Callable[[str], bool]:
        """Grades a probe answer against the problem's gold (memoized); without gold, the
        answer counts as correct iff it equals a correct sample's ``pred``."""
        dataset = self.dataset or (problem.model_extra or {}).get("dataset") or "math"
        gold = problem.gold
        right = [s.pred for s in problem.samples if s.correct and s.pred]

        def judge(answer: str) -> bool:
            key = (answer, str(gold), dataset, str(problem.idx) if gold is None else "")
            if key not in self._grades:
                self._grades[key] = (bool(grade(answer, str(gold), dataset)) if gold is not None
                                     else any(math_equal(r, answer) for r in right))
            return self._grades[key]
        return judge

    def programs(self, problem: TraceProblem, policy: Policy | None, *, k: int | None = None,
                 interval: int | None = None, signal: CoTSignal | None = None) -> list[ReplaySC | ReplayCoT]:
        """Fresh replay programs for each unit of ``problem``."""
        if self.program == "sc":
            return [ReplaySC(problem, order, policy, memo=self._memo) for order in self._orders[str(problem.idx)]]
        if k is None or interval is None:
            raise ConfigError("CoT replay needs k and interval")
        iv = trace_interval(problem)
        if iv and interval % iv:
            raise ConfigError(f"CoT interval {interval} is not a multiple of the trace interval {iv} "
                              f"(problem {problem.idx})", hint="probes exist only every trace interval")
        judge = self.grader(problem)
        return [ReplayCoT(problem, j, k=k, interval=interval, policy=policy, grade=judge,
                          probe_tokens=self.probe_tokens, signal=signal)
                for j, s in enumerate(problem.samples) if probed(s, iv)]

    def run(self, policy: Policy | None, *, k: int | None = None, interval: int | None = None,
            signal: CoTSignal | None = None,
            on_program: Callable[[TraceProblem, ReplaySC | ReplayCoT], None] | None = None) -> Scores:
        """Replay ``policy`` on every problem (CoT: with certaindex ``signal``, default Dynasor's
        rule over ``k`` probes); ``on_program`` sees each finished program."""
        return self._score(lambda p: self.programs(p, policy, k=k, interval=interval, signal=signal), on_program)

    def oracle_sc(self) -> Scores:
        """ORACLE bound for SC stopping (uses every drawn answer, unknowable live): each draw
        order stops at the fewest samples whose majority vote already is the vote of all of
        them. No stopping rule on these draw orders keeps every vote and draws fewer samples."""
        if self.program != "sc":
            raise ConfigError("the vote oracle applies to SC replays")

        def shortest(problem: TraceProblem) -> list[ReplaySC | ReplayCoT]:
            progs: list[ReplaySC | ReplayCoT] = []
            for order in self._orders[str(problem.idx)]:
                answers = [problem.samples[j].pred or "" for j in order]
                final = majority(answers, same=SAME)[0]
                n = next(n for n in range(1, len(order) + 1) if self._same_vote(majority(answers[:n], same=SAME)[0],
                                                                                    final))
                progs.append(ReplaySC(problem, order[:n], None, memo=self._memo))
            return progs
        return self._score(shortest)

    def _score(self, programs: Callable[[TraceProblem], list[ReplaySC | ReplayCoT]],
               on_program: Callable[[TraceProblem, ReplaySC | ReplayCoT], None] | None = None) -> Scores:
        """Drive each problem's ``programs`` to their end; a problem scores the mean of its programs."""
        names = ("tokens", "correct", "main", "probe", "score", "prefill", "knob")
        cols: dict[str, list[float]] = {c: [] for c in names}
        exits: Counter = Counter()
        for problem in self.problems:
            rows = []
            for prog in programs(problem):
                exits[run_replay(prog, self.backend)] += 1
                t = prog.tokens
                rows.append((t.total, float(prog.is_correct()), t.main, t.probe, t.score, t.prompt, prog.knob_value))
                if on_program is not None:
                    on_program(problem, prog)
            for name, value in zip(cols, np.mean(np.array(rows, dtype=float), axis=0)):
                cols[name].append(float(value))
        arrays = {name: np.array(values) for name, values in cols.items()}
        return Scores(idx=self.idx, exits=dict(exits), **arrays)

    def oracle_cot(self) -> Scores:
        """ORACLE bound for CoT probe exits (uses each chain's final answer, unknowable live):
        every chain exits at its first probe whose answer equals the chain's final answer,
        paying that one probe; chains without such a probe run to the end. No probe-based
        rule on this probe grid keeps every answer and decodes fewer tokens."""
        if self.program != "cot":
            raise ConfigError("the probe-exit oracle applies to CoT replays")
        cols: dict[str, list[float]] = {c: [] for c in ("tokens", "correct", "main", "probe", "prefill")}
        exits: Counter = Counter()
        for problem in self.problems:
            iv, judge, rows = trace_interval(problem), self.grader(problem), []
            for s in (s for s in problem.samples if probed(s, iv)):
                hit = next((q for q in s.probes if q.at < s.tokens and q.answer and s.pred
                            and self.same(q.answer, s.pred)), None)
                exits["oracle" if hit else "done"] += 1
                if hit is None:
                    rows.append((s.tokens, float(bool(s.correct)), s.tokens, 0, 0))
                else:
                    cost = probe_cost(hit, self.probe_tokens)
                    rows.append((hit.at + cost, float(judge(hit.answer or "")), hit.at, cost, probe_prefill(hit)))
            for name, value in zip(cols, np.mean(np.array(rows, dtype=float), axis=0)):
                cols[name].append(float(value))
        a = {name: np.array(v) for name, v in cols.items()}
        return Scores(idx=self.idx, tokens=a["tokens"], correct=a["correct"], main=a["main"], probe=a["probe"],
                      score=np.zeros(len(self.problems)), prefill=a["prefill"], knob=a["main"], exits=dict(exits))

    def _same_vote(self, a: str | None, b: str | None) -> bool:
        return a == b or bool(a and b and self.same(a, b))

    def same(self, a: str, b: str) -> bool:
        """Whether two answers are math-equal (memoized)."""
        key = ("same", a, b)
        if key not in self._grades:
            self._grades[key] = bool(math_equal(a, b))
        return self._grades[key]


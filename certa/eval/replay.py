r"""Replay programs: recorded traces as Programs whose decisions come from the real certaindex code.

* :class:`ReplaySC` — Self-Consistency: draws the problem's samples without replacement in
  a seeded order (:func:`sample_order`), one per step; certaindex is
  :func:`~certa.algorithms.signals.entropy_certainty` of the drawn answers (``math_equal``
  clusters, as in :func:`~certa.algorithms.programs.self_consistency.sc_program`); the answer is the
  majority vote, correct iff the trace marks its first voter correct.
* :class:`ReplayCoT` — CoT on one probed sample: grows ``interval`` tokens per step and
  probes after each chunk (the answer recorded at that position); certaindex is a
  :mod:`~certa.algorithms.signals.cot` signal (default Dynasor's rule over the last ``k`` probes). A chain
  that finishes answers with its recorded ``pred``/``correct``; one stopped early answers
  with its last probe, graded against ``gold``.

Both are ordinary :class:`~certa.runtime.program.Program` subclasses: they run in the real
:class:`~certa.runtime.Runtime` over a :class:`~certa.eval.replay_backend.ReplayBackend`,
and :func:`run_replay` runs them through the same loop (:func:`certa.runtime.driver.drive`)
without an event loop (~3x less CPU) for calibration sweeps; ``tests/test_replay.py`` checks
that both give identical results. Any
:class:`~certa.runtime.policy.Policy` decides: Threshold, Even, Length, Pareto, ESC,
Adaptive-Consistency, ... Tokens are counted by kind exactly as the runtime counts them
(main, probe decode, ``prompt`` = probe prefill; SC votes cost no model tokens).

Example:
    >>> from certa.runtime.policy import Threshold
    >>> from certa.eval.traces import parse_trace_line
    >>> p = parse_trace_line('{"idx": 0, "gold": "18", "samples": [' + ",".join(
    ...     '{"tokens": %d, "pred": "18", "correct": true}' % n for n in (100, 120, 140, 160)) + ']}')
    >>> prog = ReplaySC(p, [0, 1, 2, 3], Threshold(1.0, detect_at=2))
    >>> run_replay(prog), prog.tokens.main, prog.answer(), prog.is_correct()
    ('certaindex', 220, '18', True)
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from certa.eval.replay_backend import ReplayBackend, ReplaySequence, replay_key
from certa.runtime.driver import drive, run_unsuspended
from certa.runtime.policy import Policy
from certa.runtime.program import Program
from certa.eval.traces import Sample, TraceProblem
from certa.runtime.types import GenRequest, GenResult, Knob, TokenKind

from certa.algorithms.answers.clustering import majority
from certa.algorithms.prompts import probe_text
from certa.algorithms.programs.cot_probe import read_chunk
from certa.algorithms.signals.cot import CoTSignal, ProbeAgreement
from certa.algorithms.signals.text import for_problem, statements
from certa.algorithms.signals import ProbeObs, entropy_certainty

__all__ = ["ReplayCoT", "ReplayContext", "ReplaySC", "ReplayState", "run_replay", "sample_order"]

SAME = "math"  # answers are compared as sc_program and cot_program compare them


@functools.cache
def _probe_suffix() -> str:
    return probe_text()


def sample_order(problem: TraceProblem, seed: int, order: int = 0) -> list[int]:
    """A seeded permutation of the problem's sample indices (the SC draw order).

    Deterministic across runs and machines (string-seeded ``random.Random``).

    >>> from certa.eval.traces import parse_trace_line
    >>> p = parse_trace_line('{"idx": 7, "samples": [{"tokens": 1}, {"tokens": 2}, {"tokens": 3}]}')
    >>> sample_order(p, 0) == sample_order(p, 0), sorted(sample_order(p, 1))
    (True, [0, 1, 2])
    """
    perm = list(range(len(problem.samples)))
    random.Random(f"certa-replay:{seed}:{problem.idx}:{order}").shuffle(perm)
    return perm


@dataclass
class ReplayState:
    """What a replay program knows: the answers so far (the answers protocol), CoT probes."""

    answers: list[str] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    probes: list[ProbeObs] = field(default_factory=list)
    finished: bool = False
    # SC, per drawn sample (read by vote policies): tokens / decode budget, natural end, confidence
    lengths: list[float] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    confidence: list[float | None] = field(default_factory=list)


class ReplaySC(Program):
    """Self-Consistency over a trace problem's samples in ``order`` (knob: samples drawn).

    ``memo`` (optional, shared between programs) caches certaindex and votes by answer tuple:
    both are pure functions of the answers, so this only saves recomputation.
    """

    name = "replay-sc"

    def __init__(self, problem: TraceProblem, order: Sequence[int], policy: Policy | None = None, *,
                 memo: dict | None = None) -> None:
        super().__init__()
        self.problem, self.order = problem, list(order)
        self.knob = Knob("branches", cap=len(self.order))
        self.policy = policy
        self.state = ReplayState()
        self._memo = memo if memo is not None else {}
        self._max_tokens = max(1, max(s.tokens for s in problem.samples))

    async def execute(self, ctx: Any) -> bool:
        j = self.order[self.knob_used]
        await ctx.gen(replay_key(self.problem.idx, j), max_tokens=self._max_tokens, temperature=0.7, chat=True)
        sample = self.problem.samples[j]
        self.state.answers.append(sample.pred or "")
        self.state.correct.append(bool(sample.correct))
        budget = (self.problem.model_extra or {}).get("max_tokens") or self._max_tokens
        self.state.lengths.append(sample.tokens / budget)
        self.state.complete.append(bool(sample.finished) and bool(sample.pred))
        self.state.confidence.append((sample.model_extra or {}).get("min_window_logprob"))
        self.knob_used += 1
        return self.knob_used < len(self.order)

    def _cached(self, tag: str, fn: Callable[[list[str]], Any]) -> Any:
        key = (tag, tuple(self.state.answers))
        if key not in self._memo:
            self._memo[key] = fn(self.state.answers)
        return self._memo[key]

    def update_certaindex(self) -> float:
        return self._cached("entropy", lambda a: entropy_certainty(a, same=SAME))

    def answer(self) -> str | None:
        return self._cached("vote", lambda a: majority(a, same=SAME)[0]) or None

    def is_correct(self) -> bool:
        """Whether the vote is right: the trace's ``correct`` of the vote's first (earliest) voter."""
        return self.correct_at(len(self.state.answers))

    def correct_at(self, n: int) -> bool:
        """Whether the vote over the first ``n`` drawn answers is right (for calibration)."""
        answers = self.state.answers[:n]
        key = ("vote", tuple(answers))
        if key not in self._memo:
            self._memo[key] = majority(answers, same=SAME)[0]
        ans = self._memo[key] or None
        return ans is not None and self.state.correct[answers.index(ans)]


class ReplayCoT(Program):
    """CoT with probe-in-the-middle replayed on ``problem.samples[sample]`` (knob: main decode tokens).

    ``signal`` is the CoT certaindex (default Dynasor's rule, ``ProbeAgreement(k)``; any
    :mod:`~certa.algorithms.signals.cot` signal or AND of them). Probes are skipped while
    they could not matter: before ``signal.min_tokens`` minus the signal's probe window.
    ``grade(answer) -> bool`` judges answers taken from probes (the trace grades only
    finished chains); ``probe_tokens`` is the probe decode budget.
    """

    name = "replay-cot"

    def __init__(self, problem: TraceProblem, sample: int, *, k: int, interval: int, policy: Policy | None = None,
                 grade: Callable[[str], bool], probe_tokens: int = 20, signal: CoTSignal | None = None) -> None:
        super().__init__()
        self.problem, self.index, self.sample = problem, sample, problem.samples[sample]
        self.k, self.interval, self.probe_tokens = k, interval, probe_tokens
        extra = problem.model_extra or {}  # text-probe signals read the problem's question (traces import)
        self.signal = for_problem(signal if signal is not None else ProbeAgreement(k), str(extra.get("question") or ""),
                                  extra.get("dataset"))
        self.probe_from = max(0, self.signal.min_tokens - (self.signal.window - 1) * interval)
        if self.sample.text and self.signal is not signal:  # a text reader: scan the whole chain once, so
            for d, q in ((extra.get("dataset") or "math", str(extra.get("question") or "")), ("math", "")):
                statements(self.sample.text, dataset=d, question=q)  # each prefix read is a lookup (text.py)
        self.knob = Knob("tokens", cap=None)  # the chain ends at its recorded length
        self.policy, self.grade = policy, grade
        self.state = ReplayState()
        self.seq: Any = None
        self._recorded = {p.at: p for p in self.sample.probes}
        self._value = 0.0
        self._probed_chars = 0  # length of the chain text at the last probe
        self._exit_answer: str | None = None  # the answer the certaindex vouched for at its exit

    async def execute(self, ctx: Any) -> bool:
        if self.seq is None:  # cot_program's ``start`` step: open the sequence, decode nothing
            self.seq = await ctx.sequence(replay_key(self.problem.idx, self.index),
                                          max_tokens=max(1, self.sample.tokens), chat=True)
            return True
        await self.seq.extend(self.interval)
        self._value = 0.0
        if not self.seq.finished:  # cot_program's ``think`` step: the same reading of the chunk
            got = await read_chunk(self.signal, self.state.probes, self.seq.text, self.seq.tokens, self._probed_chars,
                                   probe_from=self.probe_from, ask=self._ask)
            if got.probe is not None:
                self.state.probes.append(got.probe)
                self.state.answers.append(got.probe.answer)
            self._value, self._probed_chars, self._exit_answer = got.value, got.probed_chars, got.answer
        self.state.finished = self.seq.finished
        return not self.seq.finished

    async def _ask(self) -> ProbeObs:
        """The probe recorded at this position, as the live program would have read it."""
        out = await self.seq.probe(_probe_suffix(), max_tokens=self.probe_tokens)
        rec = self._recorded.get(self.seq.tokens)  # None: a bank's missing last probes (an empty answer)
        return ProbeObs(self.seq.tokens, (rec.answer if rec is not None else "") or "", out.text,
                        tuple(rec.logprobs) if rec is not None and rec.logprobs is not None else None)

    def update_certaindex(self) -> float:
        return self._value

    def exited_on_probe(self) -> bool:
        return not self.state.finished and self._value >= 1.0

    def answer(self) -> str | None:
        if self.state.finished:
            return self.sample.pred or None
        if self.exited_on_probe():
            return self._exit_answer or (self.state.probes[-1].answer if self.state.probes else None)
        return next((a for a in reversed(self.state.answers) if a), None)  # budget stop: forced answer

    def is_correct(self) -> bool:
        if self.state.finished:
            return bool(self.sample.correct)
        ans = self.answer()
        return ans is not None and self.grade(ans)


# ---- replay without an event loop ---------------------------------------------------------
class ReplayContext:
    """A replay program's ``ctx``: serves requests straight from a ReplayBackend, never suspends
    (no scheduler, no event loop), and counts tokens exactly as
    :class:`~certa.runtime.program_run.ProgramRun` does. :func:`run_replay` drives with it."""

    def __init__(self, backend: ReplayBackend, program: Program) -> None:
        self.backend, self.program = backend, program
        self._rids = itertools.count()

    def _count(self, kind: TokenKind, res: GenResult) -> GenResult:
        usage = self.program.tokens
        usage.requests += 1
        usage.add(kind, res.tokens)
        usage.prompt += max(0, res.prompt_tokens - res.cached_prompt_tokens)
        return res

    def _req(self, prompt: str, max_tokens: int) -> GenRequest:
        return GenRequest(prompt=prompt, max_tokens=max_tokens, rid=f"{self.program.program_id}:{next(self._rids)}",
                          program_id=self.program.program_id)

    async def gen(self, prompt: str, *, max_tokens: int = 256, kind: TokenKind = "main",
                  **sampling: Any) -> GenResult:
        """``Context.gen`` for a replay key; ``sampling`` (temperature, chat, ...) is moot: the trace decides."""
        return self._count(kind, self.backend.serve(self._req(prompt, max_tokens)))

    async def sequence(self, prompt: str, *, max_tokens: int = 1024, **sampling: Any) -> "_CountedSequence":
        """``Context.sequence`` for a replay key (``sampling`` moot, as for :meth:`gen`)."""
        return _CountedSequence(self, self.backend.open(self._req(prompt, max_tokens)))


class _CountedSequence:
    """A ReplaySequence whose chunks and probes a ReplayContext counts (ManagedSequence's role)."""

    def __init__(self, ctx: ReplayContext, seq: ReplaySequence) -> None:
        self.ctx, self.seq = ctx, seq

    tokens = property(lambda self: self.seq.tokens)
    finished = property(lambda self: self.seq.finished)
    text = property(lambda self: self.seq.text)

    async def extend(self, max_new_tokens: int) -> GenResult:
        return self.ctx._count("main", self.seq.step(max_new_tokens))

    async def probe(self, suffix: str, max_tokens: int = 20) -> GenResult:
        return self.ctx._count("probe", self.seq.probe_now(max_tokens))


def run_replay(program: Program, backend: ReplayBackend | None = None) -> str:
    """Run ``program`` to its exit on a :class:`ReplayContext`, synchronously; returns the exit reason.

    The loop is the runtime's own, :func:`certa.runtime.driver.drive` (knob cap, ``execute``,
    certaindex with range check and trajectory point, ``policy.decide``), run to completion
    without an event loop: the context never suspends.
    """
    if backend is None:
        backend = ReplayBackend([program.problem])  # type: ignore[attr-defined]
    program.program_id = program.program_id or program.display_name
    return run_unsuspended(drive(program, ReplayContext(backend, program)))


def probed(sample: Sample, interval: int | None = None) -> bool:
    """Whether a sample is a probed chain: it has probes, or (a chain too short to be probed)
    a ``probes`` field and at most ``interval`` tokens."""
    if sample.probes:
        return True
    return "probes" in sample.model_fields_set and (interval is None or sample.tokens <= interval)

r"""Trace programs for the simulator: real certa Programs whose answers come from recorded traces.

* ``sc`` — :func:`trace_sc`, Self-Consistency written in the DSL exactly like
  :func:`~certa.algorithms.programs.self_consistency.sc_program` (``fanout`` lanes, each
  starting the next sample as soon as its last one finishes; the knob counts finished
  samples up to ``budget``), except that branch ``i`` asks for the trace's sample ``i``
  (:func:`~certa.eval.replay_backend.replay_key`) instead of a prompt. Certaindex is
  :func:`~certa.algorithms.signals.entropy_certainty` (``math_equal`` clusters), the answer
  the majority vote, correct iff the trace marks the vote's first voter correct (as
  :class:`~certa.eval.replay.ReplaySC`). A sample longer than ``max_tokens`` has no answer.
* ``cot`` — :class:`~certa.eval.replay.ReplayCoT` on the problem's first probed sample:
  grown ``interval`` tokens at a time, probed after each chunk (the probe recorded there),
  certaindex Dynasor's :class:`~certa.algorithms.signals.ProbeAgreement` over the last
  ``window`` probes (``math_equal``, hesitation words), answers graded with ``math_equal``.
  Without early exit: the whole chain as one request (:class:`~certa.eval.replay.ReplaySC`
  over that one sample).
* ``tree`` — MCTS-like in shape: :func:`trace_sc` with :data:`TREE_FANOUT` (2) lanes over the
  problem's samples (short expansions, see :mod:`.reasoning_workload`), same certaindex and vote.

The Runtime drives them (its own loop, policy and knob cap); :mod:`.simulator` serves their
requests on the simulated engine.

Example:
    >>> from certa.eval.traces import parse_trace_line
    >>> from certa.simulation.workload import ProgramConfig, ProgramSpec
    >>> p = parse_trace_line('{"idx": 0, "gold": "0.5", "samples": [' + ",".join(
    ...     '{"tokens": 50, "pred": "%s", "correct": true}' % a for a in ("0.5", "\\\\frac{1}{2}", "1/2", "2")) + ']}')
    >>> prog = make_program(ProgramSpec("x", 0.0, p), ProgramConfig(fanout=2, budget=4), early_exit=True)
    >>> prog.state.answers, prog.state.correct = ["0.5", "\\frac{1}{2}", "1/2", "2"], [True, True, True, False]
    >>> round(prog.update_certaindex()["agreement"], 3), prog.answer(), program_correct(prog)
    (0.594, '0.5', True)
"""

from __future__ import annotations

import functools
from typing import Any

from certa.algorithms.answers import math_equal
from certa.algorithms.answers.clustering import majority
from certa.algorithms.signals import ProbeAgreement, entropy_certainty
from certa.dsl import Appended, CompiledGraph, Graph, State
from certa.eval.replay import ReplayCoT, ReplaySC, probed
from certa.eval.replay_backend import replay_key
from certa.eval.traces import TraceProblem
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Threshold
from certa.runtime.program import Program
from certa.runtime.types import Knob

from certa.simulation.workload import ProgramConfig, ProgramSpec

__all__ = ["TREE_FANOUT", "TraceSCState", "make_program", "program_correct", "trace_sc"]

TREE_FANOUT = 2  # lanes of a ``tree`` (MCTS-like) program


class TraceSCState(State):
    """A trace SC program's state: its problem, the answers so far and whether each is right."""

    problem: TraceProblem
    max_tokens: int = 8192
    answers: Appended[list[str]] = []
    correct: Appended[list[bool]] = []


@functools.lru_cache(maxsize=65536)
def _agreement(answers: tuple[str, ...]) -> float:
    return entropy_certainty(list(answers), same="math")


@functools.lru_cache(maxsize=65536)
def _vote(answers: tuple[str, ...]) -> str | None:
    return majority(list(answers), same="math")[0] or None


@functools.lru_cache(maxsize=None)
def trace_sc(fanout: int, cap: int, tau: float | None, detect_at: int, every: int | None) -> CompiledGraph:
    """Self-Consistency over trace samples (``tau=None``: no early exit, run to ``cap``)."""
    g = Graph(TraceSCState, knob=Knob("branches", cap=cap), name="sc")

    @g.step(fanout=min(fanout, cap), elastic=1 < fanout < cap)
    async def sample(s: TraceSCState, ctx) -> dict:
        """Trace sample ``ctx.branch`` (branches are numbered in launch order)."""
        rec = s.problem.samples[ctx.branch]
        await ctx.gen(replay_key(s.problem.idx, ctx.branch), max_tokens=s.max_tokens, temperature=0.7)
        ok = rec.tokens <= s.max_tokens
        return {"answers": [(rec.pred or "") if ok else ""], "correct": [ok and bool(rec.correct)]}

    @g.certaindex
    def agreement(s: TraceSCState) -> float:
        """Normalised answer entropy: 1.0 when every answer falls into one cluster."""
        return _agreement(tuple(s.answers))

    @g.answer
    def vote(s: TraceSCState) -> str | None:
        return _vote(tuple(s.answers))

    g.loop("sample")
    return g.compile(policy=None if tau is None else Threshold(tau, detect_at=detect_at, every=every))


def _cot(spec: ProgramSpec, cfg: ProgramConfig, early_exit: bool) -> Program:
    prob = spec.problem
    interval = cfg.interval or prob.interval or 64
    index = next((j for j, s in enumerate(prob.samples) if probed(s, interval)), 0)
    if not early_exit:  # one request for the whole chain: what a system without probing sends
        prog: Program = ReplaySC(prob, [index])
    else:
        gold = None if prob.gold is None else str(prob.gold)
        policy = Threshold(1.0, detect_at=cfg.window * interval, every=interval)
        prog = ReplayCoT(prob, index, k=cfg.window, interval=interval, policy=policy, probe_tokens=cfg.probe_tokens,
                         grade=lambda a: gold is not None and math_equal(a, gold), signal=ProbeAgreement(cfg.window))
    prog.name = "cot"
    return prog


def make_program(spec: ProgramSpec, cfg: ProgramConfig, early_exit: bool) -> Program:
    """A fresh Program for ``spec`` (kind ``sc``, ``tree`` or ``cot``), with certaindex early exit or without."""
    if spec.kind in ("sc", "tree"):
        cap = min(cfg.budget, len(spec.problem.samples))
        lanes = cfg.fanout if spec.kind == "sc" else TREE_FANOUT
        graph = trace_sc(lanes, cap, cfg.tau if early_exit else None, cfg.detect_at, cfg.every)
        return graph.new(problem=spec.problem, max_tokens=cfg.max_tokens)
    if spec.kind == "cot":
        return _cot(spec, cfg, early_exit)
    raise ConfigError(f"unknown program kind {spec.kind!r}", hint="use 'sc', 'tree' or 'cot'")


def program_correct(prog: Any) -> bool:
    """Whether a finished trace program's answer is right (by the trace's own grading)."""
    if isinstance(prog, (ReplaySC, ReplayCoT)):
        return prog.is_correct()
    state: TraceSCState = prog.state
    ans = prog.answer()
    return ans is not None and state.correct[state.answers.index(ans)]

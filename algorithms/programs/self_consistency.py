r"""Self-Consistency with certaindex early exit, written in certa's DSL.

Branches sample full solutions in parallel (``branches_per_round`` lanes, each lane starting
a new branch as soon as its last one finishes); the knob counts finished branches up to
``cap``. Certaindex is the normalized semantic entropy of the answer clusters (answers
compared with ``math_equal``); the answer is the majority vote. The state's ``answers``
list is the protocol that ESC, Adaptive-Consistency and margin policies read.

Default policy: ``Threshold(0.55, detect_at=branches_per_round, every=branches_per_round)``
— check after every round; 0.55 passes when 3 of 4 (or 6 of 8) answers agree.

Example:
    >>> import certa as ct
    >>> prog = sc_program(branches_per_round=4, cap=8)
    >>> b = ct.ScriptedBackend(responses=["... so \\boxed{18}."])
    >>> r = ct.Runtime(b).run_sync(prog, question="What is 9 * 2?")
    >>> r.answer, r.exit_reason, r.knob_used
    ('18', 'certaindex', 4)
"""

from __future__ import annotations

from certa.dsl import Appended, CompiledGraph, Graph, State
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy, Threshold
from certa.runtime.types import Knob

from certa.algorithms.answers import extract_answer
from certa.algorithms.answers.clustering import majority
from certa.algorithms.prompts import prompt
from certa.algorithms.signals import entropy_certainty

__all__ = ["SCState", "sc_program"]


class SCState(State):
    """Self-Consistency state: the question and every branch's extracted answer ("" if none)."""

    question: str
    seed: int = 0  # base seed: branch i samples with seed * 100_000 + i
    answers: Appended[list[str]] = []


def sc_program(branches_per_round: int = 4, cap: int = 16, policy: Policy | None = None, *,
               temperature: float = 0.7, max_tokens: int = 512, dataset: str = "math",
               template: str = "math_cot", chat: bool = True, name: str = "sc") -> CompiledGraph:
    """Build Self-Consistency as a compiled graph (inputs: ``question=``).

    Args:
        branches_per_round: parallel branches (lanes); also the default detection step.
        cap: the most branches ever sampled (the knob cap).
        policy: stopping policy; ``None`` gives the default threshold described above.
        temperature, max_tokens: sampling for each branch (branch ``i`` uses seed ``seed * 100_000 + i``).
        dataset: how answers are extracted (``gsm8k``, ``math``, ...).
        template: prompt template name or Jinja2 source with a ``question`` variable.
    """
    if branches_per_round < 1 or cap < 1:
        raise ConfigError(f"sc needs branches_per_round >= 1 and cap >= 1, got {branches_per_round}, {cap}")
    if policy is None:
        policy = Threshold(0.55, detect_at=min(branches_per_round, cap), every=branches_per_round)
    g = Graph(SCState, knob=Knob("branches", cap=cap), name=name)

    @g.step(fanout=min(branches_per_round, cap))
    async def sample(s: SCState, ctx) -> dict:
        """One full solution; keep only its extracted answer."""
        out = await ctx.gen(prompt(template, question=s.question), max_tokens=max_tokens,
                            temperature=temperature, seed=s.seed * 100_000 + ctx.branch, chat=chat)
        return {"answers": [extract_answer(out.text, dataset) or ""]}

    @g.certaindex
    def agreement(s: SCState) -> float:
        """1.0 when every answer falls into one cluster, 0.0 when all differ."""
        return entropy_certainty(s.answers, same="math")

    @g.answer
    def vote(s: SCState) -> str | None:
        return majority(s.answers, same="math")[0] or None

    g.loop("sample")
    return g.compile(policy=policy)

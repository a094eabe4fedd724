r"""Self-Consistency with certaindex early exit, written in certa's DSL.

Branches sample full solutions in parallel (``branches_per_round`` lanes, each lane starting
a new branch as soon as its last one finishes); the knob counts finished branches up to
``cap``. Certaindex is the normalized semantic entropy of the answer clusters (answers
compared with ``math_equal``); the answer is the majority vote. The state's ``answers``
list is the protocol that ESC, Adaptive-Consistency and margin policies read; ``lengths``
(tokens / ``max_tokens``), ``complete`` (ended naturally with an extracted answer) and
``confidence`` (lowest-window mean token logprob, when the backend returns logprobs) sit
beside it, one entry per branch, for the vote policies.

Default policy: :func:`~certa.algorithms.policies.votes.sc_default_policy` — stable vote: stop
once the chance that the vote of all ``cap`` branches would differ from the vote now is at most
4% (:func:`~certa.algorithms.signals.votes.majority_change_probability`), checked after every
finished branch; chosen by leave-one-dataset-out on the dev traces (``docs/algorithms.md``).
The paper's rule, ``Threshold(0.55, detect_at=4, every=4)``, is one ``policy=`` away.

Example:
    >>> import certa as ct
    >>> prog = sc_program(branches_per_round=4, cap=8)
    >>> b = ct.ScriptedBackend(responses=["... so \\boxed{18}."])
    >>> r = ct.Runtime(b).run_sync(prog, question="What is 9 * 2?")
    >>> r.answer, r.exit_reason, r.knob_used
    ('18', 'certaindex', 3)
"""

from __future__ import annotations

from typing import Any

from certa.dsl import Appended, CompiledGraph, Graph, State
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy
from certa.runtime.types import Knob

from certa.algorithms.answers import extract_answer
from certa.algorithms.answers.clustering import majority
from certa.algorithms.prompts import prompt
from certa.algorithms.policies.votes import sc_default_policy
from certa.algorithms.signals import entropy_certainty
from certa.algorithms.signals.votes import sample_confidence

__all__ = ["SCState", "agreement", "sc_program", "vote"]


class SCState(State):
    """Self-Consistency state: the question and every branch's extracted answer ("" if none)."""

    question: str
    seed: int = 0  # base seed: branch i samples with seed * 100_000 + i
    answers: Appended[list[str]] = []
    lengths: Appended[list[float]] = []  # per branch: tokens / max_tokens
    complete: Appended[list[bool]] = []  # per branch: natural stop and an extracted answer
    confidence: Appended[list[float | None]] = []  # per branch: lowest-window mean logprob, if known


def agreement(s: Any) -> float:
    """SC's certaindex over any state with ``answers``: 1.0 when every answer falls into one
    cluster (``math_equal``), 0.0 when all differ (normalized semantic entropy)."""
    return entropy_certainty(s.answers, same="math")


def vote(s: Any) -> str | None:
    """SC's answer over any state with ``answers``: the majority (None when no branch answered)."""
    return majority(s.answers, same="math")[0] or None


def sc_program(branches_per_round: int = 4, cap: int = 16, policy: Policy | None = None, *,
               temperature: float = 0.7, max_tokens: int = 512, dataset: str = "math",
               template: str = "math_cot", chat: bool = True, name: str = "sc") -> CompiledGraph:
    """Build Self-Consistency as a compiled graph (inputs: ``question=``).

    Args:
        branches_per_round: parallel branches (lanes); also the default detection step.
        cap: the most branches ever sampled (the knob cap).
        policy: stopping policy; ``None`` gives the shipped default described above.
        temperature, max_tokens: sampling for each branch (branch ``i`` uses seed ``seed * 100_000 + i``).
        dataset: how answers are extracted (``gsm8k``, ``math``, ...).
        template: prompt template name or Jinja2 source with a ``question`` variable.
    """
    if branches_per_round < 1 or cap < 1:
        raise ConfigError(f"sc needs branches_per_round >= 1 and cap >= 1, got {branches_per_round}, {cap}")
    if policy is None:
        policy = sc_default_policy()
    g = Graph(SCState, knob=Knob("branches", cap=cap), name=name)

    @g.step(fanout=min(branches_per_round, cap), elastic=1 < branches_per_round < cap)
    async def sample(s: SCState, ctx) -> dict:
        """One full solution; keep only its extracted answer."""
        out = await ctx.gen(prompt(template, question=s.question), max_tokens=max_tokens,
                            temperature=temperature, seed=s.seed * 100_000 + ctx.branch, chat=chat)
        answer = extract_answer(out.text, dataset) or ""
        conf = sample_confidence(out.token_logprobs).get("min_window_logprob") if out.token_logprobs else None
        return {"answers": [answer], "lengths": [out.tokens / max_tokens],
                "complete": [out.finish_reason == "stop" and bool(answer)], "confidence": [conf]}

    g.certaindex(agreement)
    g.answer(vote)
    g.loop("sample")
    return g.compile(policy=policy)

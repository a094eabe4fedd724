r"""Self-Consistency over CoT chains: n chains of one question, each with its own probe certaindex,
stopped all at once when their answers have settled. A composition in the DSL, not a special program.

Each chain is a ``cot_program`` (default: ``cot_program()``, the reasoning certaindex) started
as a live sub-program (``ctx.spawn``, seed ``i`` for chain ``i`` so chains sample different
text). Every round advances the running chains one chunk in lock-step (their requests batch
together) and reads each chain's current answer — its final answer once it ended (finished,
or stopped by its own certaindex), else its latest probe's. The parent's certaindex is a
chain-vote rule (:mod:`~certa.algorithms.signals.chain_vote`; default
:class:`~certa.algorithms.signals.chain_vote.SettledVote`: the ended chains' vote can no
longer change); at 1.0 every chain still running is stopped and the vote is the answer.
The knob (iterations) counts rounds.

Example:
    >>> import certa as ct
    >>> chain = "<think>9 * 2 = 18, so the answer is \\boxed{18}.\n" + "Let me double-check that. " * 40
    >>> b = ct.ScriptedBackend(responses=[chain], probe=lambda text, suffix: "18}")
    >>> r = ct.Runtime(b).run_sync(sc_cot_program(n=3), question="What is 9 * 2?")
    >>> r.answer, r.exit_reason, r.state.ended
    ('18', 'certaindex', [True, True, True])
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from certa.dsl import END, Appended, CompiledGraph, Graph, State
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy, Threshold
from certa.runtime.types import Knob

from certa.algorithms.programs.cot_probe import cot_program
from certa.algorithms.signals.chain_vote import ChainsView, ChainVote, SettledVote, chain_vote_from_dict
from certa.algorithms.signals.cot import CoTSignal

__all__ = ["SCCoTState", "sc_cot_program"]


class SCCoTState(State):
    """The chains (live sub-programs) and, after each round, their answers and who has ended."""

    question: str
    seed: int = 0  # chain i samples with seed * 1000 + i
    chains: Any = None
    answers: list[str] = []
    ended: list[bool] = []
    finished: list[bool] = []  # ended naturally, not by their own certaindex
    order: list[int] = []  # chains in the order they ended
    history: Appended[list[tuple[str, ...]]] = []  # earlier rounds' answers
    value: float = 0.0
    vote: str | None = None


def sc_cot_program(n: int = 8, *, chain: CompiledGraph | None = None, rule: ChainVote | dict | None = None,
                   policy: Policy | None = None, max_rounds: int | None = None, name: str = "sc-cot",
                   chain_signal: CoTSignal | dict | None = None) -> CompiledGraph:
    """Build SC over CoT (inputs: ``question=``, optional ``seed=``).

    ``n``: chains; ``chain``: the CoT program each runs (default ``cot_program()``, or
    ``cot_program(signal=chain_signal)``: e.g. a policy file's, ``certa calibrate --program
    sc-cot``); ``rule``: the chain-vote certaindex (default
    :class:`~certa.algorithms.signals.chain_vote.SettledVote`, or a ``to_dict``); ``policy``:
    default stop the first time it reaches 1.0; ``max_rounds``: the knob cap (default: none —
    the chains' own token caps bound the run).
    """
    if n < 1:
        raise ConfigError(f"sc-cot needs n >= 1 chains, got {n}")
    if chain is not None and chain_signal is not None:
        raise ConfigError("sc-cot takes chain= or chain_signal=, not both")
    chain = chain if chain is not None else cot_program(signal=chain_signal)
    vote_rule = chain_vote_from_dict(rule) if isinstance(rule, dict) else rule or SettledVote()
    g = Graph(SCCoTState, knob=Knob("iterations", cap=max_rounds), name=name)

    @g.step
    async def start(s: SCCoTState, ctx) -> dict:
        """Start the n chains (nothing decoded yet)."""
        return {"chains": [ctx.spawn(chain, question=s.question, seed=s.seed * 1000 + i) for i in range(n)]}

    @g.step
    async def think(s: SCCoTState, ctx) -> dict:
        """Advance every running chain one chunk, together; read each one's current answer."""
        await asyncio.gather(*(c.advance() for c in s.chains if not c.done))
        ended = [c.done for c in s.chains]
        finished = [c.exit_reason in ("done", "cap") for c in s.chains]
        answers = [str(c.answer) if c.answer is not None else "" for c in s.chains]
        order = s.order + [i for i, e in enumerate(ended) if e and i not in s.order]
        view = ChainsView(tuple(answers), tuple(ended), tuple(order), tuple(s.history), tuple(finished))
        value = vote_rule(view)
        return {"answers": answers, "ended": ended, "finished": finished, "order": order, "value": value,
                "history": [tuple(answers)], "vote": vote_rule.answer(view)}

    def more(s: SCCoTState) -> Literal["think", "__end__"]:
        return END if all(s.ended) else "think"

    @g.certaindex
    def settled(s: SCCoTState) -> float:
        """The chain-vote rule over the chains' current answers (default: the ended chains' vote
        can no longer change)."""
        return s.value

    @g.answer
    def majority_vote(s: SCCoTState) -> str | None:
        return s.vote

    g.edge("start", "think")
    g.branch("think", more)
    return g.compile(policy=policy or Threshold(1.0, detect_at=1, every=1))

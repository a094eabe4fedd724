r"""Self-Consistency over MCTS: each SC branch is a whole MCTS sub-program (nesting via ``ctx.call``).

The outer program samples ``branches_per_round`` MCTS searches in parallel (branch ``i``
runs its search with ``seed=i``, so searches differ) and votes over their answers. Its
certaindex composes the sub-programs': the entropy certainty of the answers they return
(each sub-program may itself exit early on its own reward certaindex). Sub-program tokens
roll up into the outer program. When the outer program exits, the runtime cancels its
branches, which cancels the nested runs and aborts their requests.

Example:
    >>> import certa as ct
    >>> b = ct.ScriptedBackend(responses={"Is this step": "Yes", "Step 1": "so \\boxed{18}"})
    >>> r = ct.Runtime(b).run_sync(sc_mcts_program(branches_per_round=2, cap=4), question="9 * 2?")
    >>> r.answer, r.exit_reason, r.knob_used
    ('18', 'certaindex', 2)
"""

from __future__ import annotations

from typing import Any

from certa.dsl import Appended, CompiledGraph, Graph, State
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy, Threshold
from certa.runtime.types import Knob

from certa.algorithms.programs.mcts import mcts_program
from certa.algorithms.programs.self_consistency import agreement, vote

__all__ = ["SCMCTSState", "sc_mcts_program"]


class SCMCTSState(State):
    question: str
    answers: Appended[list[str]] = []
    searches: Appended[list[dict[str, Any]]] = []  # per sub-program: id, exit reason, iterations


def sc_mcts_program(branches_per_round: int = 2, cap: int = 6, policy: Policy | None = None, *,
                    mcts: CompiledGraph | None = None, iterations: int = 4, width: int = 2, depth: int = 4,
                    name: str = "sc-mcts", **mcts_options: Any) -> CompiledGraph:
    """Build SC over MCTS (inputs: ``question=``).

    ``mcts`` is the sub-program (default ``mcts_program(iterations, width=, depth=, **mcts_options)``).
    Default policy: ``Threshold(0.55, detect_at=branches_per_round, every=branches_per_round)``.
    """
    if branches_per_round < 1 or cap < 1:
        raise ConfigError(f"sc-mcts needs branches_per_round >= 1 and cap >= 1, got {branches_per_round}, {cap}")
    inner = mcts or mcts_program(iterations, width=width, depth=depth, **mcts_options)
    seeded = "seed" in inner.graph.state.model_fields
    g = Graph(SCMCTSState, knob=Knob("branches", cap=cap), name=name)

    @g.step(fanout=min(branches_per_round, cap))
    async def search(s: SCMCTSState, ctx) -> dict:
        """One full MCTS run; keep its answer."""
        res = await ctx.call(inner, question=s.question, **({"seed": ctx.branch} if seeded else {}))
        info = {"program": res.program_id, "exit": res.exit_reason, "iterations": res.knob_used}
        return {"answers": [res.answer or ""], "searches": [info]}

    g.certaindex(agreement)  # SC's: entropy certainty and majority over the searches' answers
    g.answer(vote)
    g.loop("search")
    return g.compile(policy=policy or Threshold(0.55, detect_at=min(branches_per_round, cap),
                                                every=branches_per_round))

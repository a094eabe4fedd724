r"""Monte-Carlo Tree Search over reasoning steps (à la llm-reasoners' RAP), in certa's DSL.

One iteration = ``select`` (UCT from the root to a leaf) → ``expand`` (``width`` children in
parallel, each one step of solution, stopped at ``"\n\n"``, rated by the scorer) → join →
``simulate`` (roll out greedily from the best new child, one step at a time, to a terminal
node or the depth limit) → ``backprop`` (the return = mean reward on the path; it is added to
every node on it). The knob counts finished iterations (``backprop``), capped at
``iterations``. Rewards come from a pluggable scorer (default: the model's own P("Yes") to
"Is this step correct?", see :mod:`~certa.algorithms.programs.tree`).

Certaindex: ``reward`` = mean reward over the tree's nodes; with ``agreement=True`` also the
answer-cluster entropy of the terminal answers (signals AND together). The answer is the
terminal node with the highest mean path reward. The tree is plain data in ``state.nodes``
(draw it with :func:`~certa.algorithms.programs.tree.tree_mermaid`); ``state.answers`` lists the
terminal answers in the order iterations reached them.

Example:
    >>> import certa as ct
    >>> b = ct.ScriptedBackend(responses={"Is this step": "Yes", "Step 1": "x = 18, so \\boxed{18}"})
    >>> r = ct.Runtime(b).run_sync(mcts_program(iterations=3), question="9 * 2?")
    >>> r.answer, r.exit_reason, r.knob_used, len(r.state.nodes)  # root + width=2 children
    ('18', 'certaindex', 1, 3)
    >>> r = ct.Runtime(b).run_sync(mcts_program(iterations=3, policy=ct.Even(3)), question="9 * 2?")
    >>> r.knob_used, r.state.answers
    (3, ['18', '18', '18'])
"""

from __future__ import annotations

import math
from functools import partial
from typing import Annotated, Literal

from certa.dsl import END, CompiledGraph, Graph, Send, State
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy, Threshold
from certa.runtime.types import Knob

from certa.algorithms.signals import entropy_certainty, reward_certainty
from certa.algorithms.programs.tree import Node, Scorer, grow, path_to, propose_step, self_eval, steps_to

__all__ = ["MCTSState", "mcts_program", "uct_select"]


class MCTSState(State):
    question: str
    seed: int = 0  # base seed, so nested searches (SC over MCTS) differ
    nodes: Annotated[list[Node], grow] = [Node(id=0)]
    leaf: int = 0  # the node this iteration expands
    tip: int = 0  # where this iteration's rollout ended
    iterations: int = 0
    answers: list[str | None] = []


def uct_select(nodes: list[Node], w_exp: float = 1.0) -> int:
    """Walk from the root by UCT (unvisited children score by their own reward) to a leaf."""
    def uct(c: Node, n_parent: int) -> float:
        q = c.value / c.visits if c.visits else c.reward
        return q + w_exp * math.sqrt(math.log(n_parent + 1) / (c.visits + 1))

    cur = nodes[0]
    while cur.children and not cur.terminal:
        cur = max((nodes[i] for i in cur.children), key=lambda c, n=cur.visits: uct(c, n))
    return cur.id or 0


def backprop(s: MCTSState) -> dict:
    """Add the path's mean reward to every node on it, root included."""
    path = path_to(s.nodes, s.tip)
    ret = sum(n.reward for n in path) / len(path) if path else 0.0
    updated = [n.model_copy(update={"visits": n.visits + 1, "value": n.value + ret}) for n in [s.nodes[0], *path]]
    tip = s.nodes[s.tip]
    return {"nodes": updated, "iterations": s.iterations + 1,
            "answers": [*s.answers, tip.answer] if tip.terminal else s.answers}


def reward(s: MCTSState) -> float:
    """Mean reward of the tree's steps (rewards are in [0, 1])."""
    return reward_certainty([n.reward for n in s.nodes[1:]], "mean")


def best_terminal(s: MCTSState) -> str | None:
    """The terminal answer whose path has the highest mean reward per step."""
    ends = [n for n in s.nodes if n.terminal and n.answer]
    if not ends:
        return None
    return max(ends, key=lambda n: sum(p.reward for p in path_to(s.nodes, n.id or 0)) / n.depth).answer


def _route(g: Graph, width: int, iterations: int) -> None:
    """MCTS's edges: ``select`` fans out ``width`` expansions (a terminal leaf goes straight to
    ``backprop``), their join simulates, ``backprop`` loops until ``iterations`` are done."""

    def fan_out(s: MCTSState):
        return "backprop" if s.nodes[s.leaf].terminal else [Send("expand", s.leaf)] * width

    def joined(s: MCTSState) -> Literal["simulate", "__end__"]:
        return "simulate" if len(s.nodes[s.leaf].children) >= width else END

    def again(s: MCTSState) -> Literal["select", "__end__"]:
        return "select" if s.iterations < iterations else END

    g.branch("select", fan_out, destinations=["expand", "backprop"], max_fanout=width)
    g.branch("expand", joined)
    g.edge("simulate", "backprop")
    g.branch("backprop", again)


def mcts_program(iterations: int = 8, *, width: int = 2, depth: int = 6, w_exp: float = 1.0,
                 scorer: Scorer | None = None, policy: Policy | None = None, agreement: bool = False,
                 temperature: float = 0.7, step_tokens: int = 128, stop: tuple[str, ...] = ("\n\n",),
                 dataset: str = "math", chat: bool = True, name: str = "mcts") -> CompiledGraph:
    """Build MCTS as a compiled graph (inputs: ``question=``). See the module docstring.

    Default policy: ``Threshold(0.9, detect_at=max(1, iterations // 2), every=1)``.
    """
    if iterations < 1 or width < 1 or depth < 1:
        raise ConfigError(f"mcts needs iterations, width and depth >= 1, got {iterations}, {width}, {depth}")
    score = scorer or partial(self_eval, chat=chat)
    g = Graph(MCTSState, knob=Knob("iterations", cap=iterations, step="backprop"), name=name)

    async def child(s: MCTSState, ctx, parent: int, steps: list[str], seed: int) -> Node:
        node = await propose_step(ctx, s.question, steps, parent=parent, depth_limit=depth, dataset=dataset,
                                  max_tokens=step_tokens, temperature=temperature, seed=seed, stop=stop, chat=chat)
        return node.model_copy(update={"reward": float(await score(ctx, s.question, steps, node.text))})

    @g.step
    def select(s: MCTSState) -> dict:
        leaf = uct_select(s.nodes, w_exp)
        return {"leaf": leaf, "tip": leaf}

    @g.step
    async def expand(s: MCTSState, ctx) -> dict:
        """One new child of the selected leaf (``width`` of these run in parallel)."""
        return {"nodes": [await child(s, ctx, ctx.payload, steps_to(s.nodes, ctx.payload),
                                   s.seed * 100_000 + ctx.branch)]}

    @g.step
    async def simulate(s: MCTSState, ctx) -> dict:
        """Roll out from the best new child, one scored step at a time."""
        best = max((s.nodes[i] for i in s.nodes[s.leaf].children), key=lambda n: n.reward)
        new, cur, steps = [], best, steps_to(s.nodes, best.id or 0)
        while not cur.terminal:
            nxt = await child(s, ctx, cur.id or 0, steps, seed=s.seed * 100_000 + ctx.branch * 1000 + len(new))
            cur = nxt.model_copy(update={"id": len(s.nodes) + len(new)})
            new.append(cur)
            steps = [*steps, cur.text]
        return {"nodes": new, "tip": cur.id}

    g.step(backprop)

    g.certaindex(reward)
    if agreement:
        g.certaindex(lambda s: entropy_certainty(s.answers, same="math"), name="agreement")

    g.answer(best_terminal)

    _route(g, width, iterations)
    return g.compile(policy=policy or Threshold(0.9, detect_at=max(1, iterations // 2), every=1))

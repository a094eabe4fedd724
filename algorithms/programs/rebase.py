r"""REBASE (reward-balanced search) over reasoning steps, in certa's DSL.

The search grows a tree depth by depth under a *width* budget: ``width`` solutions in all.
Each round, the live (non-terminal) nodes of the last depth share the remaining budget
``width - finished`` in proportion to ``softmax(reward / temperature)`` (temperature 0.2,
as in thu-wyz/inference_scaling); each allocated slot is one ``expand`` branch that writes
one scored child, and all slots of a round run in parallel. A child is terminal when it gives
a ``\boxed{}`` answer (or at the depth limit) and then uses up one unit of the budget. Counts
are rounded by largest remainder so a round spends exactly the remaining budget.

**Knob = depth rounds** (``collect`` runs once per round), capped at ``depth``: early exit
saves the rounds (each up to ``width`` generations) the search would still have run. Width is
the fixed REBASE budget. Certaindex = the best reward among finished solutions (0 before
any). The answer is the reward-weighted majority over finished solutions; ``state.answers``
lists them in finishing order.

Example:
    >>> allocate([0.9, 0.5, 0.1], 8)
    [7, 1, 0]
    >>> import certa as ct
    >>> b = ct.ScriptedBackend(responses={"Is this step": "Yes", "Step 1": "so \\boxed{18}"})
    >>> r = ct.Runtime(b).run_sync(rebase_program(width=4, policy=ct.Even(5)), question="9 * 2?")
    >>> r.answer, r.knob_used, r.state.answers
    ('18', 1, ['18', '18', '18', '18'])
"""

from __future__ import annotations

import math
from functools import partial
from typing import Annotated, Literal

from certa.dsl import END, CompiledGraph, Graph, Send, State, add
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy, Threshold
from certa.runtime.types import Knob

from certa.algorithms.answers.clustering import cluster
from certa.algorithms.signals import reward_certainty
from certa.algorithms.programs.tree import Node, Scorer, grow, propose_step, self_eval, steps_to

__all__ = ["RebaseState", "allocate", "rebase_program"]


class RebaseState(State):
    question: str
    seed: int = 0  # base seed: slot branch i samples with seed * 100_000 + i
    nodes: Annotated[list[Node], grow] = [Node(id=0)]
    frontier: list[int] = [0]  # live nodes of the last depth
    plan: list[int] = []  # parent id of each slot this round
    pending: Annotated[int, add] = 0  # slots of this round still running
    rounds: int = 0
    answers: list[str | None] = []
    rewards: list[float] = []  # reward of each finished solution


def allocate(rewards: list[float], budget: int, temperature: float = 0.2) -> list[int]:
    """Split ``budget`` slots over nodes by ``softmax(reward / temperature)``, largest remainder."""
    if not rewards or budget <= 0:
        return [0] * len(rewards)
    top = max(rewards)
    weights = [math.exp((r - top) / temperature) for r in rewards]
    shares = [budget * w / sum(weights) for w in weights]
    counts = [math.floor(x) for x in shares]
    order = sorted(range(len(rewards)), key=lambda i: (counts[i] - shares[i], -rewards[i], i))
    for i in order[: budget - sum(counts)]:
        counts[i] += 1
    return counts


def best_reward(s: RebaseState) -> float:
    """The highest reward among finished solutions."""
    return reward_certainty(s.rewards, "max")


def weighted_vote(s: RebaseState) -> str | None:
    """The answer whose solutions have the most reward in total."""
    groups = [c for c in cluster(s.answers, same="math") if s.answers[c[0]]]
    if not groups:
        return None
    return s.answers[max(groups, key=lambda c: sum(s.rewards[i] for i in c))[0]]


def dispatch(s: RebaseState):
    """One ``expand`` per planned slot (the end once nothing is planned)."""
    return [Send("expand", p) for p in s.plan] or END


def joined(s: RebaseState) -> Literal["collect", "__end__"]:
    """The round closes once its last expansion is in."""
    return "collect" if s.pending == 0 else END


def rebase_program(width: int = 8, *, depth: int = 6, temperature: float = 0.2, scorer: Scorer | None = None,
                   policy: Policy | None = None, sample_temperature: float = 0.7, step_tokens: int = 128,
                   stop: tuple[str, ...] = ("\n\n",), dataset: str = "math", chat: bool = True,
                   name: str = "rebase") -> CompiledGraph:
    """Build REBASE as a compiled graph (inputs: ``question=``). See the module docstring.

    Default policy: ``Threshold(0.95, detect_at=1, every=1)`` (a near-certain finished solution).
    """
    if width < 1 or depth < 1 or temperature <= 0:
        raise ConfigError(f"rebase needs width, depth >= 1 and temperature > 0, got {width}, {depth}, {temperature}")
    score = scorer or partial(self_eval, chat=chat)
    g = Graph(RebaseState, knob=Knob("iterations", cap=depth, step="collect"), name=name)

    @g.step
    def start(s: RebaseState) -> dict:
        return {"plan": [0] * width, "pending": width}

    @g.step
    async def expand(s: RebaseState, ctx) -> dict:
        """One scored child of the node in this slot."""
        steps = steps_to(s.nodes, ctx.payload)
        node = await propose_step(ctx, s.question, steps, parent=ctx.payload, depth_limit=depth, dataset=dataset,
                                  max_tokens=step_tokens, temperature=sample_temperature,
                                  seed=s.seed * 100_000 + ctx.branch,
                                  stop=stop, chat=chat)
        reward = float(await score(ctx, s.question, steps, node.text))
        return {"nodes": [node.model_copy(update={"reward": reward})], "pending": -1}

    @g.step
    def collect(s: RebaseState) -> dict:
        """Close the round: record finished solutions, then plan the next round's slots."""
        born = [s.nodes[c] for f in s.frontier for c in s.nodes[f].children]
        done = [n for n in born if n.terminal]
        live = [n for n in born if not n.terminal]
        answers, rewards = [*s.answers, *(n.answer for n in done)], [*s.rewards, *(n.reward for n in done)]
        counts = allocate([n.reward for n in live], width - len(answers), temperature)
        plan = [n.id for n, c in zip(live, counts) for _ in range(c)]
        return {"frontier": [n.id for n in live], "answers": answers, "rewards": rewards, "plan": plan,
                "pending": len(plan), "rounds": s.rounds + 1}

    g.certaindex(best_reward)
    g.answer(weighted_vote)

    g.branch("start", dispatch, destinations=["expand", END], max_fanout=width)
    g.branch("expand", joined)
    g.branch("collect", dispatch, destinations=["expand", END], max_fanout=width)
    return g.compile(policy=policy or Threshold(0.95, detect_at=1, every=1))

r"""Search trees as plain data, shared by MCTS and REBASE: nodes, a ``grow`` reducer, step
proposals, self-evaluation rewards and a Mermaid drawing.

A tree is a ``list[Node]`` in the program state; ``nodes[0]`` is the (empty) root and a
node's ``id`` is its index. Steps return new or updated nodes and the :data:`grow` reducer
merges them: a node whose ``id`` is ``None`` (or ``len(tree)``) is appended with the next id
and registered as a child of its parent; a node with an existing ``id`` replaces that node.
Concurrent branches can therefore add children without knowing the final ids.

A *scorer* rates a proposed step: ``async (ctx, question, steps_so_far, step) -> float`` in
[0, 1]. The default, :func:`self_eval`, asks the policy model "Is this step correct?" and
returns P(Yes) / (P(Yes) + P(No)), as llm-reasoners' RAP does.

Example:
    >>> tree = grow([Node(id=0)], [Node(parent=0, text="a"), Node(parent=0, text="b")])
    >>> [n.id for n in tree], tree[0].children
    ([0, 1, 2], [1, 2])
    >>> steps_to(tree, 2)
    ['b']
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from certa.dsl.state import Reducer
from certa.runtime.draw import Mermaid

from certa.algorithms.answers import extract_answer, extract_boxed
from certa.algorithms.prompts import prompt

__all__ = ["Node", "Scorer", "grow", "path_to", "propose_step", "self_eval", "steps_to", "tree_mermaid"]

Scorer = Callable[[Any, str, list[str], str], Awaitable[float]]
"""``async (ctx, question, steps_so_far, step) -> reward in [0, 1]``."""


class Node(BaseModel):
    """One reasoning step in a search tree (plain data: ``model_dump()`` it to save or draw)."""

    id: int | None = None
    parent: int | None = None
    text: str = ""
    depth: int = 0
    visits: int = 0
    value: float = 0.0  # sum of backed-up returns (MCTS); Q = value / visits
    reward: float = 0.0  # the scorer's rating of this step
    terminal: bool = False
    answer: str | None = None
    children: list[int] = Field(default_factory=list)


def _grow(tree: list[Node], new: Node | list[Node]) -> list[Node]:
    out = list(tree or [])
    for node in new if isinstance(new, list) else [new]:
        if node.id is not None and node.id < len(out):
            out[node.id] = node
            continue
        node = node.model_copy(update={"id": len(out)})
        out.append(node)
        if node.parent is not None:
            parent = out[node.parent]
            out[node.parent] = parent.model_copy(update={"children": [*parent.children, node.id]})
    return out


grow = Reducer(_grow, "grow")
"""Reducer for ``Annotated[list[Node], grow]``: append new nodes (assigning ids), replace updated ones."""


def path_to(tree: list[Node], node_id: int) -> list[Node]:
    """Nodes from the root's first child down to ``node_id`` (the root itself is left out)."""
    out = []
    cur: int | None = node_id
    while cur is not None and cur != 0:
        out.append(tree[cur])
        cur = tree[cur].parent
    return out[::-1]


def steps_to(tree: list[Node], node_id: int) -> list[str]:
    """The step texts on the path to ``node_id``."""
    return [n.text for n in path_to(tree, node_id)]


async def propose_step(ctx: Any, question: str, steps: list[str], *, parent: int, depth_limit: int,
                       dataset: str, max_tokens: int, temperature: float, seed: int | None,
                       stop: tuple[str, ...], chat: bool) -> Node:
    """Generate the next step after ``steps`` as a new (unscored) child of ``parent``.

    The node is terminal when the step gives a ``\\boxed{}`` answer, when the model has
    nothing more to say, or at ``depth_limit`` (then the answer is extracted from the path).
    """
    out = await ctx.gen(prompt("mcts_step", question=question, steps=steps), max_tokens=max_tokens,
                        temperature=temperature, seed=seed, stop=stop, chat=chat)
    text = out.text.strip()
    depth = len(steps) + 1
    answer = extract_boxed(text)
    terminal = answer is not None or not text or depth >= depth_limit
    if terminal and answer is None:
        answer = extract_answer("\n".join([*steps, text]), dataset)
    return Node(parent=parent, text=text, depth=depth, terminal=terminal, answer=answer)


async def self_eval(ctx: Any, question: str, steps: list[str], step: str, *, chat: bool = True) -> float:
    """Self-evaluation reward: P("Yes") to "Is this step correct?", normalized over Yes/No.

    ``chat=True`` asks in the model's chat template (instruct models); ``False`` scores the raw prompt.
    """
    res = await ctx.score(prompt("self_eval", question=question, steps=steps, step=step), ("Yes", "No"), chat=chat)
    yes, no = float(res.probs.get("Yes", 0.0)), float(res.probs.get("No", 0.0))
    return yes / (yes + no) if yes + no > 0 else 0.5


def tree_mermaid(tree: list[Node], *, width: int = 32) -> Mermaid:
    """A Mermaid drawing of a search tree: step text, reward, visits; terminal nodes show answers."""
    lines = ["flowchart TD"]
    for n in tree:
        text = (n.text[:width] + "…") if len(n.text) > width else n.text
        text = text.replace('"', "'").replace("\n", " ") or "root"
        extra = f"<br/>r={n.reward:.2f} n={n.visits}" + (f"<br/>⇒ {n.answer}" if n.terminal else "")
        lines.append(f'    n{n.id}["{text}{extra if n.id else ""}"]')
        if n.parent is not None:
            lines.append(f"    n{n.parent} --> n{n.id}")
    return Mermaid("\n".join(lines) + "\n")

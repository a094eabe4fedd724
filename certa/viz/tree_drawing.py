"""Draw an executed search tree (MCTS, REBASE): rewards, visits, answers and the chosen path.

The tree is the plain data the programs keep in ``state.nodes`` (a list of
:class:`certa.algorithms.programs.tree.Node`, ``nodes[0]`` the root). Use it through
:mod:`certa.viz.drawing` (``from certa.viz.drawing import draw_tree``).

Example:
    >>> from certa.algorithms.programs.tree import Node, grow
    >>> tree = grow([Node(id=0, visits=2)], [Node(parent=0, depth=1, text="a", reward=0.9),
    ...                                      Node(parent=0, depth=1, text="b", reward=0.2)])
    >>> tree = grow(tree, [Node(parent=1, depth=2, text="so 4", terminal=True, answer="4", reward=0.8)])
    >>> chosen_path(tree)
    [0, 1, 3]
    >>> fig = draw_tree(tree)
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from certa.runtime.errors import ConfigError

from certa.viz.plots import new_figure, save_figure

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from certa.algorithms.programs.tree import Node

__all__ = ["chosen_path", "draw_tree", "tree_layout"]

_CHOSEN = "#dc2626"


def _nodes_and_answer(obj: Any) -> tuple[list["Node"], Any, str]:
    """Accept a Result, a state with ``nodes``, a list of Nodes or of node dicts."""
    from certa.algorithms.programs.tree import Node  # noqa: PLC0415
    answer, name = None, "tree"
    if hasattr(obj, "state") and hasattr(obj, "exit_reason"):  # a Result
        answer, name = obj.answer, obj.name
        obj = obj.state
    if not isinstance(obj, (list, tuple)):
        obj = getattr(obj, "nodes", None)
    if not obj:
        raise ConfigError("nothing to draw: expected a search tree (a Result or state with .nodes, or a list of Node)",
                          hint="draw_tree works on MCTS and REBASE results, e.g. draw_tree(result)")
    nodes = [n if isinstance(n, Node) else Node.model_validate(n) for n in obj]
    return nodes, answer, name


def chosen_path(nodes: Sequence["Node"], answer: Any = None) -> list[int]:
    """Node ids from the root to the chosen terminal node.

    The chosen node is the terminal node with the best mean reward along its path (the MCTS
    answer rule), among those whose answer equals ``answer`` when given. ``[0]`` when the
    tree has no terminal node.
    """
    ends = [n for n in nodes if n.terminal and n.answer]
    if answer is not None and any(str(n.answer) == str(answer) for n in ends):
        ends = [n for n in ends if str(n.answer) == str(answer)]
    if not ends:
        return [0]

    def path(i: int) -> list[int]:
        out = []
        cur: int | None = i
        while cur is not None:
            out.append(cur)
            cur = nodes[cur].parent
        return out[::-1]

    def score(n: "Node") -> tuple[float, int, int]:
        p = path(n.id or 0)[1:]
        return (sum(nodes[i].reward for i in p) / max(len(p), 1), n.visits, -(n.id or 0))

    return path(max(ends, key=score).id or 0)


def tree_layout(nodes: Sequence["Node"]) -> dict[int, tuple[float, float]]:
    """Tidy top-down layout: leaves at consecutive x (depth-first order), parents centred above."""
    pos: dict[int, tuple[float, float]] = {}
    next_x = [0.0]

    def place(i: int, depth: int) -> float:
        kids = [c for c in nodes[i].children if c < len(nodes)]
        if not kids:
            x = next_x[0]
            next_x[0] += 1.0
        else:
            xs = [place(c, depth + 1) for c in kids]
            x = (xs[0] + xs[-1]) / 2
        pos[i] = (x, -float(depth))
        return x

    place(0, 0)
    return pos


def _label(n: "Node", width: int, text: bool) -> str:
    if n.id == 0:
        return f"root\nn={n.visits}" if n.visits else "root"
    lines = textwrap.wrap(n.text.replace("\n", " "), width, max_lines=2, placeholder="…") if text else []
    lines.append(f"r={n.reward:.2f}" + (f"  n={n.visits}" if n.visits else ""))
    if n.terminal:
        lines.append(f"⇒ {n.answer if n.answer is not None else '∅'}")
    return "\n".join(lines)


def draw_tree(tree: Any, path: str | os.PathLike[str] | None = None, *, chosen: Sequence[int] | None = None,
              text: bool | None = None, width: int = 16, title: str | None = None) -> "Figure":
    """Draw an executed search tree; returns the figure (and writes ``path`` when given).

    Args:
        tree: a :class:`~certa.runtime.result.Result` of MCTS/REBASE, a state with ``nodes``,
            or a list of :class:`~certa.algorithms.programs.tree.Node` (or their ``model_dump()`` dicts).
        chosen: node ids of the path to highlight (default: :func:`chosen_path` for the
            result's answer).
        text: show each step's text (default: when the tree has at most 24 leaves).
        width: characters per text line (two lines at most).
    """
    from matplotlib import colormaps  # noqa: PLC0415

    nodes, answer, name = _nodes_and_answer(tree)
    pos = tree_layout(nodes)
    leaves = sum(1 for n in nodes if not n.children)
    text = leaves <= 24 if text is None else text
    path_ids = list(chosen) if chosen is not None else chosen_path(nodes, answer)
    on_path = set(path_ids)
    pitch = 1.8 if text else 0.9  # inches per leaf
    depth = max(n.depth for n in nodes) if nodes else 0
    fig = new_figure(max(5.0, (leaves + 0.4) * pitch), 1.35 * (depth + 1) + 0.9)
    ax = fig.add_axes((0, 0, 1, 0.92))
    ax.axis("off")
    ax.set_xlim(-0.6, max(x for x, _ in pos.values()) + 0.6)
    ax.set_ylim(-depth - 0.6, 0.5)
    cmap = colormaps["RdYlGn"]
    for n in nodes:
        if n.parent is not None and n.id in pos and n.parent in pos:
            (xa, ya), (xb, yb) = pos[n.parent], pos[n.id]
            hot = n.id in on_path and n.parent in on_path
            ax.plot([xa, xb], [ya, yb], color=_CHOSEN if hot else "#9ca3af", lw=3 if hot else 1, zorder=1)
    for n in nodes:
        if n.id not in pos:
            continue
        x, y = pos[n.id]
        label = _label(n, width, text)
        hot = n.id in on_path
        face = "#f3f4f6" if n.id == 0 else cmap(0.15 + 0.7 * max(0.0, min(1.0, n.reward)))
        t = ax.text(x, y, label, ha="center", va="center", fontsize=8.5 if text else 7.5, zorder=3, linespacing=1.2,
                    fontweight="bold" if hot else "normal")
        t.set_bbox(dict(boxstyle="round,pad=0.3", fc=face, ec=_CHOSEN if hot else "#4b5563", lw=2.2 if hot else 0.8,
                        alpha=0.95))
    end = nodes[path_ids[-1]] if path_ids and path_ids[-1] < len(nodes) else None
    head = title or f"{name}: {len(nodes) - 1} steps" + (f", chosen answer {end.answer}" if end and end.terminal else "")
    fig.text(0.5, 0.985, head, ha="center", va="top", fontsize=11, fontweight="bold")
    fig.text(0.5, 0.945, "fill: step reward (red 0 → green 1) · n: visits · ⇒ answer · red: chosen path",
             ha="center", va="top", fontsize=8, color="#4b5563")
    save_figure(fig, path)
    return fig

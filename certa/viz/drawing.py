"""Drawings without a browser: program graphs and executed search trees as PNG/SVG.

``program.draw()`` gives Mermaid text (rendered by Jupyter and GitHub); this module draws
the same graph with networkx + matplotlib (imported lazily; ``pip install 'certa[plot]'``),
so drawings also work in scripts, CI and docs. The certaindex trajectory plot is
:func:`certa.viz.plots.plot_certaindex`, re-exported here.

- :func:`draw_png` / :func:`draw_svg` / :func:`draw_graph` — a compiled graph: steps (knob
  step in orange, fan-out ×n), static edges solid, conditional edges dashed with the router's
  name, loops and back edges routed around the side, the certaindex stop in yellow.
- :func:`draw_tree` — an executed MCTS/REBASE tree: nodes coloured by reward (red 0 → green
  1) with visits, terminal answers, and the chosen path in red.

Example:
    >>> import tempfile, pathlib
    >>> from certa.algorithms.programs.library import build
    >>> out = draw_png(build("mcts"), pathlib.Path(tempfile.mkdtemp()) / "mcts.png")
    >>> out.stat().st_size > 1000
    True
"""

from __future__ import annotations

import os
import pathlib
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from certa.dsl.drawing import step_label_parts
from certa.dsl.graph import END, START
from certa.runtime.errors import ConfigError

from certa.viz.plots import new_figure, plot_certaindex, save_figure
from certa.viz.tree_drawing import chosen_path, draw_tree, tree_layout

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from certa.dsl.compiler import CompiledGraph

__all__ = ["GraphLayout", "chosen_path", "draw_graph", "draw_png", "draw_svg", "draw_tree", "graph_layout",
           "plot_certaindex", "tree_layout"]

CERTAINDEX = "__certaindex__"
_ROW, _GAP, _CHAR, _LINE = 1.05, 0.45, 0.085, 0.2  # inches: row pitch, column gap, per char, per line


@dataclass
class DrawNode:
    name: str
    label: str
    kind: str  # "terminal" (start/end), "step", "knob", "any", "certaindex"
    layer: int
    x: float = 0.0
    y: float = 0.0
    w: float = 1.0
    h: float = 0.5


@dataclass
class DrawEdge:
    src: str
    dst: str
    label: str = ""
    conditional: bool = False
    route: str = "straight"  # "straight", "self", "right" (back edge), "left" (skips layers)
    offset: float = 0.0  # inches beyond the widest box on the routed side
    dy_src: float = 0.0  # where a routed edge leaves / enters its boxes (from their middles)
    dy_dst: float = 0.0


@dataclass
class GraphLayout:
    """Positions (inches, y down is negative) of a compiled graph's boxes and edges; pure data."""

    nodes: dict[str, DrawNode] = field(default_factory=dict)
    edges: list[DrawEdge] = field(default_factory=list)

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """``(xmin, xmax, ymin, ymax)`` including routed edges."""
        xs0 = [n.x - n.w / 2 for n in self.nodes.values()]
        xs1 = [n.x + n.w / 2 for n in self.nodes.values()]
        xs0 += [-e.offset - 0.15 for e in self.edges if e.route == "left"]
        xs1 += [e.offset + 0.15 for e in self.edges if e.route == "right"]
        for e in self.edges:
            if e.route == "self":
                n = self.nodes[e.src]
                xs1.append(n.x + n.w / 2 + 0.4 + 0.07 * len(e.label))
        ys = [n.y for n in self.nodes.values()]
        return min(xs0) - 0.3, max(xs1) + 0.3, min(ys) - 0.5, max(ys) + 0.5


def _compiled(program: Any) -> "CompiledGraph":
    from certa.dsl.compiler import CompiledGraph  # noqa: PLC0415
    if isinstance(program, CompiledGraph):
        return program
    inner = getattr(program, "compiled", None)
    if isinstance(inner, CompiledGraph):
        return inner
    raise ConfigError(f"cannot draw {type(program).__name__}: it has no graph",
                      hint="draw a compiled graph (graph.compile()) or a program built from one")


def _step_label(c: "CompiledGraph", name: str) -> tuple[str, str]:
    parts = step_label_parts(c, name)
    return "\n".join(parts), ("knob" if name == c.knob_step else "step")


def graph_layout(program: Any) -> GraphLayout:
    """Lay out a compiled graph top-down: a layer per longest forward path from start.

    Back edges (found by depth-first search from start) go up the right side, edges that
    skip layers go down the left side, self loops curl on the right of their box.
    """
    import networkx as nx  # noqa: PLC0415

    c = _compiled(program)
    g = c.graph
    lay = GraphLayout()
    dg = nx.DiGraph()
    edges: list[DrawEdge] = []
    entry = g.entry_step or next(iter(g.steps))
    edges.append(DrawEdge(START, entry))
    has_out = set()
    for src, dst in g.edges:
        edges.append(DrawEdge(src, dst, "loop" if src == dst else ""))
        has_out.add(src)
    for b in g.branches:
        name = getattr(b.router, "__name__", "router")
        for d in b.destinations or ("*",):
            dst = d if d != "*" else f"{b.source}__any"
            edges.append(DrawEdge(b.source, dst, name, conditional=True))
        has_out.add(b.source)
    edges += [DrawEdge(n, END) for n in g.steps if n not in has_out]

    dg.add_nodes_from([START, END])
    dg.add_nodes_from(g.steps)
    for e in edges:
        dg.add_edge(e.src, e.dst)
    back = {(u, v) for u, v, d in nx.dfs_labeled_edges(dg, START) if d == "nontree" and _is_ancestor(dg, START, v, u)}
    dag = nx.DiGraph([(e.src, e.dst) for e in edges if (e.src, e.dst) not in back and e.src != e.dst])
    dag.add_nodes_from(dg.nodes)
    layer: dict[str, int] = {}
    for n in nx.topological_sort(dag):
        preds = [layer[p] + 1 for p in dag.predecessors(n) if p in layer]
        layer[n] = max(preds, default=0)
    last = max((v for k, v in layer.items() if k != END), default=0) + 1
    layer[END] = max(layer.get(END, last), last)

    for n in dg.nodes:
        if n == START:
            label, kind = "START", "terminal"
        elif n == END:
            label, kind = "END", "terminal"
        elif n.endswith("__any") and n not in g.steps:
            label, kind = "any step", "any"
        else:
            label, kind = _step_label(c, n)
        lines = label.split("\n")
        lay.nodes[n] = DrawNode(n, label, kind, layer.get(n, 0), w=max(0.9, _CHAR * max(map(len, lines)) + 0.35),
                                h=0.28 + _LINE * len(lines))
    rows: dict[int, list[DrawNode]] = {}
    for node in lay.nodes.values():
        rows.setdefault(node.layer, []).append(node)
    for i, row in rows.items():
        total = sum(n.w for n in row) + _GAP * (len(row) - 1)
        x = -total / 2
        for node in row:
            node.x, node.y = x + node.w / 2, -i * _ROW
            x += node.w + _GAP
    if g.signals:
        names = ", ".join(s.name for s in g.signals)
        policy = "\n".join(textwrap.wrap(repr(c.policy), 30)) if c.policy is not None else "no policy"
        label = f"certaindex: {names}\n{policy}"
        lines = label.split("\n")
        end = lay.nodes[END]
        w = _CHAR * max(map(len, lines)) + 0.35
        lay.nodes[CERTAINDEX] = DrawNode(CERTAINDEX, label, "certaindex", end.layer, x=end.x + end.w / 2 + 1.0 + w / 2,
                                         y=end.y, w=w, h=0.28 + _LINE * len(lines))
        edges.append(DrawEdge(CERTAINDEX, END, "stop", conditional=True))

    for e in edges:
        a, b = lay.nodes[e.src], lay.nodes[e.dst]
        if e.src == e.dst:
            e.route = "self"
        elif e.src != CERTAINDEX and ((e.src, e.dst) in back or b.layer <= a.layer):
            e.route = "right"
        elif b.layer - a.layer > 1 and _blocked(lay, a, b):
            e.route = "left"
    placed: dict[str, list[tuple[int, int]]] = {"left": [], "right": []}
    routed = [e for e in edges if e.route in placed]
    routed.sort(key=lambda e: (abs(lay.nodes[e.dst].layer - lay.nodes[e.src].layer), lay.nodes[e.src].layer))
    for e in routed:  # shorter spans run inside longer ones
        lo, hi = sorted((lay.nodes[e.src].layer, lay.nodes[e.dst].layer))
        span = [n for n in lay.nodes.values() if lo <= n.layer <= hi and n.kind != "certaindex"]
        if e.route == "right":
            base = max(n.x + n.w / 2 for n in span)
        else:
            base = -min(n.x - n.w / 2 for n in span)
        outside = sum(1 for a, b in placed[e.route] if a <= hi and lo <= b)
        e.offset = base + 0.35 + 0.3 * outside
        placed[e.route].append((lo, hi))
    touch: dict[tuple[str, str], list[tuple[float, DrawEdge, str]]] = {}
    for e in routed:  # several routed edges on one side of a box: spread them, the higher end higher
        touch.setdefault((e.src, e.route), []).append((lay.nodes[e.dst].y, e, "dy_src"))
        touch.setdefault((e.dst, e.route), []).append((lay.nodes[e.src].y, e, "dy_dst"))
    for (name, _), items in touch.items():
        if len(items) > 1:
            h = lay.nodes[name].h
            for i, (_, e, attr) in enumerate(sorted(items, key=lambda t: -t[0])):
                setattr(e, attr, h * 0.3 - i * h * 0.6 / (len(items) - 1))
    lay.edges = edges
    return lay


def _is_ancestor(dg: Any, root: str, anc: str, node: str) -> bool:
    """True when ``anc`` lies on the depth-first tree path from ``root`` to ``node``."""
    import networkx as nx  # noqa: PLC0415
    parents = {v: u for u, v in nx.dfs_edges(dg, root)}
    cur: str | None = node
    while cur is not None:
        if cur == anc:
            return True
        cur = parents.get(cur)
    return False


def _blocked(lay: GraphLayout, a: DrawNode, b: DrawNode) -> bool:
    """True when a straight line from ``a`` to ``b`` crosses a box on a layer in between."""
    for n in lay.nodes.values():
        if a.layer < n.layer < b.layer:
            t = (n.y - a.y) / (b.y - a.y)
            x = a.x + t * (b.x - a.x)
            if abs(x - n.x) < n.w / 2 + 0.1:
                return True
    return False


_STYLE = {  # face, edge colour, box style
    "terminal": ("#f3f4f6", "#6b7280", "round,pad=0.02,rounding_size=0.2"),
    "step": ("#dbeafe", "#2563eb", "round,pad=0.02,rounding_size=0.06"),
    "knob": ("#ffedd5", "#ea580c", "round,pad=0.02,rounding_size=0.06"),
    "any": ("#f3f4f6", "#9ca3af", "round,pad=0.02,rounding_size=0.06"),
    "certaindex": ("#fef3c7", "#ca8a04", "sawtooth,pad=0.02,tooth_size=0.05"),
}


def draw_graph(program: Any, path: str | os.PathLike[str] | None = None, *, title: str | None = None) -> "Figure":
    """Draw a compiled graph (or a program built from one) and return the matplotlib figure."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: PLC0415
    from matplotlib.path import Path  # noqa: PLC0415

    c = _compiled(program)
    lay = graph_layout(c)
    x0, x1, y0, y1 = lay.extent
    top = 0.35 if title is not False else 0.0
    fig = new_figure(x1 - x0, y1 - y0 + top)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1 + top)
    ax.set_aspect("equal")
    ax.axis("off")
    boxes = {}
    for n in lay.nodes.values():
        face, edge, style = _STYLE[n.kind]
        box = FancyBboxPatch((n.x - n.w / 2, n.y - n.h / 2), n.w, n.h, boxstyle=style, fc=face, ec=edge,
                             lw=2 if n.kind == "knob" else 1.2, zorder=2)
        ax.add_patch(box)
        boxes[n.name] = box
        ax.text(n.x, n.y, n.label, ha="center", va="center", fontsize=9, zorder=3, linespacing=1.25,
                fontweight="bold" if n.kind in ("step", "knob") else "normal")
    for e in lay.edges:
        a, b = lay.nodes[e.src], lay.nodes[e.dst]
        color = "#1d4ed8" if e.conditional else "#374151"
        kw = dict(arrowstyle="-|>", mutation_scale=12, color=color, lw=1.2, zorder=1,
                  linestyle=(0, (4, 3)) if e.conditional else "-")
        if e.route == "self":
            r, dy = a.x + a.w / 2, a.h / 5
            verts = [(r, a.y + dy), (r + 0.3, a.y + dy), (r + 0.3, a.y - dy), (r, a.y - dy)]
            arrow = FancyArrowPatch(path=Path(verts), **kw)
            lx, ly, ha = r + 0.36, a.y, "left"
        elif e.route in ("right", "left"):
            sign = 1 if e.route == "right" else -1
            xa, xb, edge_x = a.x + sign * a.w / 2, b.x + sign * b.w / 2, sign * e.offset
            ya, yb = a.y + e.dy_src, b.y + e.dy_dst
            arrow = FancyArrowPatch(path=Path([(xa, ya), (edge_x, ya), (edge_x, yb), (xb, yb)]), **kw)
            lx, ly, ha = edge_x, (a.y + b.y) / 2, "vertical"
        else:
            arrow = FancyArrowPatch((a.x, a.y), (b.x, b.y), patchA=boxes[e.src], patchB=boxes[e.dst],
                                    shrinkA=1, shrinkB=1, **kw)
            lx, ly, ha = (a.x + b.x) / 2 + 0.06, (a.y + b.y) / 2, "left"
            if abs(a.y - b.y) < 1e-6:  # horizontal: label above the gap between the boxes
                lo, hi = sorted((a, b), key=lambda n: n.x)
                lx, ly, ha = (lo.x + lo.w / 2 + hi.x - hi.w / 2) / 2, a.y + 0.14, "center"
        ax.add_patch(arrow)
        if e.label:
            ax.text(lx, ly, e.label, ha="center" if ha == "vertical" else ha, va="center", fontsize=8, color=color,
                    style="italic", zorder=4, rotation=90 if ha == "vertical" else 0,
                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.85))
    if title is not False:
        ax.text((x0 + x1) / 2, y1 + top - 0.12, title or c.name, ha="center", va="top", fontsize=11,
                fontweight="bold")
    save_figure(fig, path)
    return fig


def draw_png(program: Any, path: str | os.PathLike[str], *, title: str | None = None) -> pathlib.Path:
    """Write the graph of ``program`` (compiled graph or graph program) as a PNG; returns the path."""
    out = pathlib.Path(path).with_suffix(".png") if pathlib.Path(path).suffix.lower() != ".png" else pathlib.Path(path)
    draw_graph(program, out, title=title)
    return out


def draw_svg(program: Any, path: str | os.PathLike[str], *, title: str | None = None) -> pathlib.Path:
    """Write the graph of ``program`` as an SVG; returns the path."""
    out = pathlib.Path(path).with_suffix(".svg") if pathlib.Path(path).suffix.lower() != ".svg" else pathlib.Path(path)
    draw_graph(program, out, title=title)
    return out

"""Mermaid text for compiled graphs (renders in Jupyter; snapshot-tested)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from certa.runtime.draw import Mermaid

from certa.dsl.graph import END, START

if TYPE_CHECKING:  # pragma: no cover
    from certa.dsl.compiler import CompiledGraph


def step_label_parts(c: "CompiledGraph", name: str) -> list[str]:
    """A step's label lines: its name, its fan-out and, for the knob step, the knob and cap."""
    s = c.graph.steps[name]
    parts = [name]
    if callable(s.fanout):
        parts.append(f"fan-out ≤ {s.max_fanout}")
    elif s.fanout > 1:
        parts.append(f"×{s.fanout} branches")
    if name == c.knob_step:
        k = c.graph.knob
        parts.append(f"knob: {k.unit} ≤ {k.cap}" if k.cap is not None else f"knob: {k.unit}")
    return parts


def _label(c: "CompiledGraph", name: str) -> str:
    return "<br/>".join(step_label_parts(c, name))


def mermaid(c: "CompiledGraph") -> Mermaid:
    """Mermaid flowchart: steps, static edges (solid), conditional edges (dashed), joins (thick),
    loops, certaindex."""
    g = c.graph
    lines = ["flowchart TD", f"    {START}([start])", f"    {END}([end])"]
    lines += [f'    {n}["{_label(c, n)}"]' for n in g.steps]
    if not (any(src == START for src, _ in g.edges) or any(b.source == START for b in g.branches)):
        lines.append(f"    {START} --> {g.entry_step or next(iter(g.steps))}")
    static = set()
    for after, step in g.joins:  # fan-in: thick, once after the whole fan-out
        static.add((after, step))
        lines.append(f"    {after} ==>|join| {step}")
    for src, dst in g.edges:
        static.add((src, dst))
        lines.append(f"    {src} -->|loop| {dst}" if src == dst else f"    {src} --> {dst}")
    for b in g.branches:
        name = getattr(b.router, "__name__", "router")
        for d in b.destinations or ("*",):
            target = d if d != "*" else f"{b.source}_any[any step]"
            lines.append(f"    {b.source} -.->|{name}| {target}")
            static.add((b.source, d))
    for n in g.steps:
        if not any(src == n for src, _ in static):
            lines.append(f"    {n} --> {END}")
    if g.signals:
        names = ", ".join(s.name for s in g.signals)
        policy = repr(c.policy).replace('"', "#quot;") if c.policy is not None else "no policy"  # its parameters
        lines.append(f'    certaindex{{{{"certaindex: {names}<br/>{policy}"}}}}')
        lines.append(f"    certaindex -. stop .-> {END}")
    return Mermaid("\n".join(lines) + "\n")

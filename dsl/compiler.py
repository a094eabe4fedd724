"""compile(): validate a Graph with networkx and lower it to a program factory.

Each check raises a :class:`certa.dsl.errors.CompileError` subclass with a stable code
naming the step (see docs/errors.md):

- CT101 unknown-step: an edge, branch, entry or knob names a step that does not exist
- CT102 unreachable-step: a step no path from the entry reaches
- CT103 unbounded-loop: a cycle with neither a knob cap, a ``max_visits`` nor a certaindex stop
- CT104 unbounded-fanout: a dynamic fan-out (callable ``fanout`` or a ``Send`` router) with no bound
- CT105 missing-certaindex: the policy needs a certaindex (or a named signal) the graph lacks
- CT106 unknown-state-key: a step declares it writes a key the state has no field for
- CT107 invalid-graph: no steps, a bad fan-out value, an ambiguous knob step, or ``elastic`` on a step that is not a looped fan-out
- CT109 join-without-fanout: ``g.join(step, after=src)`` where ``src`` never fans out
- CT110 invalid-join: a join that is its own fan-out, the entry, joined twice or also entered per branch
  (after the fan-out step or a later step of its lanes), or lanes that go back to the fan-out step

and warns (:class:`certa.dsl.errors.CompileWarning`) for CT111 (no ``@answer`` and no
``answer`` field) and CT112 (a router with no ``Literal`` hint and no ``destinations=``).
"""

from __future__ import annotations

import typing
import warnings
from dataclasses import dataclass
from typing import Any

import networkx as nx

from certa.dsl.errors import (InvalidGraphError, InvalidJoinError, JoinWithoutFanoutError, MissingAnswerWarning,
                              MissingCertaindexError, UnboundedFanoutError, UnboundedLoopError, UnhintedRouterWarning,
                              UnknownStateKeyError, UnknownStepError, UnreachableStepError)
from certa.runtime.policy import Policy
from certa.runtime.registry import did_you_mean

from certa.dsl.graph import END, START, Graph
from certa.dsl.state import reducers_of


def _suggest(name: str, options: list[str]) -> str | None:
    return did_you_mean(name, options) or f"known steps: {', '.join(options)}"


@dataclass(frozen=True)
class CompiledGraph:
    """A validated graph + policy. ``new(**inputs)`` makes a runnable :class:`GraphProgram`.

    ``graph`` is a sealed snapshot (:meth:`Graph.snapshot`) of the graph ``compile()`` validated.
    ``feeds_knob``: when the knob step is a join, the steps of a round before it (the fan-out it
    joins and its lanes); once the knob cap is spent none of them starts (docs/concepts.md, "Knob").
    """

    graph: Graph
    policy: Policy | None
    name: str
    knob_step: str | None
    reducers: dict[str, Any]
    feeds_knob: frozenset[str] = frozenset()

    def new(self, **inputs: Any):
        from certa.dsl.program import GraphProgram
        return GraphProgram(self, inputs)

    def with_policy(self, policy: Policy | None) -> "CompiledGraph":
        """The same program with another policy (re-validated)."""
        return compile_graph(self.graph, policy, name=self.name)

    def draw(self):
        """Mermaid text of the graph (renders in Jupyter)."""
        from certa.dsl.drawing import mermaid
        return mermaid(self)

    def _repr_markdown_(self) -> str:
        return self.draw()._repr_markdown_()

    @property
    def knob(self):
        return self.graph.knob


def _starts(g: Graph) -> bool:
    """Whether the graph starts from ``START`` edges or branches instead of an entry step."""
    return any(src == START for src, _ in g.edges) or any(b.source == START for b in g.branches)


def _step_graph(g: Graph) -> nx.DiGraph:
    names = list(g.steps)
    dg = nx.DiGraph()
    dg.add_nodes_from([START, END, *names])
    entry = g.entry_step or (names[0] if names else None)
    if _starts(g):
        if g.entry_step is not None:
            raise InvalidGraphError(f"entry step {g.entry_step!r} and edges or branches from START both say where "
                                    f"to start", program=g.name, step=g.entry_step, hint="keep one of them")
    elif entry is not None:
        dg.add_edge(START, entry)
    for src, dst in g.edges:
        for n in (src, dst):
            if n not in g.steps and n != END and not (n == START and n == src):
                raise UnknownStepError(f"edge {src!r} -> {dst!r} names unknown step {n!r}", program=g.name,
                                       step=n, hint=_suggest(n, names))
        dg.add_edge(src, dst)
    for b in g.branches:
        if b.source not in g.steps and b.source != START:
            raise UnknownStepError(f"branch from unknown step {b.source!r}", program=g.name, step=b.source,
                                   hint=_suggest(b.source, names))
        for d in b.destinations if b.destinations is not None else names + [END]:
            if d not in g.steps and d != END:
                raise UnknownStepError(f"branch from {b.source!r} may go to unknown step {d!r}", program=g.name,
                                       step=d, hint=_suggest(d, names))
            dg.add_edge(b.source, d)
    for after, step in g.joins:
        for n in (after, step):
            if n not in g.steps:
                raise UnknownStepError(f"join {step!r} after {after!r} names unknown step {n!r}", program=g.name,
                                       step=n, hint=_suggest(n, names))
        dg.add_edge(after, step)
    for n in names:
        if dg.out_degree(n) == 0:
            dg.add_edge(n, END)
    return dg


def _fans_out(g: Graph, name: str) -> bool:
    """Whether entering ``name`` can launch several branches: ``fanout`` > 1 or a router that may
    ``Send`` to it (hinted to return ``Send``s, or given ``max_fanout=``)."""
    s = g.steps[name]
    return callable(s.fanout) or s.fanout > 1 or any(
        (b.sends or b.max_fanout is not None) and (b.destinations is None or name in b.destinations)
        for b in g.branches)


def _per_branch(g: Graph, name: str, join: str) -> set[str]:
    """Steps entered after a branch of ``name`` or its joins (edges, hinted routers, joins other
    than ``join``); an unhinted router is not followed (CT112 warns that it is not checked)."""
    out = {d for s, d in g.edges if s == name} | {j for a, j in g.joins if a == name and j != join}
    for b in g.branches:
        if b.source == name and b.destinations is not None:
            out.update(b.destinations)
    out.discard(END)
    return out


def _lane_steps(g: Graph, after: str, join: str) -> dict[str, str]:
    """The later steps of the lanes of a fan-out of ``after`` (the join waits for them all):
    each mapped to a step it is entered after."""
    seen: dict[str, str] = {}
    todo = [after]
    while todo:
        n = todo.pop()
        for d in sorted(_per_branch(g, n, join)):
            if d not in seen and d in g.steps:
                seen[d] = n
                todo.append(d)
    return seen


def _check_joins(g: Graph, entry: str | None) -> None:
    """CT109/CT110: each join waits on a fan-out, once, and is not also entered per branch
    (after ``after`` or any later step of its lanes), and the lanes do not re-enter ``after``."""
    seen: dict[str, str] = {}
    for after, step in g.joins:
        if step == after or step == entry:
            what = "its own fan-out" if step == after else "the entry step"
            raise InvalidJoinError(f"join {step!r} after {after!r}: a join cannot be {what}",
                                   program=g.name, step=step, hint="join a later step after the fan-out step")
        if step in seen:
            raise InvalidJoinError(f"step {step!r} joins both {seen[step]!r} and {after!r}", program=g.name,
                                   step=step, hint="one join step per fan-out")
        seen[step] = after
        if not _fans_out(g, after):
            lanes_of = [f for f in g.steps if f != after and _fans_out(g, f) and after in _lane_steps(g, f, step)]
            hint = (f"{after!r} runs in the lanes of {lanes_of[0]!r}: join after={lanes_of[0]!r} waits for every "
                    f"later step of its lanes" if lanes_of else f"give {after!r} fanout=n, Send to it, or use edge()")
            raise JoinWithoutFanoutError(f"join {step!r} waits on {after!r}, which never fans out", program=g.name,
                                         step=after, hint=hint)
        lanes = _lane_steps(g, after, step)
        if step in lanes:
            src = lanes[step]
            raise InvalidJoinError(f"{step!r} joins {after!r} but is also entered after each {src!r} branch",
                                   program=g.name, step=step, hint=f"drop the edge or route from {src!r} to {step!r}")
        back = sorted(n for n in lanes if n != after and after in _per_branch(g, n, step))
        if back:
            raise InvalidJoinError(f"join {step!r} after {after!r}: a lane goes back to {after!r} from {back[0]!r}, "
                                   f"so the fan-out it waits on keeps growing", program=g.name, step=back[0],
                                   hint=f"loop {after!r} itself (g.loop), or route back from the join step")


def _warn(g: Graph) -> None:
    """CT111/CT112: compiles, but probably not what was meant."""
    if g.answer_fn is None and "answer" not in g.state.model_fields:
        warnings.warn(MissingAnswerWarning("no @answer and no 'answer' state field: Result.answer is always None",
                                           program=g.name, hint="declare one with @graph.answer"), stacklevel=4)
    for b in g.branches:
        if b.destinations is None:
            name = getattr(b.router, "__name__", "router")
            warnings.warn(UnhintedRouterWarning(
                f"router {name!r} after {b.source!r} has no destination hint: compile assumes any step or END",
                program=g.name, step=b.source, hint="annotate it -> Literal['a', 'b'] or pass destinations=[...]"),
                stacklevel=4)


def _knob_step(g: Graph, dg: nx.DiGraph) -> str | None:
    explicit = [s.name for s in g.steps.values() if s.knob]
    if g.knob.step is not None:
        if g.knob.step not in g.steps:
            raise UnknownStepError(f"knob counts unknown step {g.knob.step!r}", program=g.name, step=g.knob.step,
                                   hint=_suggest(g.knob.step, list(g.steps)))
        return g.knob.step
    if len(explicit) > 1:
        raise InvalidGraphError(f"several steps marked knob=True: {explicit}", program=g.name, step=explicit[1])
    if explicit:
        return explicit[0]
    looped = {n for cyc in nx.simple_cycles(dg) for n in cyc}
    fanned = {s.name for s in g.steps.values() if not isinstance(s.fanout, int) or s.fanout > 1}
    candidates = sorted((looped | fanned) & set(g.steps))
    if len(candidates) == 1:
        return candidates[0]
    if g.knob.unit != "tokens" and g.knob.cap is not None and candidates:
        raise InvalidGraphError(f"cannot tell which step the knob counts among {candidates}", program=g.name,
                                step=candidates[0], hint="mark one with @graph.step(knob=True)")
    return None


def _feeds_knob(g: Graph, knob_step: str | None) -> frozenset[str]:
    """When the knob step is a join (one unit = one round: a fan-out and the join closing it),
    the round's steps before the join: the fan-out step and its lanes' later steps. None of
    them starts once the cap is spent, since their round could never be closed and counted."""
    after = next((a for a, join in g.joins if join == knob_step), None)
    if after is None or g.knob.cap is None:
        return frozenset()
    return frozenset({after, *_lane_steps(g, after, knob_step)} - {knob_step})


def _check_writes(g: Graph) -> None:
    fields = set(g.state.model_fields)
    for s in g.steps.values():
        keys = s.writes
        if keys is None:
            try:
                ret = typing.get_type_hints(s.fn).get("return")
            except Exception:  # noqa: BLE001 - unresolvable hints: nothing to check statically
                ret = None
            if ret is not None and typing.is_typeddict(ret):
                keys = tuple(ret.__annotations__)
        for k in keys or ():
            if k not in fields:
                raise UnknownStateKeyError(f"step writes {k!r}, which {g.state.__name__} has no field for",
                                           program=g.name, step=s.name, hint=f"state fields: {', '.join(sorted(fields))}")


def compile_graph(g: Graph, policy: Policy | None, *, name: str | None = None) -> CompiledGraph:
    """Validate ``g`` and return a :class:`CompiledGraph` (see module docstring for the checks)."""
    if not g.steps:
        raise InvalidGraphError("the graph has no steps", program=g.name, hint="declare one with @graph.step")
    if g.entry_step is not None and g.entry_step not in g.steps:
        raise UnknownStepError(f"entry step {g.entry_step!r} does not exist", program=g.name, step=g.entry_step,
                               hint=_suggest(g.entry_step, list(g.steps)))
    g = g.snapshot()  # validate and run one frozen copy: later edits to the Graph change neither
    dg = _step_graph(g)
    _check_joins(g, None if _starts(g) else (g.entry_step or next(iter(g.steps))))
    reachable = nx.descendants(dg, START)
    for n in g.steps:
        if n not in reachable:
            waits = [a for a, j in g.joins if j == n]
            why = f" (it joins {waits[0]!r}, which nothing reaches)" if waits else ""
            raise UnreachableStepError(f"no path from the entry reaches step {n!r}{why}", program=g.name, step=n,
                                       hint="add an edge to it or remove it")
    knob_step = _knob_step(g, dg)
    capped = g.knob.cap is not None
    cd_stop = bool(g.signals) and policy is not None and policy.requires_certaindex
    for cycle in nx.simple_cycles(dg):
        bounded = (capped and (g.knob.unit == "tokens" or knob_step in cycle)) or cd_stop or any(
            g.steps[n].max_visits is not None for n in cycle)
        if not bounded:
            raise UnboundedLoopError(f"loop {' -> '.join([*cycle, cycle[0]])} has no knob cap, max_visits or "
                                     f"certaindex stop", program=g.name, step=cycle[0],
                                     hint="give the Graph a Knob with a cap, or a certaindex and a Threshold policy")
    for s in g.steps.values():
        if isinstance(s.fanout, bool) or (isinstance(s.fanout, int) and s.fanout < 1):
            raise InvalidGraphError(f"fanout must be a positive int or a callable, got {s.fanout!r}",
                                    program=g.name, step=s.name)
        if callable(s.fanout) and s.max_fanout is None:
            raise UnboundedFanoutError("dynamic fanout has no bound", program=g.name, step=s.name,
                                       hint="pass max_fanout=N to @graph.step")
        if s.elastic and ((s.name, s.name) not in g.edges or s.fanout == 1):
            raise InvalidGraphError("elastic=True widens the lanes of a looped fan-out step; this one "
                                    + ("does not loop" if (s.name, s.name) not in g.edges else "has fanout=1"),
                                    program=g.name, step=s.name, hint=f"give it fanout > 1 and graph.loop({s.name!r}), or drop elastic")
    for b in g.branches:
        if b.sends and b.max_fanout is None:
            targets = b.destinations or ()
            if not (capped and targets and all(t == knob_step for t in targets)):
                raise UnboundedFanoutError(f"router after {b.source!r} returns Send fan-out with no bound",
                                           program=g.name, step=b.source, hint="pass max_fanout=N to graph.branch")
    if policy is not None and policy.requires_certaindex and not g.signals:
        raise MissingCertaindexError(f"policy {policy!r} needs a certaindex but the graph declares none",
                                     program=g.name, hint="add a @graph.certaindex function")
    tau = getattr(policy, "tau", None)
    if isinstance(tau, dict):
        names = {s.name for s in g.signals}
        for sig in tau:
            if sig not in names:
                raise MissingCertaindexError(f"policy thresholds signal {sig!r}, which the graph lacks",
                                             program=g.name, step=sig, hint=f"signals: {sorted(names)}")
    _check_writes(g)
    _warn(g)
    return CompiledGraph(g, policy, name or g.name, knob_step, reducers_of(g.state), _feeds_knob(g, knob_step))

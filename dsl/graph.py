"""Graph: declare a reasoning program as ``@step`` functions, edges and ``@certaindex`` signals.

Example (Self-Consistency in a few lines; runs on the scripted fake backend):
    >>> import certa as ct
    >>> class SC(ct.State):
    ...     question: str
    ...     answers: ct.Appended[list[str]] = []
    >>> sc = ct.Graph(SC, knob=ct.Knob("branches", cap=8), name="sc")
    >>> @sc.step(fanout=4)
    ... async def sample(s: SC, ctx: ct.Context):
    ...     out = await ctx.gen(s.question, temperature=0.7)
    ...     return {"answers": [out.text]}
    >>> @sc.certaindex
    ... def agreement(s: SC) -> float:
    ...     return 1.0 if len(set(s.answers)) == 1 and len(s.answers) > 1 else 0.0
    >>> @sc.answer
    ... def first(s: SC):
    ...     return s.answers[0] if s.answers else None
    >>> _ = sc.loop("sample")
    >>> program = sc.compile(policy=ct.Threshold(0.9, detect_at=4))
    >>> ct.Runtime(backend=ct.ScriptedBackend(responses=["42"])).run_sync(program, question="q").exit_reason
    'certaindex'
"""


import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, overload

from pydantic import BaseModel

from certa.dsl.errors import InvalidGraphError
from certa.runtime.policy import Policy
from certa.runtime.types import Knob

END = "__end__"
START = "__start__"


@dataclass(frozen=True, slots=True)
class Send:
    """Run ``step`` once more with ``payload`` (dynamic fan-out from a router)."""

    step: str
    payload: Any = None


@dataclass(slots=True)
class StepSpec:
    """A declared step. ``fanout``: branches launched when the step is entered."""

    name: str
    fn: Callable[..., Any]
    is_async: bool
    takes_ctx: bool
    fanout: int | Callable[[Any], int] = 1
    max_fanout: int | None = None
    knob: bool = False
    writes: tuple[str, ...] | None = None
    max_visits: int | None = None
    elastic: bool = False


@dataclass(slots=True)
class BranchSpec:
    """A conditional edge: ``router(state)`` (or ``router(state, ctx)``, ``takes_ctx``: the
    finished branch's context) picks successors (names, ``Send``s or ``END``)."""

    source: str
    router: Callable[..., Any]
    destinations: tuple[str, ...] | None
    max_fanout: int | None
    sends: bool
    takes_ctx: bool = False


@dataclass(slots=True)
class SignalSpec:
    name: str
    fn: Callable[[Any], float]


@dataclass
class Graph:
    """A reasoning program under construction. See the module docstring for an example.

    Args:
        state: the pydantic state class (subclass :class:`certa.State`).
        knob: the resource the program spends and its cap.
        name: shown in program ids, errors and drawings.
    """

    state: type[BaseModel]
    knob: Knob = field(default_factory=lambda: Knob("iterations", cap=None))
    name: str = ""
    steps: dict[str, StepSpec] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)
    branches: list[BranchSpec] = field(default_factory=list)
    signals: list[SignalSpec] = field(default_factory=list)
    entry_step: str | None = None
    answer_fn: Callable[[Any], Any] | None = None
    joins: list[tuple[str, str]] = field(default_factory=list)  # (after, join step)
    sealed: bool = field(default=False, repr=False, compare=False)  # a compiled snapshot: read-only

    def __post_init__(self) -> None:
        if not (isinstance(self.state, type) and issubclass(self.state, BaseModel)):
            raise InvalidGraphError(f"Graph state must be a pydantic model class (subclass certa.State), got {self.state!r}",
                                    program=self.name or None)
        self.name = self.name or self.state.__name__.lower()

    def _open(self, what: str) -> None:
        if self.sealed:
            raise InvalidGraphError(f"cannot {what}: this is the read-only snapshot a CompiledGraph runs",
                                    program=self.name, hint="change the original Graph and compile it again")

    def snapshot(self) -> "Graph":
        """A sealed copy: what ``compile()`` validated is what runs, whatever is added to ``self`` later."""
        return Graph(self.state, dataclasses.replace(self.knob), self.name,
                     {n: dataclasses.replace(s) for n, s in self.steps.items()}, list(self.edges),
                     [dataclasses.replace(b) for b in self.branches], list(self.signals), self.entry_step,
                     self.answer_fn, list(self.joins), sealed=True)

    # ---- steps ----------------------------------------------------------------------
    @overload
    def step(self, fn: Callable[..., Any], /) -> Callable[..., Any]: ...
    @overload
    def step(self, *, name: str | None = None, fanout: int | Callable[[Any], int] = 1, max_fanout: int | None = None,
             knob: bool = False, writes: list[str] | None = None, max_visits: int | None = None,
             entry: bool = False, elastic: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...

    def step(self, fn=None, /, *, name=None, fanout=1, max_fanout=None, knob=False, writes=None, max_visits=None,
             entry=False, elastic=False):
        """Declare a step ``(state, ctx) -> update dict`` (async or sync; ``ctx`` optional).

        ``fanout=n`` launches n parallel branches each time the step is entered;
        ``knob=True`` marks the knob step: its finished branches are the knob's units, and
        the cap bounds how many start (docs/concepts.md, "Knob"). ``elastic=True`` (a looped
        fan-out step, ``g.loop``): when one of its lanes continues and the scheduler reports
        idle capacity with nobody waiting (:meth:`~certa.runtime.scheduling.scheduler.Scheduler.spare`),
        up to ``fanout`` more lanes start beside it, as far as the policy expects the program to
        still use them, and a lane started that way ends instead of continuing once the capacity
        is wanted (the knob cap still bounds every launch).
        """
        self._open("add a step")

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            step_name = name or f.__name__
            if step_name in self.steps or step_name in (START, END):
                raise InvalidGraphError(f"step {step_name!r} is declared twice or uses a reserved name",
                                        program=self.name, step=step_name)
            n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                    for p in inspect.signature(f).parameters.values())
            if not 1 <= n <= 2:
                raise InvalidGraphError("a step takes (state) or (state, ctx)", program=self.name, step=step_name)
            self.steps[step_name] = StepSpec(step_name, f, inspect.iscoroutinefunction(f), n == 2, fanout,
                                             max_fanout, knob, tuple(writes) if writes is not None else None,
                                             max_visits, elastic)
            if entry:
                self.entry_step = step_name
            return f
        return register(fn) if fn is not None else register

    # ---- edges ----------------------------------------------------------------------
    def edge(self, source: str, dest: str) -> "Graph":
        """Always go from ``source`` to ``dest`` when a ``source`` branch finishes."""
        self._open("add an edge")
        self.edges.append((source, dest))
        return self

    def sequence(self, *names: str) -> "Graph":
        """Chain steps: ``sequence("a", "b", "c")`` adds a→b and b→c."""
        for a, b in zip(names, names[1:]):
            self.edge(a, b)
        return self

    def loop(self, step: str) -> "Graph":
        """Re-run ``step`` after each of its branches finishes (bounded by knob cap and certaindex)."""
        return self.edge(step, step)

    def branch(self, source: str, router: Callable[..., Any], *, destinations: list[str] | None = None,
               max_fanout: int | None = None) -> "Graph":
        """Conditional edge: after ``source``, ``router(state)`` returns a step name, ``END``,
        a ``Send`` or a list of them. Destinations come from ``destinations`` or from the
        router's ``Literal[...]`` return hint (neither: a CT112 warning at compile); a router that
        returns ``Send``s needs ``max_fanout`` unless its targets are bounded by the knob cap.
        ``source`` may be ``START``: the router then picks (or ``Send``s) the first steps.
        A router taking two arguments, ``router(state, ctx)``, also gets the context of the
        branch that finished (``ctx.payload``, ``ctx.branch``, ``ctx.lane``, ``ctx.step``), so it can
        hand each next branch its own input (``Send(step, payload)``).
        """
        self._open("add a branch")
        from certa.dsl.hints import router_destinations
        dests, sends = router_destinations(router)
        if destinations is not None:
            dests = tuple(destinations)
        self.branches.append(BranchSpec(source, router, dests, max_fanout, sends, _positional(router) == 2))
        return self

    def join(self, step: str, *, after: str) -> "Graph":
        """Fan-in: enter ``step`` once, after every branch launched by one fan-out of ``after``
        (its ``fanout=n`` branches, or the ``Send``s of one router call, with the loop lanes
        they continue and every later step those lanes enter: fan-out -> a -> b -> join) has
        finished and merged its update. The default stays per branch:
        ``edge(after, x)`` enters ``x`` as each branch finishes; only a join waits.

        Example (``total`` runs once, on the merged update of all three branches):
            >>> import certa as ct
            >>> class F(ct.State):
            ...     xs: ct.Appended[list[int]] = []
            ...     answer: int = 0
            >>> g = ct.Graph(F, name="fan_in")
            >>> @g.step(fanout=3)
            ... def work(s, ctx): return {"xs": [ctx.branch]}
            >>> @g.step
            ... def total(s): return {"answer": sum(s.xs)}
            >>> program = g.join("total", after="work").compile()
            >>> ct.Runtime(ct.ScriptedBackend()).run_sync(program).answer
            3
        """
        self._open("add a join")
        self.joins.append((after, step))
        return self

    def entry(self, step: str) -> "Graph":
        """The step the program starts with (default: the first step declared)."""
        self._open("set the entry step")
        self.entry_step = step
        return self

    # ---- signals and answer ---------------------------------------------------------
    def certaindex(self, fn: Callable[[Any], float] | None = None, /, *, name: str | None = None):
        """Declare a certaindex ``(state) -> float in [0, 1]``. Several compose with AND."""
        self._open("add a certaindex")

        def register(f: Callable[[Any], float]) -> Callable[[Any], float]:
            self.signals.append(SignalSpec(name or f.__name__, f))
            return f
        return register(fn) if fn is not None else register

    def answer(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Declare how the final answer is read from the state."""
        self._open("set the answer")
        self.answer_fn = fn
        return fn

    # ---- lowering -------------------------------------------------------------------
    def compile(self, policy: Policy | None = None, *, name: str | None = None):
        """Validate the graph and lower it to a program factory (:class:`CompiledGraph`).

        Raises a :class:`certa.dsl.errors.CompileError` subclass naming the step on any
        structural problem (codes CT101–CT110, see docs/errors.md), and warns
        (:class:`certa.dsl.errors.CompileWarning`: CT111 no answer, CT112 unhinted router). The compiled program runs a
        sealed snapshot of this graph: steps or edges added afterwards do not change it.
        """
        from certa.dsl.compiler import compile_graph
        return compile_graph(self, policy, name=name)


def _positional(fn: Callable[..., Any]) -> int:
    """How many positional parameters without a default a router has: 2 is ``(state, ctx)``
    (``lambda s, n=n: ...``, a captured default, still takes the state alone)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: called with the state alone
        return 1
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)

"""A graph program's checkpoints and interrupts: what is saved after each step, and how it resumes.

A compiled graph runs per branch (``certa.dsl.program``): each ``execute()`` merges ONE
finished branch. Its checkpoint, saved by the runtime after that ``execute()``
(``certa.runtime.threads``), is:

- the state (pydantic JSON) with every completed branch's update merged through the reducers;
- the knob spent, the tokens, the certaindex trajectory (the runtime's part);
- the *pending* branches: every branch launched and not yet finished — in flight, or held by
  an interrupt — as ``(branch id, step, Send payload)``; on resume each is started again from
  its beginning (a step is the unit of durability: the requests of a branch that had not
  finished are sent again, those of finished branches never are);
- the bookkeeping that makes the rest of the run the same as without the crash: launches per
  step (knob cap, ``max_visits``), the branch / fan-out / join-group counters, the fan-out
  lanes (CT108 checks, loop lanes) and join groups still waiting, nested ones with the group
  they run in (a join enters once its last pending branch finishes, before or after the crash).

Interrupts: ``interrupt_before=[step]`` holds a branch of ``step`` when it would start;
``interrupt_after=[step]`` holds the routing of a branch of ``step`` once its update is
merged (so an edit made during the pause steers its router). From the first hold on, the
program pauses: branches in flight finish and merge (nothing is thrown away) but start
nothing new — their routing is held too — and once none runs, ``execute()`` returns False
with ``program.interrupt = (step, "before" | "after")``. The resumed run starts the held
branches (past the interrupt that held them) and then routes the held branches in the order
they finished, with the state as edited.

In-step interrupts: ``ctx.interrupt(value)`` in a running step raises
:class:`~certa.runtime.checkpoint.StepInterrupt`; its branch is held (pending, to run again from
its beginning) with what it asked, and the program pauses the same way (``program.interrupt =
(step, "during")``). ``Command(resume=v)`` gives each asking branch its next answer; when the
branch runs again, its n-th ``ctx.interrupt`` returns its n-th answer, and one it has no answer
for pauses again. Asks and answers of pending branches are saved with the checkpoint.

Payloads of held or in-flight ``Send`` branches (and answers) are saved as JSON and come back
as JSON values (a tuple as a list, a model as a dict).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from certa.dsl.errors import UnknownStepError
from certa.dsl.state import apply_update
from certa.runtime.checkpoint import StepInterrupt
from certa.runtime.errors import CheckpointError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from certa.dsl.program import GraphProgram


class Held:
    """Interrupt bookkeeping of one graph program: which steps interrupt, what a pause holds."""

    __slots__ = ("before", "after", "idle", "pausing", "launches", "routes", "done_before", "threaded", "asks",
                 "answers", "asked")

    def __init__(self) -> None:
        self.before: frozenset[str] = frozenset()
        self.after: frozenset[str] = frozenset()
        self.idle = True  # no interrupt set: nothing is ever held (the per-branch fast path)
        self.pausing: tuple[str, str] | None = None  # the interrupt that started the pause
        self.launches: list[int] = []  # branches allocated but not started
        self.routes: list[tuple[str, int, Any]] = []  # branches merged but not routed (step, branch, payload)
        self.done_before = 0  # branches completed before the restored checkpoint
        self.threaded = False  # run on a thread (set_interrupts): only then may a step ctx.interrupt
        self.asks: dict[int, tuple[str, int, Any]] = {}  # branch -> (step, n-th interrupt, value) it paused on
        self.answers: dict[int, list[Any]] = {}  # branch -> its Command(resume=...) values, in order
        self.asked: dict[int, int] = {}  # branch -> ctx.interrupt calls in this run of its step

    def pause(self) -> tuple[str, str] | None:
        """The interrupt to report once nothing runs (None when nothing is held)."""
        return self.pausing if (self.launches or self.routes) else None


def hold_launch(prog: "GraphProgram", step: str, branch: int) -> bool:
    """Whether to hold the new branch ``branch`` of ``step`` (interrupt before it, or paused)."""
    held = prog.held
    if held.pausing is None and step in held.before:
        held.pausing = (step, "before")
    if held.pausing is None:
        return False
    held.launches.append(branch)
    return True


def hold_route(prog: "GraphProgram", step: str, branch: int, payload: Any) -> bool:
    """Whether to hold the routing of finished ``branch`` of ``step`` (interrupt after it, or paused)."""
    held = prog.held
    if held.pausing is None and step in held.after:
        held.pausing = (step, "after")
    if held.pausing is None:
        return False
    held.routes.append((step, branch, payload))
    return True


def ask(prog: "GraphProgram", step: str, branch: int, value: Any) -> Any:
    """``ctx.interrupt(value)`` in branch ``branch``: its answer if the thread was resumed with
    one for this call, else :class:`StepInterrupt` (the branch is then held by :func:`hold_ask`)."""
    held = prog.held
    if not held.threaded:
        raise ConfigError(f"ctx.interrupt in step {step!r} needs the program run on a thread, to resume it",
                          program=prog.program_id or prog.name, step=step, branch=branch,
                          hint="runtime.run(program, thread_id='t1', ...) with Runtime(checkpointer=...); "
                               "a ctx.call sub-program cannot pause")
    n = held.asked.get(branch, 0)
    held.asked[branch] = n + 1
    given = held.answers.get(branch, ())
    if n < len(given):
        return given[n]
    raise StepInterrupt(value, n)


def hold_ask(prog: "GraphProgram", step: str, branch: int, pending: tuple[str, Any], exc: StepInterrupt) -> None:
    """Branch ``branch`` of ``step`` paused in ``ctx.interrupt``: keep it pending (it runs again
    on resume) with what it asked, and pause the program (nothing new starts)."""
    held = prog.held
    prog.book.pending[branch] = pending
    held.asks[branch] = (step, exc.index, _payload(prog, step, branch, exc.value, "the value of ctx.interrupt"))
    held.asked.pop(branch, None)
    held.launches.append(branch)
    held.idle = False
    if held.pausing is None:
        held.pausing = (step, "during")


def resume_interrupts(prog: "GraphProgram", value: Any) -> None:
    """``Command(resume=value)``: the next answer of every branch paused in ``ctx.interrupt`` —
    ``value[id]`` when ``value`` is a dict keyed by their ids (``"step:branch:n"``), else ``value``."""
    held = prog.held
    if not held.asks:
        raise CheckpointError(f"program {prog.name!r} is not paused in ctx.interrupt: nothing to resume with a value",
                              program=prog.name, hint="run the thread without command=Command(resume=...)")
    ids = {f"{step}:{branch}:{n}": (branch, step) for branch, (step, n, _) in held.asks.items()}
    keyed = isinstance(value, dict) and bool(value) and set(value) <= set(ids)
    for key, (branch, step) in ids.items():
        if keyed and key not in value:
            continue  # not answered: it asks again
        answer = _payload(prog, step, branch, value[key] if keyed else value, "the Command's resume value")
        held.answers.setdefault(branch, []).append(answer)


def resume(prog: "GraphProgram") -> None:
    """First ``execute()`` after a restore: start every pending branch, then route the held ones."""
    held = prog.held
    routes = list(held.routes)
    held.launches, held.routes, held.pausing = [], [], None
    held.asks = {}  # asked again when their steps run again without an answer
    prog.interrupt = None
    steps = prog.compiled.graph.steps
    for branch in sorted(prog.book.pending):
        step, payload = prog.book.pending[branch]
        prog.start_branch(steps[step], branch, payload)
    for step, branch, payload in routes:
        prog.route_finished(step, branch, payload)


def set_interrupts(prog: "GraphProgram", before: Any, after: Any) -> None:
    """Interrupt before/after the named steps (CT101 for a name the graph has no step for)."""
    names = list(prog.compiled.graph.steps)
    for which, steps in (("interrupt_before", before), ("interrupt_after", after)):
        if isinstance(steps, str):
            raise ConfigError(f"{which} takes a list of step names, got the string {steps!r}",
                              program=prog.name, hint=f"{which}=[{steps!r}]")
        for s in steps or ():
            if s not in names:
                import difflib
                close = difflib.get_close_matches(s, names, n=1)
                raise UnknownStepError(f"{which} names unknown step {s!r}", program=prog.name, step=s,
                                       hint=f"did you mean {close[0]!r}?" if close else f"steps: {', '.join(names)}")
    held = prog.held
    held.before, held.after = frozenset(before or ()), frozenset(after or ())
    held.idle = not (held.before or held.after or held.asks)
    held.threaded = True  # only the thread runner sets interrupts: in-step interrupts may pause


def state_json(prog: "GraphProgram") -> str:
    try:
        return prog.state.model_dump_json()
    except Exception as exc:  # noqa: BLE001 - pydantic's serialization errors vary
        last = prog.history[-1] if prog.history else (None, None)
        raise CheckpointError(f"the state of program {prog.name!r} is not JSON-serializable: {exc}",
                              program=prog.program_id or prog.name, step=last[0], branch=last[1],
                              hint="checkpointed states need JSON-compatible field types") from None


def _payload(prog: "GraphProgram", step: str, branch: int, payload: Any,
             what: str = "the Send payload of a pending branch") -> Any:
    from pydantic_core import to_jsonable_python
    try:
        return to_jsonable_python(payload)
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"{what} is not JSON-serializable: {exc}",
                              program=prog.program_id or prog.name, step=step, branch=branch) from None


def snapshot(prog: "GraphProgram") -> dict[str, Any]:
    """The resume data of ``prog`` now (JSON-compatible); see the module docstring."""
    held, book = prog.held, prog.book
    return {
        "started": book.started,
        "completed": held.done_before + len(prog.history),
        "last": list(prog.history[-1]) if prog.history else None,
        "launches": dict(prog.launches),
        "counters": book.counters(),
        "lanes": [[b, f, i] for b, (f, i) in book.lanes.items()],
        "writers": [[f, key, i] for (f, key), i in book.writers.items()],
        "groups": [[g, step, n] for g, (step, n) in book.groups.items()],
        "group_of": [[b, g] for b, g in book.group_of.items()],
        "outer": [[g, o] for g, o in book.outer.items()],
        "pending": [[b, step, _payload(prog, step, b, payload)]
                    for b, (step, payload) in sorted(book.pending.items())],
        "routes": [[step, b, _payload(prog, step, b, payload)] for step, b, payload in held.routes],
        "asks": [[b, step, n, value] for b, (step, n, value) in sorted(held.asks.items())],
        "answers": [[b, values] for b, values in sorted(held.answers.items()) if b in book.pending],
        "interrupt": list(prog.interrupt) if prog.interrupt else None,
        "next": sorted({step for step, _ in book.pending.values()}),
    }


def restore(prog: "GraphProgram", state: str, data: dict[str, Any]) -> None:
    """Put a fresh ``prog`` (same graph, same inputs) back where :func:`snapshot` left one."""
    try:
        prog.state = type(prog.state).model_validate_json(state)
    except ValidationError as exc:
        raise CheckpointError(f"the saved state does not fit program {prog.name!r}'s state model: "
                              f"{exc.errors()[0]['msg']}", program=prog.name) from None
    steps = prog.compiled.graph.steps
    for _, step, _ in data["pending"]:
        if step not in steps:
            raise CheckpointError(f"the checkpoint has a pending branch of step {step!r}, which program "
                                  f"{prog.name!r} no longer has", program=prog.name, step=step)
    prog.launches = Counter(data["launches"])
    prog.book.restore(data)
    prog.held.routes = [(r[0], r[1], r[2] if len(r) > 2 else None) for r in data["routes"]]
    prog.held.asks = {b: (step, n, value) for b, step, n, value in data.get("asks", [])}
    prog.held.answers = {b: list(values) for b, values in data.get("answers", [])}
    prog.held.done_before = int(data["completed"])
    prog.interrupt = tuple(data["interrupt"]) if data.get("interrupt") else None  # type: ignore[assignment]


def edit_state(prog: "GraphProgram", values: dict[str, Any], *, overwrite: bool = False) -> None:
    """A human edit, validated like a step's update (CT106 unknown key, CT113 wrong type);
    merged through the reducers, or with ``overwrite`` set as given."""
    if not isinstance(values, dict):
        raise ConfigError(f"update_state takes a dict of state updates, got {type(values).__name__}",
                          program=prog.name)
    apply_update(prog.state, values, {} if overwrite else prog.compiled.reducers,
                 program=prog.program_id or prog.name, step="update_state")


__all__ = ["Held", "ask", "edit_state", "hold_ask", "hold_launch", "hold_route", "restore", "resume",
           "resume_interrupts", "set_interrupts", "snapshot", "state_json"]

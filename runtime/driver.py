"""The driving loop: how every Program runs, live or replayed — the one copy of it.

:func:`drive` runs a :class:`~certa.runtime.program.Program` to its exit on a ``ctx``:
the knob cap (``program.cap_reached()``), ``execute`` one step, certaindex update (:func:`record_certaindex`:
range check, the AND of the signals, a trajectory point), ``policy.decide``. It returns the
exit reason (``"cap"``, ``"done"`` or the policy's reason). :class:`~certa.runtime.Runtime`
drives with a :class:`~certa.runtime.context.Context` and passes its scheduler and event
bookkeeping as ``on_certaindex``; trace replay drives with a context that never suspends
and runs the same coroutine without an event loop (:func:`run_unsuspended`).

Example:
    >>> from certa.runtime import Program, Knob, Threshold
    >>> class Count(Program):
    ...     knob = Knob("iterations", cap=8)
    ...     policy = Threshold(0.5, detect_at=1, every=1)
    ...     async def execute(self, ctx):
    ...         self.knob_used += 1
    ...         return True
    ...     def update_certaindex(self):
    ...         return self.knob_used / 4
    >>> prog = Count()
    >>> run_unsuspended(drive(prog, None)), [p.value for p in prog.trajectory]
    ('certaindex', [0.25, 0.5])
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from certa.runtime.errors import CertaindexRangeError, StepLimitError
from certa.runtime.policy import ExitReason
from certa.runtime.program import Program
from certa.runtime.types import CertaindexPoint

__all__ = ["drive", "record_certaindex", "run_unsuspended"]


async def drive(program: Program, ctx: Any, *,
                on_certaindex: Callable[[CertaindexPoint], None] | None = None,
                max_steps: int | None = None, on_step: Callable[[], None] | None = None) -> ExitReason:
    """Run ``program`` on ``ctx`` until it exits; returns the exit reason.

    ``on_certaindex(point)`` is called after each step that measured a certaindex, once the
    point is on ``program.trajectory`` and before the policy decides. ``max_steps``: more
    ``execute()`` calls than this raise :class:`~certa.runtime.errors.StepLimitError`.
    ``on_step()`` is called after each step the loop continues past (its certaindex recorded,
    the policy asked): where a checkpointed run saves the step (``certa.runtime.threads``).
    """
    policy = program.policy
    steps = 0
    while True:
        if program.cap_reached():
            return "cap"
        if max_steps is not None and steps >= max_steps:
            raise _step_limit(program, max_steps)
        steps += 1
        more = await program.execute(ctx)
        point = record_certaindex(program)
        if point is not None and on_certaindex is not None:
            on_certaindex(point)
        if policy is not None:
            decision = policy.decide(program)
            if decision.stop:
                return decision.reason
        if not more:
            return "cap" if program.hit_cap else "done"
        if on_step is not None:
            on_step()


def _step_limit(program: Program, limit: int) -> StepLimitError:
    history = getattr(program, "history", None)  # a graph's (step, branch) log names the looping step
    last = history[-1][0] if isinstance(history, list) and history and isinstance(history[-1], tuple) else None
    return StepLimitError(f"ran {limit} steps without exiting" + (f" (last step {last!r})" if last else ""),
                          program=program.program_id, step=last,
                          hint="bound the loop with a knob cap or max_visits, or raise RuntimeLimits.max_steps")


def record_certaindex(program: Program) -> CertaindexPoint | None:
    """Ask ``program`` for its certaindex; record and return the point (None if it measured none).

    A dict of signals combines by AND (their minimum; an empty dict is 0). Every value must
    lie in [0, 1], else :class:`~certa.runtime.errors.CertaindexRangeError` names the signal.
    """
    value = program.update_certaindex()
    if value is None:
        return None
    if isinstance(value, dict):
        signals, combined = value, (min(value.values()) if value else 0.0)
    else:
        signals, combined = {"certaindex": value}, value
    for name, v in signals.items():
        if not 0.0 <= v <= 1.0:
            raise CertaindexRangeError(f"certaindex {name!r} returned {v}, outside [0, 1]",
                                       program=program.program_id, step=name)
    program.signals = signals
    point = CertaindexPoint(program.knob_value, combined, signals, program.tokens.total)
    program.trajectory.append(point)
    return point


def run_unsuspended(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (e.g. :func:`drive` on a replay context) to its value.

    No event loop: one ``send(None)``. A coroutine that does suspend is closed and refused
    with RuntimeError (it needs a real loop: use :class:`~certa.runtime.Runtime`).
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the coroutine suspended; run_unsuspended needs one that only awaits non-suspending calls")

"""Threads: what ``Runtime.run(..., thread_id=...)`` adds to a run — restore, save, pause.

A :class:`ThreadRun` opens the program of one checkpointed run: a new thread instantiates
it and saves the ``input`` checkpoint; a known thread instantiates it with the inputs it
started with and restores its newest checkpoint (a finished thread is not run again: its
result is rebuilt from the checkpoint). The driving loop then calls :meth:`ThreadRun.save`
after every step it continues past, and the Runtime calls :meth:`ThreadRun.finish` when the
program exits or pauses. A run that fails or is cancelled saves nothing more, so the thread
resumes from its last completed step.

The program side is duck-typed (the runtime layer knows no graph): a checkpointable program
has ``checkpoint_state() -> str`` (its state as JSON), ``checkpoint_data() -> dict`` (what it
needs to resume; with ``completed``, ``last``, ``next`` and ``interrupt`` keys),
``restore_checkpoint(state_json, data)``, ``set_interrupts(before, after)``,
``edit_state(values, overwrite=...)`` and an ``interrupt`` attribute (``(step, "before" |
"after" | "during")`` once paused); ``resume_interrupts(value)`` answers in-step interrupts
(``Command(resume=...)``). Compiled graphs (``certa.dsl``) are.

Interrupts given to a run (``interrupt_before``/``interrupt_after``) are saved in every row it
writes, so a run resumed after a crash keeps them without being given them again (given ones,
even ``[]``, replace them); a run that paused ended its call, and the next run on the thread
uses only the interrupts it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable

from certa.runtime.checkpoint import INTERRUPTED, RUNNING, Checkpoint, Checkpointer, Command, InterruptedResult
from certa.runtime.errors import CheckpointError, ConfigError
from certa.runtime.program import Program, instantiate
from certa.runtime.result import Result
from certa.runtime.types import CertaindexPoint, TokenUsage

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.runtime import Runtime

_HOOKS = ("checkpoint_state", "checkpoint_data", "restore_checkpoint", "set_interrupts", "edit_state")


def _jsonable(value: Any, what: str, thread_id: str) -> Any:
    from pydantic_core import to_jsonable_python
    try:
        return to_jsonable_python(value)
    except Exception as exc:  # noqa: BLE001 - any serialization failure is the same error
        raise CheckpointError(f"thread {thread_id!r}: {what} is not JSON-serializable: {exc}",
                              hint="checkpointed programs take JSON-compatible inputs") from None


def _name_of(program: Any) -> str:
    return getattr(program, "name", None) or getattr(program, "__name__", None) or type(program).__name__


class ThreadRun:
    """One ``Runtime.run`` on thread ``thread_id`` of ``runtime.checkpointer``."""

    def __init__(self, runtime: "Runtime", thread_id: str, interrupt_before: Iterable[str] | None = None,
                 interrupt_after: Iterable[str] | None = None, command: Command | None = None) -> None:
        saver = runtime.checkpointer
        if saver is None:
            raise ConfigError("thread_id, interrupts and commands need a checkpointer",
                              hint="Runtime(..., checkpointer=ct.MemoryCheckpointer()) or SqliteCheckpointer(path)")
        if thread_id is None:
            raise ConfigError("interrupt_before/interrupt_after/command need a thread_id (the paused run resumes on it)",
                              hint="runtime.run(program, thread_id='t1', interrupt_before=[...], ...)")
        if not isinstance(thread_id, str) or not thread_id:
            raise ConfigError(f"thread_id must be a non-empty string, got {thread_id!r}")
        if command is not None and not isinstance(command, Command):
            raise ConfigError(f"command must be a certa.Command, got {type(command).__name__}",
                              hint="command=ct.Command(resume=value)")
        self.runtime, self.saver, self.thread_id, self.command = runtime, saver, thread_id, command
        self.given = (interrupt_before, interrupt_after)  # None: not given (a crashed run's own are kept)
        self.before: tuple[str, ...] = tuple(interrupt_before or ())
        self.after: tuple[str, ...] = tuple(interrupt_after or ())
        self.latest: Checkpoint | None = None
        self._completed = 0  # steps completed when the newest row was saved

    # ---- claiming a thread: one run at a time in this process ------------------------
    def __enter__(self) -> "ThreadRun":
        running = self.saver.running
        if self.thread_id in running:
            raise CheckpointError(f"thread {self.thread_id!r} is already running",
                                  hint="wait for its run to end, or use another thread_id")
        running.add(self.thread_id)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.saver.running.discard(self.thread_id)

    @property
    def finished(self) -> bool:
        return self.latest is not None and self.latest.finished

    # ---- opening the program -----------------------------------------------------------
    def open(self, program: Any, inputs: dict[str, Any], instantiate: Callable[[Any, dict], Program]) -> Program:
        """The program to drive: new (``input`` checkpoint saved) or restored from the newest one."""
        latest = self.latest = self.saver.latest(self.thread_id)
        if latest is None:
            if self.command is not None:
                raise CheckpointError(f"thread {self.thread_id!r} has no checkpoint to resume with a Command",
                                      hint="start it with runtime.run(program, thread_id=..., **inputs) first")
            prog = instantiate(program, inputs)
            _check_hooks(prog, self.thread_id)
            prog.set_interrupts(self.before, self.after)
            self._put(prog, "input", status=RUNNING, inputs=_jsonable(inputs, "the inputs", self.thread_id))
            return prog
        if latest.program != _name_of(program):
            raise CheckpointError(f"thread {self.thread_id!r} runs program {latest.program!r}, not "
                                  f"{_name_of(program)!r}", hint="resume a thread with the program that started it")
        stored = latest.data.get("inputs", {})
        if inputs and _jsonable(inputs, "the inputs", self.thread_id) != stored:
            raise CheckpointError(f"thread {self.thread_id!r} was started with other inputs ({sorted(stored)})",
                                  program=latest.program, hint="resume with no inputs, or the same ones")
        prog = restore(program, latest, instantiate)
        self._keep_interrupts(latest)
        prog.set_interrupts(self.before, self.after)
        self._completed = latest.data.get("completed", 0)
        if self.command is not None:
            self._apply(prog, self.command)
        return prog

    def _keep_interrupts(self, latest: Checkpoint) -> None:
        """A run resumed after a crash (its newest row still ``running``) keeps the interrupts
        its run was given, unless this run gives its own; after a pause they are not kept."""
        saved = latest.data.get("interrupts")
        if latest.status != RUNNING or not saved:
            return
        before, after = self.given
        self.before = tuple(saved[0]) if before is None else self.before
        self.after = tuple(saved[1]) if after is None else self.after

    def _apply(self, prog: Program, command: Command) -> None:
        """``Command(update=..., resume=...)``: the edit (saved as an ``update`` row), then the
        values for the in-step interrupts the thread is paused on."""
        assert self.latest is not None
        if command.update is not None:
            prog.edit_state(command.update)
            self._put(prog, "update", status=self.latest.status)
        if command.resumes:
            answer = getattr(prog, "resume_interrupts", None)
            if not callable(answer):
                raise ConfigError(f"program {prog.display_name!r} has no in-step interrupts to resume")
            answer(command.resume)

    # ---- saving ------------------------------------------------------------------------
    def save(self, prog: Program) -> None:
        """After a step the driving loop continues past: one ``step`` row, status running."""
        self._put(prog, "step", status=RUNNING)

    def finish(self, prog: Program, reason: str) -> str:
        """The program exited with ``reason`` (or paused): save the final row; the exit reason."""
        if getattr(prog, "interrupt", None) is not None and reason in ("done", "cap"):
            reason = INTERRUPTED
        self._put(prog, "step", status=reason)
        return reason

    def result(self, result: Result, prog: Program) -> Result:
        """``result``, as an :class:`InterruptedResult` naming the interrupt for a paused program."""
        held = getattr(prog, "interrupt", None)
        if result.exit_reason != INTERRUPTED or held is None:
            return result
        assert self.latest is not None
        fields = {k: getattr(result, k) for k in result.__dataclass_fields__}
        return InterruptedResult(**fields, interrupt=self.latest.interrupt)

    def _put(self, prog: Program, source: str, *, status: str, inputs: Any = None) -> None:
        data = prog.checkpoint_data()
        completed = data.get("completed", 0)
        last = data.get("last") if source == "step" and completed > self._completed else None
        if inputs is not None:
            data["inputs"] = inputs
        elif self.latest is not None:
            data["inputs"] = self.latest.data.get("inputs", {})
        data["interrupts"] = [list(self.before), list(self.after)]  # survive a crash (_keep_interrupts)
        self.latest = make_checkpoint(prog, self.thread_id, 0 if self.latest is None else self.latest.index + 1,
                                      source, last, status, data)
        self.saver.put(self.latest)
        self._completed = completed


def make_checkpoint(prog: Program, thread_id: str, index: int, source: str, last: Any, status: str,
                    data: dict[str, Any]) -> Checkpoint:
    """A checkpoint of ``prog`` now: its state, the runtime's bookkeeping and its resume data."""
    data["base"] = {"trajectory": [[p.knob, p.value, p.signals, p.tokens] for p in prog.trajectory],
                    "signals": prog.signals, "policy_marks": _jsonable(prog.policy_marks, "policy marks", thread_id),
                    "hit_cap": prog.hit_cap}
    step, branch = (last[0], last[1]) if last else (None, None)
    return Checkpoint(thread_id, index, prog.display_name, source, step, branch, status,  # type: ignore[arg-type]
                      prog.checkpoint_state(), prog.knob_used, prog.tokens.as_dict(),
                      tuple(data.get("next", ())), data)


def restore(program: Any, cp: Checkpoint, instantiate: Callable[[Any, dict], Program]) -> Program:
    """A fresh instance of ``program`` put back in the state ``cp`` saved."""
    try:
        prog = instantiate(program, dict(cp.data.get("inputs", {})))
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - the program moved on since the thread started
        raise CheckpointError(f"thread {cp.thread_id!r}: cannot rebuild program {cp.program!r} from the inputs "
                              f"it started with: {exc}", program=cp.program) from exc
    _check_hooks(prog, cp.thread_id)
    prog.restore_checkpoint(cp.state_json, cp.data)
    base = cp.data.get("base", {})
    prog.knob_used = cp.knob_used
    tokens = TokenUsage()
    for k, v in cp.tokens.items():
        if k != "total":
            setattr(tokens, k, int(v))
    prog.tokens = tokens
    prog.trajectory = [CertaindexPoint(k, v, dict(s), t) for k, v, s, t in base.get("trajectory", [])]
    prog.signals = dict(base.get("signals", {}))
    prog.policy_marks = dict(base.get("policy_marks", {}))
    prog.hit_cap = bool(base.get("hit_cap", False))
    return prog


def _check_hooks(prog: Program, thread_id: str) -> None:
    missing = [h for h in _HOOKS if not callable(getattr(prog, h, None))]
    if missing:
        raise ConfigError(f"program {prog.display_name!r} cannot run on a thread (thread {thread_id!r}): "
                          f"it has no {', '.join(missing)}", hint="compiled graphs (certa.Graph) support checkpoints")


# ---- Runtime.update_state / state_history ----------------------------------------------
def update_state(runtime: "Runtime", thread_id: str, values: dict[str, Any], program: Any,
                 overwrite: bool) -> Checkpoint:
    """Apply a human edit to the thread's newest state and save it as an ``update`` checkpoint."""
    saver = runtime.checkpointer
    if saver is None:
        raise ConfigError("update_state needs a checkpointer", hint="Runtime(..., checkpointer=...)")
    if thread_id in saver.running:
        raise CheckpointError(f"thread {thread_id!r} is running; update its state once it is interrupted")
    latest = saver.latest(thread_id)
    if latest is None:
        raise CheckpointError(f"thread {thread_id!r} has no checkpoint to update", hint="run it first")
    if program is None:
        raise ConfigError(f"update_state on thread {thread_id!r} needs program= (no run of it in this Runtime)")
    prog = restore(program, latest, instantiate)
    prog.program_id = prog.program_id or f"{latest.program}@{thread_id}"
    prog.edit_state(values, overwrite=overwrite)
    data = prog.checkpoint_data()
    data["inputs"] = latest.data.get("inputs", {})
    if "interrupts" in latest.data:
        data["interrupts"] = latest.data["interrupts"]
    cp = make_checkpoint(prog, thread_id, latest.index + 1, "update", None, latest.status, data)
    saver.put(cp)
    return cp


__all__ = ["ThreadRun", "make_checkpoint", "restore", "update_state"]

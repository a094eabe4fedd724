"""Checkpoints: one saved snapshot per completed step of a program run on a thread.

A *thread* is one run of a program that survives its process: ``Runtime(checkpointer=...)``
plus ``runtime.run(program, thread_id="t1", **inputs)`` saves a :class:`Checkpoint` when the
run starts (``source="input"``), after every completed step of every branch
(``source="step"``) and when it exits or pauses; ``runtime.update_state`` adds one
(``source="update"``). Running the same ``thread_id`` again resumes from the newest one. What
a checkpoint holds is defined in ``docs/concepts.md`` ("Checkpoints and interrupts").

This module is the storage interface (:class:`Checkpointer`) and the in-memory store
(:class:`MemoryCheckpointer`); ``certa.runtime.checkpoint_sqlite`` has the SQLite one.
A store keeps rows of plain values (JSON text for the state and the resume data), so the
memory store round-trips exactly what SQLite does.

Example:
    >>> saver = MemoryCheckpointer()
    >>> saver.put(Checkpoint("t1", 0, "demo", "input", None, None, "running", '{"n":1}'))
    >>> saver.latest("t1").state, saver.latest("t1").finished
    ({'n': 1}, False)
"""

from __future__ import annotations

import abc
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from certa.runtime.errors import CheckpointError
from certa.runtime.result import Result, jsonable

RUNNING, INTERRUPTED = "running", "interrupted"
"""Checkpoint statuses of a thread that has not finished; any other status is its exit reason."""

COLUMNS = ("thread_id", "idx", "program", "source", "step", "branch", "status", "state", "knob_used", "tokens",
           "next", "data", "created")
"""A stored row's fields, in order (the SQLite table's columns)."""


@dataclass(frozen=True)
class Checkpoint:
    """One snapshot of a thread.

    Attributes:
        thread_id: the thread; ``index``: 0, 1, 2, ... in the order saved.
        program: the program's name (a thread resumes only the program that started it).
        source: ``"input"`` (the run started), ``"step"`` (a step's branch completed and
            merged its update; ``step``/``branch`` name it, or are None when none completed
            since the last row, e.g. a pause before the first step) or ``"update"``
            (``runtime.update_state``).
        status: ``"running"`` (resumable), ``"interrupted"`` (paused, resumable) or the exit
            reason of a finished run (``done``, ``cap``, ``certaindex``, ...).
        state_json: the state as pydantic JSON; :attr:`state` is it decoded.
        knob_used / tokens: the knob spent and the tokens used (``TokenUsage.as_dict()``) so far.
        next: the steps of the branches to run on resume (in flight or held by an interrupt).
        data: what the program needs to resume (its inputs, counters, pending branches; see
            ``certa.dsl.checkpointing`` for a graph's), JSON-compatible.
    """

    thread_id: str
    index: int
    program: str
    source: Literal["input", "step", "update"]
    step: str | None
    branch: int | None
    status: str
    state_json: str
    knob_used: int = 0
    tokens: dict[str, int] = field(default_factory=dict)
    next: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    @property
    def state(self) -> Any:
        """The state decoded from JSON (a dict for a pydantic state; ``Model.model_validate`` it)."""
        return json.loads(self.state_json)

    @property
    def finished(self) -> bool:
        """Whether the run exited (a rerun of the thread returns its result without running)."""
        return self.status not in (RUNNING, INTERRUPTED)

    @property
    def interrupt(self) -> "Interrupt | None":
        """Why the thread is paused (the interrupt that held it, and what in-step interrupts
        ask), or None."""
        held = self.data.get("interrupt")
        if self.status != INTERRUPTED or not held:
            return None
        asks = tuple(Ask(f"{step}:{branch}:{index}", step, branch, value)
                     for branch, step, index, value in self.data.get("asks", []))
        return Interrupt(self.thread_id, held[0], held[1], self.next, asks)

    def to_row(self) -> dict[str, Any]:
        """The stored form: plain values and JSON text, keyed by :data:`COLUMNS`."""
        try:
            return {"thread_id": self.thread_id, "idx": self.index, "program": self.program, "source": self.source,
                    "step": self.step, "branch": self.branch, "status": self.status, "state": self.state_json,
                    "knob_used": self.knob_used, "tokens": json.dumps(self.tokens), "next": json.dumps(list(self.next)),
                    "data": json.dumps(self.data, allow_nan=False), "created": self.created}
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {self.index} of thread {self.thread_id!r} is not JSON: {exc}",
                                  program=self.program, step=self.step, branch=self.branch) from None

    @classmethod
    def from_row(cls, row: Any) -> "Checkpoint":
        """Rebuild from :meth:`to_row`'s form (a dict or a sequence in :data:`COLUMNS` order)."""
        r = row if isinstance(row, dict) else dict(zip(COLUMNS, row))
        return cls(r["thread_id"], int(r["idx"]), r["program"], r["source"], r["step"],
                   None if r["branch"] is None else int(r["branch"]), r["status"], r["state"], int(r["knob_used"]),
                   json.loads(r["tokens"]), tuple(json.loads(r["next"])), json.loads(r["data"]), float(r["created"]))


@dataclass(frozen=True)
class Ask:
    """One in-step interrupt waiting for its value: ``ctx.interrupt(value)`` in branch ``branch``
    of ``step``; ``id`` (``"step:branch:n"``, its n-th interrupt) keys ``Command(resume={id: ...})``."""

    id: str
    step: str
    branch: int
    value: Any = None


@dataclass(frozen=True)
class Interrupt:
    """A paused thread: ``when`` (``"before"``/``"after"``/``"during"``) ``step`` held it;
    ``next``: the steps of the branches waiting to run; ``asks``: the in-step interrupts
    (``ctx.interrupt(value)``) waiting for a value, ``value`` the first one's. Resume with
    another ``runtime.run`` on ``thread_id`` (with ``command=Command(resume=...)`` for asks)."""

    thread_id: str
    step: str
    when: Literal["before", "after", "during"]
    next: tuple[str, ...] = ()
    asks: tuple[Ask, ...] = ()

    @property
    def value(self) -> Any:
        """What the first in-step interrupt asked (``ctx.interrupt(value)``), or None."""
        return self.asks[0].value if self.asks else None

    def __str__(self) -> str:
        what = f"thread {self.thread_id!r} interrupted {self.when} step {self.step!r}"
        return what + (f": {self.value!r:.80}" if self.asks else "")


_UNSET: Any = type("_Unset", (), {"__repr__": lambda self: "<unset>"})()


@dataclass(frozen=True)
class Command:
    """Resume a paused thread (LangGraph's ``Command``): ``runtime.run(program, thread_id=t,
    command=Command(resume=v))``. ``resume``: what each waiting ``ctx.interrupt(...)`` returns when
    its step runs again (a dict keyed by :attr:`Ask.id` gives each its own; any other value goes
    to all); ``update``: a state edit applied first, validated and merged like
    ``runtime.update_state`` (saved as an ``update`` checkpoint)."""

    resume: Any = _UNSET
    update: dict[str, Any] | None = None

    @property
    def resumes(self) -> bool:
        return self.resume is not _UNSET


class StepInterrupt(BaseException):
    """Raised by ``ctx.interrupt(value)`` to pause the running step until its thread is resumed
    with a value. A ``BaseException`` (as ``asyncio.CancelledError`` is) so that a step's
    ``except Exception`` does not swallow it; the graph catches it and pauses the program."""

    def __init__(self, value: Any, index: int) -> None:
        super().__init__(value)
        self.value, self.index = value, index


@dataclass
class InterruptedResult(Result):
    """What ``Runtime.run`` returns for a program an ``interrupt_before``/``interrupt_after``
    paused: ``exit_reason == "interrupted"``, ``state`` as it stands, ``interrupt`` says where."""

    interrupt: Interrupt | None = None

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.interrupt is not None:
            out["interrupt"] = {"thread_id": self.interrupt.thread_id, "step": self.interrupt.step,
                                "when": self.interrupt.when, "next": list(self.interrupt.next),
                                "asks": [{"id": a.id, "value": jsonable(a.value)} for a in self.interrupt.asks]}
        return out


class Checkpointer(abc.ABC):
    """Where a thread's checkpoints live. Implement :meth:`_insert`, :meth:`history`,
    :meth:`threads` and :meth:`delete`; ``put`` checks that indices follow each other.

    One process runs a thread at a time (``Runtime.run`` refuses a second run of a thread it is
    already running with CT220); two processes on one thread are refused at the first
    conflicting row (its index is taken).
    """

    @property
    def running(self) -> set[str]:
        """The thread ids this process is running on this store now (a run claims its thread:
        :class:`certa.runtime.threads.ThreadRun`)."""
        running = self.__dict__.get("_running_threads")
        if running is None:
            running = self.__dict__["_running_threads"] = set()
        return running

    def put(self, checkpoint: Checkpoint) -> None:
        """Store ``checkpoint``, whose index must be the thread's next (0 for a new thread)."""
        self._insert(checkpoint.to_row())

    @abc.abstractmethod
    def _insert(self, row: dict[str, Any]) -> None:
        """Store one row atomically; CheckpointError if ``row["idx"]`` is not the next index."""

    @abc.abstractmethod
    def history(self, thread_id: str, *, limit: int | None = None) -> list[Checkpoint]:
        """The thread's checkpoints, newest first (at most ``limit``); [] for an unknown thread."""

    def latest(self, thread_id: str) -> Checkpoint | None:
        """The thread's newest checkpoint, or None."""
        rows = self.history(thread_id, limit=1)
        return rows[0] if rows else None

    @abc.abstractmethod
    def threads(self) -> list[str]:
        """Every thread id with a checkpoint, sorted."""

    @abc.abstractmethod
    def delete(self, thread_id: str) -> None:
        """Forget a thread (its next run starts afresh)."""

    def close(self) -> None:
        """Release the store's resources."""


def next_index_error(thread_id: str, got: int, expected: int) -> CheckpointError:
    return CheckpointError(f"thread {thread_id!r}: checkpoint {got} out of order (the next is {expected}); "
                           "is another process running this thread?",
                           hint="run one thread in one process at a time")


class MemoryCheckpointer(Checkpointer):
    """Checkpoints in this process's memory (LangGraph's ``MemorySaver``): interrupts and
    ``update_state`` within one process; use ``SqliteCheckpointer`` to survive a crash."""

    def __init__(self) -> None:
        self._rows: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def _insert(self, row: dict[str, Any]) -> None:
        with self._lock:
            rows = self._rows.setdefault(row["thread_id"], [])
            if row["idx"] != len(rows):
                raise next_index_error(row["thread_id"], row["idx"], len(rows))
            rows.append(dict(row))

    def history(self, thread_id: str, *, limit: int | None = None) -> list[Checkpoint]:
        with self._lock:
            rows = list(reversed(self._rows.get(thread_id, [])))
        return [Checkpoint.from_row(r) for r in rows[:limit]]

    def threads(self) -> list[str]:
        with self._lock:
            return sorted(t for t, rows in self._rows.items() if rows)

    def delete(self, thread_id: str) -> None:
        with self._lock:
            self._rows.pop(thread_id, None)


__all__ = ["COLUMNS", "Ask", "Checkpoint", "Checkpointer", "Command", "INTERRUPTED", "Interrupt", "InterruptedResult",
           "MemoryCheckpointer", "RUNNING", "StepInterrupt"]

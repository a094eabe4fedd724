"""Run one program over a dataset: grading, a JSONL journal that survives kills, progress.

Each finished problem is appended to the journal and fsynced before the next is reported,
so ``--resume`` continues without duplicates or loss.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from certa.runtime.durable import append_synced, fsync_dir
from certa.runtime.errors import ConfigError
from certa.runtime.result import Result
from certa.runtime.runtime import Runtime


@dataclass
class BatchReport:
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.rows)

    @property
    def accuracy(self) -> float:
        graded = [r for r in self.rows if r.get("correct") is not None]
        return sum(bool(r["correct"]) for r in graded) / len(graded) if graded else float("nan")

    def tokens(self, kind: str = "total") -> int:
        return sum(r["tokens"][kind] for r in self.rows)

    @property
    def tokens_saved(self) -> int:
        return sum(r.get("tokens_saved", 0) for r in self.rows)

    def exit_reasons(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r["exit_reason"]] = out.get(r["exit_reason"], 0) + 1
        return out


class Journal:
    """Append-only JSONL of finished problems, flushed and fsynced per line.

    On ``resume`` a torn tail (a line cut short by a kill, or garbage after the last complete
    line) is cut off before appending, so the file stays valid JSONL; a bad line *followed* by
    good ones is corruption and raises ``ConfigError``.
    """

    def __init__(self, path: str | os.PathLike[str], *, resume: bool) -> None:
        self.path = pathlib.Path(path)
        self.done: dict[Any, dict[str, Any]] = {}
        if self.path.is_dir():
            raise ConfigError(f"journal {self.path} is a directory", hint="give a file path, e.g. run.jsonl")
        try:
            if self.path.exists():
                if not resume:
                    raise ConfigError(f"journal {self.path} already exists",
                                      hint="pass --resume to continue it, or remove it")
                self._load()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            self._fh = open(self.path, "a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot open journal {self.path}: {exc.strerror or exc}") from None
        if created:  # make the new file's directory entry durable too
            fsync_dir(self.path.parent)

    def check_program(self, identity: str) -> None:
        """Refuse to resume rows another program wrote (rows carry their program's identity)."""
        for key, row in self.done.items():
            other = row.get("program_identity")
            if other is not None and other != identity:
                raise ConfigError(f"journal {self.path} was written by another program ({other}; this is "
                                  f"{identity}), first at {key}",
                                  hint="resume with the program that wrote it, or start a new journal")

    def _load(self) -> None:
        data = self.path.read_bytes()
        good_end, bad_line = 0, None  # byte offset after the last good line; first bad line number
        pos = 0
        for n, raw in enumerate(data.splitlines(keepends=True), 1):
            pos += len(raw)
            if not raw.strip():
                if bad_line is None:
                    good_end = pos
                continue
            try:
                row = json.loads(raw) if raw.endswith(b"\n") else None
            except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deep
                row = None
            if not isinstance(row, dict) or "key" not in row:
                bad_line = bad_line or n
                continue
            if bad_line is not None:
                raise ConfigError(f"journal {self.path} line {bad_line} is not a journal row",
                                  hint="the journal is corrupt; move it aside and rerun")
            wrong = _wrong_field(row)
            if wrong:
                raise ConfigError(f"journal {self.path} line {n}: {wrong}",
                                  hint="the journal is corrupt or was edited; move it aside and rerun")
            self.done[row["key"]] = row
            good_end = pos
        if good_end < len(data):  # a torn tail from a kill: those problems rerun
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())

    def append(self, row: dict[str, Any]) -> None:
        append_synced(self._fh, row)
        self.done[row["key"]] = row

    def close(self) -> None:
        self._fh.close()


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "key": (str,), "dataset": (str,), "idx": (int, str), "correct": (bool, type(None)), "exit_reason": (str,),
    "tokens": (dict,), "tokens_saved": (int,), "program_identity": (str,)}


def _wrong_field(row: dict[str, Any]) -> str | None:
    """What is wrong with a journal row's field types, if anything (None: fine)."""
    for name, types in _FIELD_TYPES.items():
        if name in row and (not isinstance(row[name], types) or (isinstance(row[name], bool) and bool not in types)):
            return f"field {name!r} is {type(row[name]).__name__}, not {' or '.join(t.__name__ for t in types)}"
    tokens = row.get("tokens", {})
    for kind, n in tokens.items():
        if isinstance(n, bool) or not isinstance(n, int):
            return f"tokens[{kind!r}] is {type(n).__name__}, not int"
    return None


def program_identity(target: Any) -> str:
    """A short stable identity of what runs: name, steps (their code), policy and knob cap.

    >>> from certa.algorithms.programs.library import build
    >>> program_identity(build("sc")) == program_identity(build("sc")) != program_identity(build("sc", cap=4))
    True
    """
    import hashlib
    name = getattr(target, "name", None) or getattr(target, "__name__", type(target).__name__)
    parts: list[str] = [str(name)]
    graph = getattr(target, "graph", None)
    for step_name, spec in sorted((getattr(graph, "steps", None) or {}).items()):
        code = getattr(getattr(spec, "fn", None), "__code__", None)
        parts.append(f"{step_name}:{hashlib.sha256(code.co_code).hexdigest()[:12] if code else '?'}")
    policy = getattr(target, "policy", None)
    parts.append(json.dumps(policy.to_dict(), sort_keys=True, default=str) if hasattr(policy, "to_dict") else "")
    knob = getattr(target, "knob", None)
    parts.append(repr(getattr(knob, "cap", None)))
    return f"{name}@{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]}"


def grade_row(problem: Any, result: Result) -> bool | None:
    if problem.gold is None or result.answer is None:
        return None if problem.gold is None else False
    from certa.algorithms.answers.equivalence import grade
    return bool(grade(str(result.answer), str(problem.gold), problem.dataset))


async def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking ``fn(*args)`` in a daemon thread and await it.

    Unlike ``asyncio.to_thread``, a grading call still running when the user presses Ctrl-C
    does not hold up the interpreter's exit (the default executor is joined at shutdown).
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def deliver(value: Any, exc: BaseException | None) -> None:
        if not fut.done():
            fut.set_exception(exc) if exc is not None else fut.set_result(value)

    def work() -> None:
        try:
            value, exc = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            value, exc = None, e
        try:
            loop.call_soon_threadsafe(deliver, value, exc)
        except RuntimeError:  # the loop is gone (interrupted run): nobody is waiting
            pass

    threading.Thread(target=work, name="certa-grade", daemon=True).start()
    return await fut


async def exit_if_interrupt_stalls(work: Any, grace_s: float = 5.0) -> Any:
    """Await ``work`` (inside ``asyncio.run``); after a Ctrl-C, if the process has not exited
    ``grace_s`` seconds later, end it with status 130.

    ``asyncio.run`` turns the first Ctrl-C into a cancel of the batch, which aborts every
    in-flight request; that normally takes well under a second. Should any cleanup stall (a
    backend that does not answer its abort, a thread that never returns), the user still
    gets their shell back: a watchdog thread, armed by the Ctrl-C, ends the process. A second
    Ctrl-C stops at once, as asyncio does. For command lines only (it exits the process).
    """
    prev = signal.getsignal(signal.SIGINT)
    ours = None
    if threading.current_thread() is threading.main_thread() and callable(prev):
        def ours(signum: int, frame: Any) -> None:
            _arm_exit_watchdog(grace_s)
            prev(signum, frame)  # asyncio's handler: cancel the batch (the second time: KeyboardInterrupt)
        signal.signal(signal.SIGINT, ours)
    try:
        return await work
    finally:
        if ours is not None and signal.getsignal(signal.SIGINT) is ours:
            signal.signal(signal.SIGINT, prev)  # so asyncio.run finds and removes its own handler


_watchdog_armed = threading.Event()


def _arm_exit_watchdog(grace_s: float) -> None:
    if _watchdog_armed.is_set():
        return
    _watchdog_armed.set()

    def expire() -> None:
        time.sleep(grace_s)
        try:
            sys.stderr.write(f"interrupted: cleanup did not finish within {grace_s:g}s; exiting\n")
            sys.stderr.flush()
        finally:
            os._exit(130)

    threading.Thread(target=expire, name="certa-interrupt-watchdog", daemon=True).start()


async def run_dataset(target: Any, problems: list[Any], runtime: Runtime, *, concurrency: int = 4,
                      journal: Journal | None = None,
                      on_row: Callable[[dict[str, Any]], None] | None = None,
                      record: Callable[[dict[str, Any]], None] | None = None) -> BatchReport:
    """Run ``target`` on each problem (``question=`` input), grade, journal and report.

    ``record`` (a :class:`~certa.recording.Recorder`'s ``on_row``) gets each finished row
    *before* the journal does, so a kill between the two reruns that problem on resume
    rather than losing its trace. A journal written by another program is refused.
    """
    report = BatchReport()
    todo = []
    identity = program_identity(target)
    if journal is not None:
        journal.check_program(identity)
    for p in problems:
        key = f"{p.dataset}:{p.idx}"
        if journal is not None and key in journal.done:
            row = journal.done[key]
            if not isinstance(row.get("tokens"), dict) or not isinstance(row.get("exit_reason"), str):
                raise ConfigError(f"journal {journal.path}: the row for {key} lacks tokens or exit_reason",
                                  hint="the journal is corrupt or was edited; move it aside and rerun")
            report.rows.append(journal.done[key])
            if on_row:
                on_row(journal.done[key])
        else:
            todo.append((key, p))
    sem = asyncio.Semaphore(concurrency)

    async def one(key: str, p: Any) -> None:
        async with sem:
            result = await runtime.run(target, return_errors=True, question=p.question)
        correct = await in_daemon_thread(grade_row, p, result) if result.ok else False
        row = {"key": key, "dataset": p.dataset, "idx": p.idx, "gold": p.gold, "correct": correct,
               **result.summary(), "program_identity": identity}
        if record is not None:
            record(row)
        if journal is not None:
            journal.append(row)
        report.rows.append(row)
        if on_row:
            on_row(row)

    await asyncio.gather(*(one(k, p) for k, p in todo))
    order = {f"{p.dataset}:{p.idx}": i for i, p in enumerate(problems)}
    report.rows.sort(key=lambda r: order.get(r["key"], 0))
    return report

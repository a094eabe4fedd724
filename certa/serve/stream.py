"""A request in flight: its :class:`Job` record and the :class:`CompletionStream` a caller iterates.

A stream starts its program on the first ``__anext__`` and wakes on the runtime's
``certaindex`` events for that program (the server dispatches them), reading new points from
the program's trajectory so none is missed. Closing the stream early cancels the program's
task; the runtime then aborts every backend request the program has in flight. See
:meth:`certa.serve.Server.stream` for an example.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from certa.runtime.program import Program
from certa.runtime.result import Result

from certa.serve.completion import Completion, Heartbeat, Progress
from certa.serve.errors import ShuttingDownError

__all__ = ["CompletionStream", "Job", "JobHost"]


@dataclass(eq=False)
class Job:
    """One admitted request: its program, and the task running it once started."""

    request_id: str
    model: str
    program: Program
    answer_format: str
    deadline_s: float | None
    t0: float = field(default_factory=time.perf_counter)
    task: asyncio.Task | None = None
    ended: bool = False


class JobHost(Protocol):
    """What a stream needs of the server that admitted its job (:class:`~certa.serve.Server`)."""

    def launch(self, job: Job) -> None: ...

    def watch(self, program_id: str, wake: asyncio.Event) -> None: ...

    def conclude(self, job: Job, result: Result) -> Completion: ...

    def end(self, job: Job, result: Result | None) -> float: ...


class CompletionStream:
    """Async iterator of :class:`Progress` (and :class:`Heartbeat`) then one :class:`Completion`.

    Also an async context manager: leaving the block early aborts the program.
    """

    def __init__(self, server: JobHost, job: Job, *, progress: bool, heartbeat_s: float | None) -> None:
        self._server, self._job = server, job
        self._progress, self._heartbeat_s = progress, heartbeat_s
        self._wake = asyncio.Event()
        self._sent = 0
        self._closed = False

    @property
    def request_id(self) -> str:
        return self._job.request_id

    @property
    def model(self) -> str:
        return self._job.model

    def __aiter__(self) -> CompletionStream:
        return self

    async def __anext__(self) -> Progress | Heartbeat | Completion:
        job = self._job
        if self._closed:
            raise StopAsyncIteration
        if job.task is None:
            self._server.launch(job)
            assert job.task is not None
            job.task.add_done_callback(lambda _: self._wake.set())
            await asyncio.sleep(0)  # let the runtime assign the program id before watching it
            self._server.watch(job.program.program_id, self._wake)
        prog, task = job.program, job.task
        while True:
            self._wake.clear()
            if self._progress and self._sent < len(prog.trajectory):
                p = prog.trajectory[self._sent]
                self._sent += 1
                return Progress(prog.program_id, p.knob, p.value, p.tokens, dict(p.signals))
            if task.done():
                self._closed = True
                if task.cancelled():
                    self._server.end(job, None)
                    raise ShuttingDownError("the server shut down before the program finished",
                                            program=prog.program_id)
                return self._server.conclude(job, task.result())
            if self._closed:  # aclose() ran while this waited: the program is gone
                raise StopAsyncIteration
            if await self._wait(self._heartbeat_s):
                return Heartbeat()

    async def _wait(self, timeout: float | None) -> bool:
        """Wait for news; True if ``timeout`` seconds passed first. A timer sets the event
        instead of ``asyncio.wait_for``, which on Python 3.10/3.11 swallows a cancel that lands
        while the event fires (a disconnected client's program then ran on to its cap)."""
        if timeout is None:
            await self._wake.wait()
            return False
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            self._wake.set()

        timer = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            await self._wake.wait()
        finally:
            timer.cancel()
        return expired

    async def aclose(self) -> None:
        """Stop: abort the program if it is still running (its backend requests too)."""
        if self._closed:
            return
        self._closed = True
        task = self._job.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finished = task is not None and task.done() and not task.cancelled() and task.exception() is None
        self._server.end(self._job, task.result() if finished else None)

    async def __aenter__(self) -> CompletionStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

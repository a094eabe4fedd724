"""How a graph program runs its branches as tasks: the task factory, and the queue of finished branches."""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Finished", "task_maker"]


def task_maker() -> Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]:
    """How this run's loop starts a branch task: ``asyncio.Task`` itself on a loop without a
    task factory (``loop.create_task`` adds three Python calls a step: ~2% of one), else
    ``loop.create_task`` (a factory the user set is honoured; uvloop's is native)."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, asyncio.BaseEventLoop) and loop.get_task_factory() is None:
        return functools.partial(asyncio.Task, loop=loop)
    return loop.create_task


class Finished:
    """Finished branches in completion order, for one consumer (:meth:`~certa.dsl.program.GraphProgram.execute`):
    what ``asyncio.Queue`` did here, without its bookkeeping for many getters and a size cap."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[tuple[Any, ...]] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: tuple[Any, ...]) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def ready(self) -> tuple[Any, ...] | None:
        """The next finished branch if one is waiting, else None (then ``await get()``)."""
        return self._items.popleft() if self._items else None

    async def get(self) -> tuple[Any, ...]:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

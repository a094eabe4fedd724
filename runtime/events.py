"""The runtime's event stream: step start/end, certaindex updates, requests, exits.

Listeners are plain callables registered on a :class:`EventBus`; nothing is built when
nobody listens, so the stream costs nothing by default.

Example:
    >>> bus = EventBus(); seen = []
    >>> bus.subscribe(seen.append)
    >>> bus.emit("exit", "p1", reason="certaindex")
    >>> seen[0].kind, seen[0].data["reason"]
    ('exit', 'certaindex')
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

EventKind = Literal["program_start", "step_start", "step_end", "certaindex", "request_sent",
                    "request_done", "exit", "error"]


@dataclass(slots=True)
class Event:
    kind: str
    program_id: str
    t: float
    step: str | None = None
    branch: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


class EventBus:
    """Fan-out of runtime events to listeners; ``active`` is False when nobody listens."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Callable[[Event], None]] = []

    @property
    def active(self) -> bool:
        return bool(self._listeners)

    def subscribe(self, fn: Callable[[Event], None]) -> Callable[[], None]:
        """Register ``fn``; returns a function that unsubscribes it."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def emit(self, kind: str, program_id: str, step: str | None = None, branch: int | None = None,
             **data: Any) -> None:
        if not self._listeners:
            return
        ev = Event(kind, program_id, time.monotonic(), step, branch, data)
        for fn in list(self._listeners):
            fn(ev)

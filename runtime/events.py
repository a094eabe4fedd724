"""The runtime's event stream: step start/end, certaindex updates, requests, tokens, exits.

Listeners are plain callables registered on a :class:`EventBus`; nothing is built when
nobody listens, so the stream costs nothing by default. Besides its listeners, a bus
delivers to the *sink bound in the emitting task's context* (:func:`bind_sink`): that is how
``Runtime.stream`` gets the events of one program (its steps and sub-programs run in tasks
that inherit the program task's context) without filtering every program's events.

Kinds and their data: ``program_start`` (name, knob_cap), ``step_start``, ``step_end`` (ok,
update: what the step returned, a dict of updates or None), ``certaindex`` (value, signals, knob, tokens),
``request_sent`` (rid, token_kind), ``request_done`` (rid, token_kind, tokens), ``token``
(rid, text, attempt: a streamed text chunk), ``exit`` (reason, tokens, tokens_saved, error).

Example:
    >>> bus = EventBus(); seen = []
    >>> unsubscribe = bus.subscribe(seen.append)
    >>> bus.emit("exit", "p1", reason="certaindex")
    >>> seen[0].kind, seen[0].data["reason"]
    ('exit', 'certaindex')
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

EventKind = Literal["program_start", "step_start", "step_end", "certaindex", "request_sent",
                    "request_done", "token", "exit", "error"]

Sink = Callable[["Event"], None]
_SINK: contextvars.ContextVar[tuple["EventBus", Sink] | None] = contextvars.ContextVar("certa_event_sink",
                                                                                        default=None)


@dataclass(slots=True)
class Event:
    kind: str
    program_id: str
    t: float
    step: str | None = None
    branch: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


class EventBus:
    """Fan-out of runtime events to listeners; ``active`` is False when nobody listens.

    ``may_listen`` is a plain attribute, False until a listener subscribes or a sink is first
    bound: the hot path reads ``bus.may_listen and bus.active`` (no call while nobody ever
    listened; a bound sink lives as long as its task's context, so it stays True after one).
    """

    __slots__ = ("_listeners", "_sink_bound", "may_listen")

    def __init__(self) -> None:
        self._listeners: list[Callable[[Event], None]] = []
        self._sink_bound = False
        self.may_listen = False

    @property
    def active(self) -> bool:
        """True when a listener is subscribed or a sink is bound in the current context."""
        if self._listeners:
            return True
        bound = _SINK.get()
        return bound is not None and bound[0] is self

    def subscribe(self, fn: Callable[[Event], None]) -> Callable[[], None]:
        """Register ``fn``; returns a function that unsubscribes it."""
        self._listeners.append(fn)
        self.may_listen = True

        def unsubscribe() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)
            self.may_listen = bool(self._listeners) or self._sink_bound
        return unsubscribe

    def emit(self, kind: str, program_id: str, step: str | None = None, branch: int | None = None,
             **data: Any) -> None:
        bound = _SINK.get()
        sink = bound[1] if bound is not None and bound[0] is self else None
        if sink is None and not self._listeners:
            return
        ev = Event(kind, program_id, time.monotonic(), step, branch, data)
        if sink is not None:
            sink(ev)
        for fn in list(self._listeners):
            fn(ev)


def bind_sink(bus: EventBus, sink: Sink) -> contextvars.Token:
    """Deliver ``bus``'s events emitted in the current context (and in tasks started from it
    from now on) to ``sink`` as well; returns the token that :func:`unbind_sink` takes."""
    bus._sink_bound = bus.may_listen = True
    return _SINK.set((bus, sink))


def unbind_sink(token: contextvars.Token) -> None:
    _SINK.reset(token)

"""Typed program state and reducers.

A state is a pydantic model; a field annotated ``Annotated[T, reducer]`` merges concurrent
updates with ``reducer(old, new)`` instead of overwriting. ``Appended[list[str]]`` is
shorthand for ``Annotated[list[str], append]``.

Example:
    >>> class S(State):
    ...     question: str
    ...     answers: Appended[list[str]] = []
    ...     best: Annotated[float, max_] = 0.0
    >>> s = S(question="q")
    >>> apply_update(s, {"answers": "18", "best": 0.4}, reducers_of(S)); apply_update(s, {"answers": ["20"], "best": 0.2}, reducers_of(S))
    >>> s.answers, s.best
    (['18', '20'], 0.4)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict

from certa.dsl.errors import UnknownStateKeyError


class State(BaseModel):
    """Base class for program state (a pydantic v2 model; extra keys are rejected)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")


class Reducer:
    """Marks a merge function for ``Annotated[T, Reducer(fn)]`` (plain functions work too)."""

    __slots__ = ("fn", "name")

    def __init__(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "reducer")

    def __call__(self, old: Any, new: Any) -> Any:
        return self.fn(old, new)

    def __repr__(self) -> str:
        return f"Reducer({self.name})"


def _as_list(new: Any) -> list[Any]:
    return list(new) if isinstance(new, (list, tuple)) else [new]


append = Reducer(lambda old, new: [*(old or []), *_as_list(new)], "append")
"""Append one item (or each item of a list/tuple) to a list field."""

extend = Reducer(lambda old, new: [*(old or []), *new], "extend")
"""Extend a list field with an iterable."""

max_ = Reducer(lambda old, new: new if old is None else max(old, new), "max")
min_ = Reducer(lambda old, new: new if old is None else min(old, new), "min")
add = Reducer(lambda old, new: new if old is None else old + new, "add")
merge = Reducer(lambda old, new: {**(old or {}), **new}, "merge")
"""Merge a dict update into a dict field."""


class Appended:
    """``Appended[list[T]]`` = ``Annotated[list[T], append]``: concurrent branches append."""

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[item, append]


class Extended:
    """``Extended[list[T]]`` = ``Annotated[list[T], extend]``."""

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[item, extend]


def reducers_of(state_cls: type[BaseModel]) -> dict[str, Callable[[Any, Any], Any]]:
    """Field name → reducer for every field annotated with one."""
    out: dict[str, Callable[[Any, Any], Any]] = {}
    for name, info in state_cls.model_fields.items():
        for meta in info.metadata:
            if isinstance(meta, Reducer) or (callable(meta) and not isinstance(meta, type)
                                             and getattr(meta, "__module__", "").split(".")[0] not in ("pydantic", "annotated_types")):
                out[name] = meta
                break
    return out


def apply_update(state: BaseModel, update: dict[str, Any], reducers: dict[str, Callable[[Any, Any], Any]],
                 *, fields: Iterable[str] | None = None, program: str | None = None, step: str | None = None,
                 branch: int | None = None) -> None:
    """Merge ``update`` into ``state`` in place, through reducers where declared."""
    known = type(state).model_fields
    for key, value in update.items():
        if key not in known:
            raise UnknownStateKeyError(f"step returned key {key!r}, which the state has no field for",
                                       program=program, step=step, branch=branch,
                                       hint=f"state fields: {', '.join(known)}")
        r = reducers.get(key)
        object.__setattr__(state, key, r(getattr(state, key), value) if r is not None else value)


__all__ = ["Annotated", "Appended", "Extended", "Reducer", "State", "add", "append", "apply_update", "extend",
           "max_", "merge", "min_", "reducers_of"]

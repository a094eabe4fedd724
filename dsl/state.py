"""Typed program state and reducers.

A state is a pydantic model; a field annotated ``Annotated[T, reducer]`` merges concurrent
updates with ``reducer(old, new)`` instead of overwriting. ``Appended[list[str]]`` is
shorthand for ``Annotated[list[str], append]``: an update gives it a list (or tuple) of new
items. ``Overwrite(value)`` sets a reducer field as given, past its reducer. Values are
checked strictly against the field's type: a ``"408"`` for a ``list[str]`` or ``int`` field,
or a bare item for an ``Appended`` list, is CT113, never coerced.

Example:
    >>> class S(State):
    ...     question: str
    ...     answers: Appended[list[str]] = []
    ...     best: Annotated[float, max_] = 0.0
    >>> s = S(question="q")
    >>> apply_update(s, {"answers": ["18"], "best": 0.4}, reducers_of(S)); apply_update(s, {"answers": ["20"], "best": 0.2}, reducers_of(S))
    >>> s.answers, s.best
    (['18', '20'], 0.4)
    >>> apply_update(s, {"answers": Overwrite(["7"])}, reducers_of(S)); s.answers
    ['7']
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from certa.dsl.errors import InvalidUpdateError, UnknownStateKeyError
from certa.runtime.errors import CertaError, StepFailedError


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
"""Append the items of a list/tuple to a list field (a step update giving a bare item is CT113)."""

extend = Reducer(lambda old, new: [*(old or []), *new], "extend")
"""Extend a list field with an iterable."""

max_ = Reducer(lambda old, new: new if old is None else max(old, new), "max")
min_ = Reducer(lambda old, new: new if old is None else min(old, new), "min")
add = Reducer(lambda old, new: new if old is None else old + new, "add")
merge = Reducer(lambda old, new: {**(old or {}), **new}, "merge")
"""Merge a dict update into a dict field."""


class Overwrite:
    """An update value that replaces a reducer field instead of merging (LangGraph's
    ``Overwrite``): ``return {"answers": ct.Overwrite([])}`` empties an ``Appended`` list. The
    value is checked against the field's type like any other; two lanes of one fan-out may not
    both overwrite one field (CT108)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Overwrite({self.value!r})"


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


class _FieldCheck:
    """How one state field's new values are checked: ``exact`` types accepted as they are (the
    fast path), ``items``: exact item types of a list field (new items only, for append/extend),
    ``any``: no type to check (only awaitables are refused); anything else goes to pydantic."""

    __slots__ = ("exact", "items", "any")

    def __init__(self, annotation: Any, constrained: bool) -> None:
        self.any = annotation in (Any, object) and not constrained
        self.exact = frozenset() if constrained else _plain_types(annotation)
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        self.items = _plain_types(args[0]) if origin is list and len(args) == 1 and not constrained else frozenset()


def _plain_types(annotation: Any) -> frozenset[type]:
    """The classes an exact-type match may accept without pydantic: ``int``, ``str | None``, a model class."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = [type(None) if a is None else a for a in typing.get_args(annotation)]
    else:
        parts = [type(None) if annotation is None else annotation]
    if all(isinstance(a, type) and typing.get_origin(a) is None and not issubclass(a, (list, dict, set, tuple))
           or a in (list, dict) for a in parts):
        return frozenset(parts)
    return frozenset()


_CHECKS: dict[type, dict[str, _FieldCheck]] = {}  # state class -> field -> its check (fields seen so far)


def _check_of(cls: type[BaseModel], key: str) -> _FieldCheck | None:
    """The check for field ``key`` of ``cls`` (None: no such field), built on first use."""
    checks = _CHECKS.get(cls)
    if checks is None:
        checks = _CHECKS[cls] = {}
    check = checks.get(key)
    if check is None:
        info = cls.model_fields.get(key)
        if info is None:
            return None
        reducer = reducers_of(cls).get(key)
        decorators = cls.__pydantic_decorators__
        validated = any(key in d.info.fields or "*" in d.info.fields for d in decorators.field_validators.values())
        constrained = validated or bool(decorators.model_validators) or any(m is not reducer for m in info.metadata)
        check = checks[key] = _FieldCheck(info.annotation, constrained)
    return check


def _awaitable_in(value: Any) -> Any:
    """The first awaitable in ``value`` (or one level into a list/tuple/dict of it), else None."""
    if inspect.isawaitable(value):
        return value
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple, set)) else ()
    return next((v for v in inner if inspect.isawaitable(v)), None)


def _refuse_awaitable(found: Any, key: str, where: dict[str, Any]) -> InvalidUpdateError:
    if inspect.iscoroutine(found):
        found.close()  # never awaited: close it so no "never awaited" warning follows the error
    return InvalidUpdateError(f"step set {key!r} to a {type(found).__name__} (an awaitable), not a value",
                              hint="did you forget await? (e.g. `out = await ctx.gen(...)`)", **where)


def _merge(r: Callable[[Any, Any], Any], old: Any, value: Any, key: str, program: str | None, step: str | None,
           branch: int | None) -> Any:
    try:
        return r(old, value)
    except CertaError:
        raise
    except Exception as exc:
        name = getattr(r, "name", None) or getattr(r, "__name__", repr(r))
        raise StepFailedError(f"reducer {name!r} of field {key!r} raised {type(exc).__name__}: {exc}",
                              program=program, step=step, branch=branch) from exc


def apply_update(state: BaseModel, update: dict[str, Any], reducers: dict[str, Callable[[Any, Any], Any]],
                 *, fields: Iterable[str] | None = None, program: str | None = None, step: str | None = None,
                 branch: int | None = None) -> None:
    """Merge ``update`` into ``state`` in place, through reducers where declared, validating each
    new value against the field's type (pydantic; values of exactly the annotated type skip it).

    Raises :class:`~certa.dsl.errors.InvalidUpdateError` (CT113) for a value that does not fit,
    with the hint "did you forget await?" for an awaitable, and CT201 naming a reducer that raised.
    """
    cls = type(state)
    checks = _CHECKS.get(cls) or {}
    for key, value in update.items():
        check = checks.get(key) or _check_of(cls, key)
        if check is None:
            raise UnknownStateKeyError(f"step returned key {key!r}, which the state has no field for",
                                       program=program, step=step, branch=branch,
                                       hint=f"state fields: {', '.join(cls.model_fields)}")
        r = reducers.get(key)
        if r is None:
            if type(value) in check.exact:
                object.__setattr__(state, key, value)
                continue
        elif check.items and (r is append or r is extend):  # the fast path of list fields: new items only
            if type(value) is list or type(value) is tuple:
                ok = check.items
                for x in value:
                    if type(x) not in ok:
                        break
                else:  # what append/extend return, without the calls: [*(old or []), *value]
                    object.__setattr__(state, key, [*(getattr(state, key) or ()), *value])
                    continue
        elif type(value) in check.exact:  # e.g. max_ over floats: merge, and check the merged value's type
            new = _merge(r, getattr(state, key), value, key, program, step, branch)
            if type(new) in check.exact:
                object.__setattr__(state, key, new)
                continue
        where = {"program": program, "step": step, "branch": branch}
        if type(value) is Overwrite:  # past the reducer: set as given (checked below)
            value, r = value.value, None
        found = _awaitable_in(value)
        if found is not None:
            raise _refuse_awaitable(found, key, where)
        if (r is append or r is extend) and not isinstance(value, (list, tuple)):
            raise InvalidUpdateError(f"step gave {key!r} a {type(value).__name__} ({value!r:.40}); its reducer "
                                     f"{r.name!r} takes a list of new items", **where,
                                     hint=f"return {{{key!r}: [{value!r:.40}]}} to add one item")
        new = value if r is None else _merge(r, getattr(state, key), value, key, program, step, branch)
        if check.any or (type(new) in check.exact):
            object.__setattr__(state, key, new)
            continue
        _validate_into(state, key, new, value, where)


def _validate_into(state: BaseModel, key: str, new: Any, value: Any, where: dict[str, Any]) -> None:
    """The slow path: pydantic validates ``new`` strictly (no ``"408"`` -> ``408``, no str -> list;
    an int is still a float, a dict a nested model), custom validators included."""
    try:
        type(state).__pydantic_validator__.validate_assignment(state, key, new, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(map(str, err["loc"]))
        raise InvalidUpdateError(f"step set {loc or key!r} to {value!r:.80} ({type(value).__name__}): {err['msg']}",
                                 hint=f"field {key!r} is {type(state).model_fields[key].annotation!r}",
                                 **where) from None


__all__ = ["Annotated", "Appended", "Extended", "Overwrite", "Reducer", "State", "add", "append", "apply_update",
           "extend", "max_", "merge", "min_", "reducers_of"]

"""Infer a router's destinations from its ``Literal[...]`` return hint (for checks and drawings)."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, Literal


def router_destinations(router: Callable[..., Any]) -> tuple[tuple[str, ...] | None, bool]:
    """(destination step names or None when unknown, whether the router may return ``Send``s).

    Example:
        >>> def r(s) -> Literal["vote", "sample"]: ...
        >>> router_destinations(r)
        (('vote', 'sample'), False)
    """
    ret = _return_hint(router)
    if ret is None:
        return None, False
    names: list[str] = []
    sends = False
    unknown = False

    def walk(tp: Any) -> None:
        nonlocal sends, unknown
        origin = typing.get_origin(tp)
        if origin is Literal:
            names.extend(str(a) for a in typing.get_args(tp))
        elif getattr(tp, "__name__", "") == "Send":
            sends = True
            unknown = True
        elif origin is not None:
            for arg in typing.get_args(tp):
                walk(arg)
        elif tp is str or tp is Any:
            unknown = True

    walk(ret)
    if unknown or not names:
        return (tuple(names) if names and not sends else None), sends
    return tuple(names), sends


def _no_op() -> None: ...


def _return_hint(router: Callable[..., Any]) -> Any:
    """The router's resolved return annotation, or None. Resolved on its own when another
    annotation does not resolve (a state class local to a function, in a module with
    ``from __future__ import annotations``: ``def first(s: Q) -> Literal["a", "b"]``)."""
    try:
        return typing.get_type_hints(router).get("return")
    except Exception:  # noqa: BLE001 - some annotation does not resolve: try the return hint alone
        pass
    raw = getattr(router, "__annotations__", {}).get("return")
    if not isinstance(raw, str):
        return raw
    alone = types.FunctionType(_no_op.__code__, getattr(router, "__globals__", {}))
    alone.__annotations__ = {"return": raw}
    try:
        return typing.get_type_hints(alone).get("return")
    except Exception:  # noqa: BLE001 - unresolvable: unknown destinations (compile warns CT112)
        return None

"""Infer a router's destinations from its ``Literal[...]`` return hint (for checks and drawings)."""

from __future__ import annotations

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
    try:
        hints = typing.get_type_hints(router)
    except Exception:  # noqa: BLE001 - unresolvable annotations: treat as unknown
        hints = getattr(router, "__annotations__", {})
    ret = hints.get("return")
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

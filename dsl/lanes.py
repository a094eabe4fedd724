"""A graph program's fan-out lanes and join groups: who may write what, and when a join enters.

:class:`Lanes` is a mixin of :class:`~certa.dsl.program.GraphProgram`; it reads and updates the
program's :class:`Book` (the branch bookkeeping a checkpoint saves, :mod:`certa.dsl.checkpointing`):

- two lanes of one fan-out may not both write a field that has no reducer, nor both
  ``Overwrite`` one that has (CT108);
- a join group counts the branches still running in the lanes of one fan-out (nested fan-outs
  count as one member of the group they run in); when the last finishes, the join enters once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from certa.dsl.errors import ConflictingUpdateError
from certa.dsl.state import Overwrite

__all__ = ["Book", "Lanes"]


def _peek(counter: Iterator[int]) -> tuple[int, Iterator[int]]:
    """The next value of an ``itertools.count`` and a counter that still starts there."""
    n = next(counter)
    return n, itertools.count(n)


@dataclass(eq=False)
class Book:
    """A graph program's branch bookkeeping: every branch launched and not finished, the
    fan-out lanes and join groups, and the id counters. All of it is what a checkpoint saves
    (:func:`certa.dsl.checkpointing.snapshot`) and puts back (:meth:`restore`)."""

    started: bool = False
    pending: dict[int, tuple[str, Any]] = field(default_factory=dict)  # branch launched, not done -> (step, payload)
    lanes: dict[int, tuple[int, int]] = field(default_factory=dict)  # branch -> (fan-out, lane) in a fan-out
    writers: dict[tuple[int, str], int] = field(default_factory=dict)  # (fan-out, field) -> the lane that wrote it
    groups: dict[int, list[Any]] = field(default_factory=dict)  # join group -> [fan-out step, members running]
    group_of: dict[int, int] = field(default_factory=dict)  # branch -> its join group
    outer: dict[int, int] = field(default_factory=dict)  # join group -> the group of the lanes it runs in
    branch_ids: Iterator[int] = field(default_factory=itertools.count)
    fanouts: Iterator[int] = field(default_factory=itertools.count)
    group_ids: Iterator[int] = field(default_factory=itertools.count)

    def counters(self) -> list[int]:
        """The next branch, fan-out and join-group ids (the counters are not advanced)."""
        out = []
        for name in ("branch_ids", "fanouts", "group_ids"):
            n, again = _peek(getattr(self, name))
            setattr(self, name, again)
            out.append(n)
        return out

    def restore(self, data: dict[str, Any]) -> None:
        """Put back what :func:`certa.dsl.checkpointing.snapshot` saved of this book."""
        self.started = bool(data["started"])
        self.branch_ids, self.fanouts, self.group_ids = (itertools.count(n) for n in data["counters"])
        self.lanes = {b: (f, i) for b, f, i in data["lanes"]}
        self.writers = {(f, key): i for f, key, i in data["writers"]}
        self.groups = {g: [step, n] for g, step, n in data["groups"]}
        self.group_of = {b: g for b, g in data["group_of"]}
        self.outer = {g: o for g, o in data.get("outer", [])}
        self.pending = {b: (step, payload) for b, step, payload in data["pending"]}


class Lanes:
    """Fan-out lanes (CT108 checks, ``ctx.lane``) and join groups of a graph program."""

    # the program's bookkeeping this mixin reads and updates (set by GraphProgram.__init__)
    compiled: Any
    state: Any
    program_id: str
    _lanes: dict[int, tuple[int, int]]  # branch -> (fan-out, lane) for branches of a fan-out
    _writers: dict[tuple[int, str], int]  # (fan-out, field) -> the lane that wrote it
    _joins: dict[str, list[str]]  # fan-out step -> the steps that join it
    _groups: dict[int, list[Any]]  # join group -> [fan-out step, members still running]
    _group_of: dict[int, int]  # branch -> its join group
    _outer: dict[int, int]  # join group -> the group of the lanes it runs in
    _group_ids: Any

    def _enter(self, name: str, source: str | None, parent: int | None = None, payload: Any = None, *,
               group: int | None = None) -> None:
        raise NotImplementedError  # GraphProgram's: enter a step (a join, once its group is done)

    def _check_conflicts(self, step: str, branch: int, update: dict[str, Any]) -> None:
        """Two lanes of one fan-out may not both write a field that has no reducer (CT108)."""
        lane = self.book.lanes.get(branch)
        if lane is None:
            return
        fanout, index = lane
        reducers, fields = self.compiled.reducers, None
        for key, value in update.items():
            if key in reducers and type(value) is not Overwrite:  # an Overwrite replaces: one lane only
                continue
            if fields is None:  # pydantic's model_fields costs ~0.5 us: only for a field without a reducer
                fields = type(self.state).model_fields
            if key not in fields:
                continue
            first = self.book.writers.setdefault((fanout, key), index)
            if first != index:
                what = "both overwrite" if key in reducers else "both write"
                raise ConflictingUpdateError(
                    f"branches {first} and {index} of one fan-out {what} {key!r}"
                    + ("" if key in reducers else ", which has no reducer"),
                    program=self.program_id, step=step, branch=branch,
                    hint=f"merge through {key!r}'s reducer, or overwrite it from one branch" if key in reducers else
                    f"annotate {key!r} with a reducer (e.g. ct.Appended[...]) or write it from one branch")

    def lane_of(self, branch: int) -> int:
        """``ctx.lane``: the lane of ``branch`` in its fan-out (0 outside one)."""
        lane = self.book.lanes.get(branch)
        return 0 if lane is None or lane[1] is None else lane[1]

    def _finish_in_group(self, branch: int) -> None:
        """A branch in a joined fan-out's lanes finished, after its successors were launched
        into the same group (:meth:`_route`): when it was the last one, enter the join once."""
        group = self.book.group_of.pop(branch, None)
        if group is not None:
            self._release(group)

    def _release(self, group: int) -> None:
        """One member of ``group`` is done; at none left, enter its join step(s) in the enclosing
        group (if the fan-out ran inside another's lanes) and release that group's hold on it."""
        entry = self.book.groups[group]
        entry[1] -= 1
        if entry[1] == 0:
            del self.book.groups[group]
            outer = self.book.outer.pop(group, None)
            for join in self._joins[entry[0]]:
                self._enter(join, entry[0], group=outer)
            if outer is not None:
                self._release(outer)

    def _new_group(self, step: str, outer: int | None = None) -> int | None:
        """A join group for one fan-out of ``step`` (None when nothing joins it); inside the
        lanes of ``outer``, the new group counts as one member of it until it is joined."""
        if step not in self._joins:
            return None
        group = next(self.book.group_ids)
        self.book.groups[group] = [step, 0]
        if outer is not None:
            self.book.outer[group] = outer
            self.book.groups[outer][1] += 1
        return group

    def _drop_if_empty(self, group: int | None) -> None:
        """A fan-out that launched nothing (knob cap, ``max_visits``) has nothing to join."""
        if group is not None and self.book.groups.get(group, [None, 1])[1] == 0:
            del self.book.groups[group]
            outer = self.book.outer.pop(group, None)
            if outer is not None:
                self._release(outer)

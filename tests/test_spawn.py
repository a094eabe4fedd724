"""ctx.spawn: live sub-programs advanced in lock-step, read while they run, stopped with their parent."""

from __future__ import annotations

import asyncio

import pytest

import certa as ct
from certa.runtime.errors import StepFailedError


class Counter(ct.Program):
    """One generation per knob unit; fails at ``fail_at`` when given."""

    knob = ct.Knob("iterations", cap=6)

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at

    async def execute(self, ctx):
        if self.knob_used == self.fail_at:
            raise ValueError("boom")
        await ctx.gen("count")
        self.knob_used += 1
        return True

    def update_certaindex(self):
        return 0.0

    def answer(self):
        return self.knob_used


class Steer(ct.Program):
    """Spawns ``n`` counters and advances them together ``rounds`` times, recording their knobs."""

    knob = ct.Knob("iterations", cap=1)

    def __init__(self, n: int = 2, rounds: int = 3, fail_at: int | None = None) -> None:
        super().__init__()
        self.n, self.rounds, self.fail_at, self.seen, self.children = n, rounds, fail_at, [], []

    async def execute(self, ctx):
        self.children = [ctx.spawn(Counter, fail_at=self.fail_at) for _ in range(self.n)]
        for _ in range(self.rounds):
            await asyncio.gather(*(c.advance() for c in self.children))
            self.seen.append([c.answer for c in self.children])
        self.knob_used = 1
        return False


def test_children_advance_in_lock_step_and_stop_with_their_parent():
    b = ct.ScriptedBackend(responses=["one two"])
    parent = Steer(n=2, rounds=3)
    r = ct.Runtime(b).run_sync(parent)
    assert parent.seen == [[1, 1], [2, 2], [3, 3]]  # no child ran ahead of the others
    assert [c.exit_reason for c in parent.children] == ["cancelled", "cancelled"]  # still running at the end
    assert r.tokens.main == 2 * 3 * 2 and r.tokens.requests == 6  # their tokens count toward the parent


def test_a_failing_child_raises_in_the_steering_step():
    r = ct.Runtime(ct.ScriptedBackend(responses=["x"])).run_sync(Steer(n=1, rounds=4, fail_at=2), return_errors=True)
    assert isinstance(r.error, StepFailedError) and "boom" in str(r.error)


def test_a_child_that_ends_on_its_own_reads_as_done():
    class Short(Counter):
        knob = ct.Knob("iterations", cap=2)

    class Parent(Steer):
        async def execute(self, ctx):
            child = ctx.spawn(Short)
            while await child.advance():
                self.seen.append(child.answer)
            self.seen.append((child.done, child.exit_reason, child.answer))
            self.knob_used = 1
            return False

    p = Parent()
    ct.Runtime(ct.ScriptedBackend(responses=["x"])).run_sync(p)
    assert p.seen == [1, (True, "cap", 2)]


async def test_cancelling_the_parent_cancels_its_children():
    b = ct.ScriptedBackend(responses=["x"], latency=0.01)
    rt = ct.Runtime(b)
    parent = Steer(n=3, rounds=100)
    task = asyncio.ensure_future(rt.run(parent))
    while not parent.seen:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(c.done for c in parent.children) and not b.live_rids()

"""A join after per-branch steps: the lanes of a fan-out run several steps before the join
(fan-out -> a -> b -> join); the join waits for every lane's last step (issue 21)."""

from __future__ import annotations

import asyncio

import pytest

import certa as ct
from certa.dsl import errors as E


class L(ct.State):
    seen: ct.Appended[list[tuple[str, int]]] = []   # (step, lane payload) in finishing order
    joined: ct.Appended[list[list[tuple[str, int]]]] = []
    answer: int | None = None


def lanes(n: int = 3, *, sends: bool = False, knob: ct.Knob | None = None) -> ct.Graph:
    """work (a fan-out of n) -> a -> b, each lane at its own pace; ``total`` joins ``work``."""
    g = ct.Graph(L, name="lanes", **({"knob": knob} if knob else {}))

    async def pace(ctx: ct.Context, lane: int) -> None:
        await asyncio.sleep(0.003 * ((lane * 7) % 4))   # lanes finish out of launch order

    @g.step(fanout=1 if sends else n)
    async def work(s: L, ctx: ct.Context):
        await pace(ctx, ctx.branch)
        return {"seen": [("work", ctx.branch)]}

    @g.step
    async def a(s: L, ctx: ct.Context):
        await pace(ctx, ctx.branch)
        return {"seen": [("a", ctx.branch)]}

    @g.step
    async def b(s: L, ctx: ct.Context):
        await pace(ctx, ctx.branch + 1)
        return {"seen": [("b", ctx.branch)]}

    @g.step
    def total(s: L):
        return {"joined": [list(s.seen)], "answer": sum(1 for step, _ in s.seen if step == "b")}

    g.sequence("work", "a", "b")
    g.join("total", after="work")
    if sends:
        g.branch(ct.START, lambda s: [ct.Send("work", i) for i in range(n)], destinations=["work"], max_fanout=n)
    return g


def run(program, **inputs) -> ct.Result:
    return ct.Runtime(ct.ScriptedBackend()).run_sync(program, **inputs)


@pytest.mark.parametrize("sends", [False, True])
def test_the_join_runs_once_after_every_lane_ran_all_its_steps(sends):
    r = run(lanes(4, sends=sends).compile())
    assert len(r.state.joined) == 1, r.state.joined
    before = r.state.joined[0]
    assert sorted(step for step, _ in before) == ["a"] * 4 + ["b"] * 4 + ["work"] * 4
    assert r.answer == 4 and r.exit_reason == "done"
    assert [s for s, _ in r.state.seen] == [s for s, _ in before]   # nothing ran after the join


def test_a_lane_that_a_router_ends_early_is_waited_for_no_longer():
    g = ct.Graph(L, name="early")

    @g.step(fanout=3)
    def work(s: L, ctx: ct.Context):
        return {"seen": [("work", ctx.branch)]}

    @g.step
    def a(s: L, ctx: ct.Context):
        return {"seen": [("a", ctx.branch)]}

    @g.step
    def total(s: L):
        return {"joined": [list(s.seen)], "answer": len(s.seen)}

    def maybe(s: L) -> list[str]:
        return ["a"] if len(s.seen) % 2 else [ct.END]   # some lanes stop after work

    g.branch("work", maybe, destinations=["a", ct.END])
    g.join("total", after="work")
    r = run(g.compile())
    assert len(r.state.joined) == 1 and r.state.joined[0] == r.state.seen


def test_a_nested_fanout_in_the_lanes_is_joined_first_then_the_outer_join():
    """outer (fan-out 2) -> inner (fan-out 2 per lane, joined by inner_join) -> outer join."""
    g = ct.Graph(L, name="nested")

    @g.step(fanout=2)
    def outer(s: L, ctx: ct.Context):
        return {"seen": [("outer", ctx.branch)]}

    @g.step(fanout=2)
    async def inner(s: L, ctx: ct.Context):
        await asyncio.sleep(0.002 * (ctx.branch % 3))
        return {"seen": [("inner", ctx.branch)]}

    @g.step
    def inner_join(s: L):
        return {"seen": [("inner_join", 0)]}

    @g.step
    def total(s: L):
        return {"joined": [list(s.seen)], "answer": len(s.seen)}

    g.edge("outer", "inner")
    g.join("inner_join", after="inner")
    g.join("total", after="outer")
    r = run(g.compile())
    steps = [s for s, _ in r.state.joined[0]]
    assert len(r.state.joined) == 1 and steps.count("inner") == 4 and steps.count("inner_join") == 2
    assert steps.count("outer") == 2 and r.state.seen[-1][0] == "inner_join"


def test_compile_refuses_a_join_also_entered_from_a_later_step_of_the_lanes():
    g = lanes()
    g.edge("b", "total")   # total would run per lane after b, and once as the join
    with pytest.raises(E.InvalidJoinError) as e:
        g.compile()
    assert e.value.code == "CT110" and e.value.step == "total" and "'b'" in str(e.value)


def test_joining_a_later_step_of_the_lanes_points_at_the_fanout():
    g = ct.Graph(L, name="hint")
    g.step(name="work", fanout=3)(lambda s: None)
    g.step(name="a")(lambda s: None)
    g.step(name="total")(lambda s: {"answer": 1})
    g.edge("work", "a")
    g.join("total", after="a")
    with pytest.raises(E.JoinWithoutFanoutError) as e:
        g.compile()
    assert e.value.step == "a" and "after='work'" in str(e.value)


def test_compile_refuses_lanes_that_go_back_to_the_fanout_step():
    g = lanes()
    g.edge("b", "work")   # each lane would start a new fan-out of work: the join would never settle
    with pytest.raises(E.InvalidJoinError) as e:
        g.compile()
    assert e.value.code == "CT110" and e.value.step == "b" and "goes back to 'work'" in str(e.value)
    g = lanes(knob=ct.Knob("branches", cap=6))
    g.loop("work")            # a loop of the fan-out step itself continues its lanes: fine
    r = run(g.compile())
    assert len(r.state.joined) == 1 and sum(s == "b" for s, _ in r.state.joined[0]) == 6

"""LangGraph parity, next layer (issue 40 item 12): stream mode ``"values"``, ``Overwrite`` for
reducer fields, no silent coercion of state types, per-branch input (``g.loop`` keeps
``ctx.payload``, ``ctx.lane``, routers that see the finished branch), and ``Result`` naming the
branches and requests the early exit cancelled and aborted."""

from __future__ import annotations

import pytest

import certa as ct
from certa.dsl import errors as E
from certa.runtime.checkpoint import MemoryCheckpointer
from certa.runtime.streaming import StateValues


class Notes(ct.State):
    question: str
    notes: ct.Appended[list[str]] = []
    answer: str = ""


def notes_graph() -> ct.CompiledGraph:
    g = ct.Graph(Notes, name="notes")

    @g.step
    async def first(s, ctx):
        return {"notes": [(await ctx.gen(f"first {s.question}")).text]}

    @g.step
    async def second(s, ctx):
        return {"notes": ["two"], "answer": "done"}

    g.sequence("first", "second")
    return g.compile()


# ---- stream mode "values" ----------------------------------------------------------------
async def test_stream_values_gives_the_whole_state_after_each_step():
    rt = ct.Runtime(ct.ScriptedBackend(responses=["one"]))
    async with rt.stream(notes_graph(), mode="values", question="q") as s:
        parts = [p async for p in s]
    assert all(isinstance(p, StateValues) for p in parts) and [(p.step, p.branch) for p in parts] == [
        ("first", 0), ("second", 1)]
    assert parts[0].state.notes == ["one"] and parts[0].state.answer == ""   # a copy, as it was then
    assert parts[-1].state == s.result.state and parts[-1].state is not s.result.state
    both = ct.Runtime(ct.ScriptedBackend(responses=["one"]))
    async with both.stream(notes_graph(), mode=("updates", "values"), question="q") as s2:
        modes = [m async for m, _ in s2]
    assert modes == ["updates", "values", "updates", "values"]


async def test_a_thread_streams_too_and_resumes_from_its_pause():
    rt = ct.Runtime(ct.ScriptedBackend(responses=["one"]), checkpointer=MemoryCheckpointer())
    async with rt.stream(notes_graph(), mode="values", thread_id="t1", interrupt_before=["second"],
                         question="q") as s:
        parts = [p async for p in s]
    assert [p.step for p in parts] == ["first"] and s.result.exit_reason == "interrupted"   # paused after first
    async with rt.stream(notes_graph(), mode="values", thread_id="t1") as s:
        parts = [p async for p in s]
    assert parts[-1].state.notes == ["one", "two"] and s.result.exit_reason == "done"


# ---- Overwrite and strict state types -----------------------------------------------------
def test_overwrite_replaces_a_reducer_field_and_is_checked():
    g = ct.Graph(Notes, name="ow")

    @g.step
    def add(s):
        return {"notes": ["a", "b"]}

    @g.step
    def reset(s):
        return {"notes": ct.Overwrite(["only"])}

    g.sequence("add", "reset")
    assert ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile(), question="q").state.notes == ["only"]
    bad = ct.Graph(Notes, name="ow_bad")
    bad.step(lambda s: {"notes": ct.Overwrite("only")}, name="reset")
    with pytest.raises(E.InvalidUpdateError, match="notes"):
        ct.Runtime(ct.ScriptedBackend()).run_sync(bad.compile(), question="q")


def test_two_lanes_may_not_both_overwrite_one_reducer_field():
    g = ct.Graph(Notes, name="ow_lanes")
    g.step(lambda s, ctx: {"notes": ct.Overwrite([str(ctx.lane)])}, name="lanes", fanout=2)
    with pytest.raises(E.ConflictingUpdateError, match="notes"):
        ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile(), question="q")


class Typed(ct.State):
    words: ct.Appended[list[str]] = []
    counts: list[int] = []
    n: int = 0
    x: float = 0.0
    pair: tuple[int, int] = (0, 0)


@pytest.mark.parametrize("update", [{"words": "408"}, {"counts": ["408"]}, {"n": "408"}, {"n": 4.0},
                                    {"words": [408]}, {"pair": [1, 2]}, {"counts": "408"}])
def test_a_value_of_the_wrong_type_is_refused_not_coerced(update):
    """``{"words": "408"}`` used to become ``["408"]``, ``["408"]`` for a ``list[int]`` ``[408]``."""
    g = ct.Graph(Typed, name="typed")
    g.step(lambda s: update, name="write")
    with pytest.raises(E.InvalidUpdateError) as err:
        ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile())
    assert err.value.code == "CT113" and err.value.step == "write"
    if update == {"words": "408"}:
        assert "['408']" in err.value.hint   # says how to add one item


def test_values_of_the_right_type_still_pass_and_an_int_is_a_float():
    g = ct.Graph(Typed, name="typed_ok")
    g.step(lambda s: {"words": ("a", "b"), "counts": [1, 2], "n": 3, "x": 2, "pair": (1, 2)}, name="write")
    r = ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile())
    assert (r.state.words, r.state.counts, r.state.n, r.state.x, r.state.pair) == (["a", "b"], [1, 2], 3, 2.0, (1, 2))
    assert type(r.state.x) is float


def test_update_state_is_strict_too():
    rt = ct.Runtime(ct.ScriptedBackend(responses=["one"]), checkpointer=MemoryCheckpointer())
    rt.run_sync(notes_graph(), question="q", thread_id="t1", interrupt_before=["second"])
    with pytest.raises(E.InvalidUpdateError):
        rt.update_state("t1", {"notes": "human"})
    assert rt.update_state("t1", {"notes": ["human"]}).state["notes"] == ["one", "human"]


# ---- per-branch input ---------------------------------------------------------------------
class Lanes(ct.State):
    seen: ct.Appended[list[list]] = []


def test_a_loop_keeps_each_lanes_payload_and_ctx_lane():
    g = ct.Graph(Lanes, knob=ct.Knob("branches", cap=6), name="lanes")

    @g.step
    async def work(s, ctx):
        await ctx.gen(f"work {ctx.payload}")
        return {"seen": [[ctx.payload, ctx.lane]]}

    g.branch(ct.START, lambda s: [ct.Send("work", f"input-{i}") for i in range(3)], destinations=["work"])
    g.loop("work")
    r = ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile())
    assert r.knob_used == 6 and sorted(map(tuple, r.state.seen)) == sorted(
        [(f"input-{i}", i) for i in range(3)] * 2)   # the second pass of each lane: its own input again


def test_a_fanout_branch_knows_its_lane():
    g = ct.Graph(Lanes, name="fork")
    g.step(lambda s, ctx: {"seen": [[ctx.lane, ctx.payload]]}, name="fork", fanout=4)
    g.step(lambda s, ctx: {"seen": [["single", ctx.lane]]}, name="after")
    g.join("after", after="fork")
    r = ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile())
    assert sorted(map(tuple, r.state.seen[:4])) == [(i, None) for i in range(4)] and r.state.seen[4] == ["single", 0]


def test_a_router_taking_ctx_hands_each_next_branch_its_own_input():
    g = ct.Graph(Lanes, knob=ct.Knob("branches", cap=6), name="relay")

    @g.step
    def hop(s, ctx):
        return {"seen": [[ctx.step, ctx.payload]]}

    def onward(s, ctx) -> list[ct.Send]:   # the finished branch's payload, one further
        return [ct.Send("hop", ctx.payload + 1)] if ctx.payload < 3 else []

    g.branch(ct.START, lambda s: [ct.Send("hop", 0), ct.Send("hop", 10)], destinations=["hop"], max_fanout=2)
    g.branch("hop", onward, destinations=["hop"], max_fanout=1)
    r = ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile())
    assert sorted(p for _, p in r.state.seen) == [0, 1, 2, 3, 10]


# ---- Result: what the early exit cancelled and aborted -------------------------------------
def test_the_result_names_the_branches_cancelled_and_requests_aborted_by_the_early_exit():
    from .conftest import make_sc

    def latency(req):   # branches 0 and 1 answer at once and agree; the others hang until aborted
        return 0.0 if req.branch < 2 else 60.0

    b = ct.ScriptedBackend(responses=["\\boxed{7}"], latency=latency)
    r = ct.Runtime(b).run_sync(make_sc(cap=8, fanout=4, policy=ct.Threshold(0.5, detect_at=2)), question="q")
    assert r.exit_reason == "certaindex" and r.knob_used == 2
    # 2 and 3 were waiting on the backend; 4 and 5 (lanes 0 and 1 continued) had sent nothing yet
    assert sorted(r.cancelled) == [("sample", 2), ("sample", 3), ("sample", 4), ("sample", 5)]
    assert sorted(r.aborted) == sorted(b.abort_calls) == ["sc-0:sample:2:2", "sc-0:sample:3:3"]
    s = r.summary()
    assert sorted(map(tuple, s["cancelled"])) == sorted(r.cancelled) and s["aborted"] == r.aborted
    done = ct.Runtime(ct.ScriptedBackend(responses=["\\boxed{7}"])).run_sync(make_sc(cap=2, fanout=2), question="q")
    assert done.cancelled == [] and done.aborted == []

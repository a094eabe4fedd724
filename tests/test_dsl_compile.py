"""Every compile error code has a test; each error names the step."""

from __future__ import annotations

from typing import Literal, TypedDict

import pytest

import certa as ct
from certa.dsl import errors as E


class S(ct.State):
    question: str = ""
    answers: ct.Appended[list[str]] = []
    n: int = 0


def noop(s):
    return {}


def graph(*steps: str, **kw) -> ct.Graph:
    """A Graph on ``S`` named "g", with a no-op step for each name in ``steps``."""
    g = ct.Graph(S, name="g", **kw)
    for name in steps:
        g.step(name=name)(noop)
    return g


def test_valid_graph_compiles_and_infers_knob_step():
    g = graph(knob=ct.Knob("branches", cap=8))

    @g.step(fanout=4)
    async def sample(s, ctx):
        return {}

    g.loop("sample")
    c = g.compile()
    assert c.knob_step == "sample"


def test_ct101_unknown_step_in_edge_with_suggestion():
    g = graph("sample")
    g.edge("sample", "smaple")
    with pytest.raises(E.UnknownStepError) as e:
        g.compile()
    assert e.value.code == "CT101" and e.value.step == "smaple" and "did you mean 'sample'" in str(e.value)


def test_ct101_unknown_destination_from_literal_hint():
    g = graph("a")

    def route(s) -> Literal["b", "__end__"]:
        return "b"

    g.branch("a", route)
    with pytest.raises(E.UnknownStepError) as e:
        g.compile()
    assert e.value.step == "b"


def test_ct101_unknown_entry():
    g = graph("a")
    g.entry("zzz")
    with pytest.raises(E.UnknownStepError):
        g.compile()


def test_ct102_unreachable_step():
    g = graph("a", "orphan")
    with pytest.raises(E.UnreachableStepError) as e:
        g.compile()
    assert e.value.code == "CT102" and e.value.step == "orphan"


def test_ct103_unbounded_loop():
    g = graph("a")  # no knob cap
    g.loop("a")
    with pytest.raises(E.UnboundedLoopError) as e:
        g.compile()
    assert e.value.code == "CT103" and e.value.step == "a"


def test_loop_bounded_by_certaindex_stop_compiles():
    g = graph("a")

    g.certaindex(lambda s: 1.0, name="sure")
    g.loop("a")
    g.compile(policy=ct.Threshold(0.5))


def test_ct104_unbounded_dynamic_fanout():
    g = graph()
    g.step(name="a", fanout=lambda s: 3)(noop)
    with pytest.raises(E.UnboundedFanoutError) as e:
        g.compile()
    assert e.value.code == "CT104" and e.value.step == "a"


def test_ct104_unbounded_send_router():
    g = graph("plan", "work")

    def fan(s) -> list[ct.Send]:
        return [ct.Send("work", i) for i in range(3)]

    g.branch("plan", fan, destinations=["work"])
    with pytest.raises(E.UnboundedFanoutError) as e:
        g.compile()
    assert e.value.step == "plan"
    g.branches.clear()
    g.branch("plan", fan, destinations=["work"], max_fanout=3)
    g.compile()


def test_ct105_policy_needs_missing_certaindex():
    g = graph("a", knob=ct.Knob("iterations", cap=3))
    with pytest.raises(E.MissingCertaindexError) as e:
        g.compile(policy=ct.Threshold(0.5))
    assert e.value.code == "CT105"


def test_ct105_named_signal_missing():
    g = graph("a", knob=ct.Knob("iterations", cap=3))

    g.certaindex(lambda s: 0.0, name="entropy")
    with pytest.raises(E.MissingCertaindexError) as e:
        g.compile(policy=ct.Threshold({"reward": 0.5}))
    assert e.value.step == "reward"


def test_ct106_declared_writes_unknown_key():
    g = graph()

    @g.step(writes=["answers", "scores"])
    def a(s):
        return {}

    with pytest.raises(E.UnknownStateKeyError) as e:
        g.compile()
    assert e.value.code == "CT106" and e.value.step == "a" and "scores" in str(e.value)


class Out(TypedDict):
    bogus: int


def test_ct106_typeddict_return_hint_unknown_key():
    g = graph()

    @g.step
    def a(s) -> Out:
        return {"bogus": 1}

    with pytest.raises(E.UnknownStateKeyError):
        g.compile()


def test_ct106_unknown_key_at_runtime_names_step_and_branch():
    g = graph(knob=ct.Knob("branches", cap=2))

    @g.step(fanout=2)
    async def a(s, ctx):
        return {"nope": 1}

    with pytest.raises(E.UnknownStateKeyError) as e:
        ct.Runtime(backend=ct.ScriptedBackend(responses=["x"])).run_sync(g.compile())
    assert e.value.step == "a" and e.value.branch in (0, 1) and e.value.program.startswith("g-")


def test_ct107_invalid_graphs():
    with pytest.raises(E.InvalidGraphError):
        graph().compile()  # no steps
    with pytest.raises(E.InvalidGraphError):
        ct.Graph(dict)  # state is not a model
    g = graph()
    g.step(name="a", fanout=0)(noop)
    with pytest.raises(E.InvalidGraphError) as e:
        g.compile()
    assert e.value.code == "CT107" and e.value.step == "a"


def test_duplicate_step_is_invalid():
    g = graph("a")
    with pytest.raises(E.InvalidGraphError):
        g.step(name="a")(lambda s: {})


def test_compile_freezes_the_graph():
    g = graph(knob=ct.Knob("iterations", cap=2))

    @g.step
    def a(s):
        return {"answers": ["a"]}

    g.loop("a")
    c = g.compile()

    @g.step
    def b(s):  # added after compile: the compiled program must not run it
        return {"answers": ["b"]}

    g.edge("a", "b")
    g.knob.cap = 5
    r = ct.Runtime(ct.ScriptedBackend(responses=["x"])).run_sync(c)
    assert r.ok and r.state.answers == ["a", "a"], r.state.answers
    assert list(c.graph.steps) == ["a"] and c.graph.edges == [("a", "a")] and c.knob.cap == 2
    with pytest.raises(E.InvalidGraphError) as e:
        c.graph.edge("a", "a")
    assert e.value.code == "CT107" and "compile it again" in str(e.value)
    assert g.compile().graph.edges == [("a", "a"), ("a", "b")]  # the Graph itself stays editable


# ---- run-time: concurrent writes to a field without a reducer (CT108) ----------------
class W(ct.State):
    question: str = ""
    answers: ct.Appended[list[str]] = []
    last: str = ""  # no reducer


def run(compiled, **inputs):
    return ct.Runtime(ct.ScriptedBackend(responses=lambda r: f"b{r.branch}")).run_sync(compiled, return_errors=True,
                                                                                       **inputs)


def test_ct108_fanout_branches_writing_a_field_without_reducer():
    g = ct.Graph(W, name="w")

    @g.step(fanout=3)
    async def sample(s, ctx):
        out = await ctx.gen(s.question)
        return {"answers": [out.text], "last": out.text}

    r = run(g.compile(), question="q")
    assert r.error is not None and r.error.code == "CT108" and r.error.step == "sample", r
    assert "'last'" in str(r.error) and "reducer" in str(r.error)


def test_ct108_send_fanout_and_loop_lanes():
    g = ct.Graph(W, knob=ct.Knob("branches", cap=4), name="w")
    g.step(name="plan")(noop)

    @g.step
    async def work(s, ctx):
        return {"last": str(ctx.payload)}

    g.branch("plan", lambda s: [ct.Send("work", i) for i in range(2)], destinations=["work"], max_fanout=2)
    r = run(g.compile())
    assert r.error is not None and r.error.code == "CT108" and r.error.step == "work"


def test_one_lane_may_overwrite_its_own_field_and_reducers_merge():
    g = ct.Graph(W, knob=ct.Knob("iterations", cap=3), name="w")

    @g.step
    async def think(s, ctx):  # one lane, looping: each write follows the last
        return {"last": f"step{len(s.answers)}", "answers": ["x"]}

    g.loop("think")
    r = run(g.compile())
    assert r.ok and r.state.last == "step2" and r.state.answers == ["x"] * 3
    g2 = ct.Graph(W, knob=ct.Knob("branches", cap=4), name="w2")

    @g2.step(fanout=2)
    async def sample(s, ctx):  # two lanes: each writes the reducer field only
        return {"answers": [(await ctx.gen("q")).text]}

    @g2.step
    def pick(s):  # after the fan-out: one branch per finished lane, each its own
        return {"last": s.answers[-1]}

    g2.edge("sample", "pick")
    r2 = run(g2.compile())
    assert r2.ok and len(r2.state.answers) == 2 and r2.state.last in ("b0", "b1")


def test_every_error_code_is_documented():
    import pathlib
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "errors.md").read_text()
    for cls in E.ALL_ERRORS:
        assert cls.code in doc, f"{cls.code} ({cls.__name__}) missing from docs/errors.md"


def test_server_error_codes_are_documented():
    import pathlib
    from certa.serve import errors as S
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "errors.md").read_text()
    for cls in (S.BadRequestError, S.ServerBusyError, S.UnknownModelError, S.ShuttingDownError):
        assert cls.code in doc

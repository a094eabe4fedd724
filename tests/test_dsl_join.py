"""Fan-in (``g.join``), branching from ``START`` and the compile warnings (issue 21)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import warnings
from typing import Literal

import pytest

import certa as ct
from certa.dsl import errors as E

from .conftest import EXAMPLES
from .conftest import load_example as example


class S(ct.State):
    xs: ct.Appended[list[int]] = []
    joined: ct.Appended[list[list[int]]] = []   # what each join run saw
    logged: ct.Appended[list[int]] = []
    answer: int | None = None


def run(program, **inputs) -> ct.Result:
    r = ct.Runtime(ct.ScriptedBackend()).run_sync(program, **inputs)
    assert r.error is None, r.error
    return r


async def slow(ctx: ct.Context) -> int:
    await asyncio.sleep(0.002 * (ctx.branch % 4))   # branches finish out of launch order
    return ctx.branch


def fanout_graph(n: int = 3, **kw) -> ct.Graph:
    g = ct.Graph(S, name="j", **kw)

    @g.step(fanout=n)
    async def work(s, ctx):
        return {"xs": [await slow(ctx)]}

    @g.step
    def total(s):
        return {"joined": [sorted(s.xs)], "answer": sum(s.xs)}

    return g


def test_join_runs_once_after_every_branch_of_the_fanout_with_the_merged_state():
    g = fanout_graph(4)
    g.join("total", after="work")
    r = run(g.compile())
    assert r.state.joined == [[0, 1, 2, 3]] and r.answer == 6
    assert r.exit_reason == "done"


def test_join_waits_for_the_loop_lanes_of_its_fanout_and_edges_stay_per_branch():
    g = fanout_graph(2, knob=ct.Knob("branches", cap=6))

    @g.step
    def log(s, ctx):
        return {"logged": [len(s.xs)]}

    g.loop("work")
    g.edge("work", "log")
    g.join("total", after="work")
    r = run(g.compile())
    assert len(r.state.joined) == 1 and len(r.state.joined[0]) == 6   # once, after all 6 launches
    assert len(r.state.logged) == 6                                    # the default: per branch


def test_branch_from_start_sends_a_fanout_that_a_join_collects():
    g = ct.Graph(S, name="s")

    @g.step
    async def work(s, ctx):
        return {"xs": [ctx.payload]}

    @g.step
    def total(s):
        return {"joined": [sorted(s.xs)], "answer": sum(s.xs)}

    g.branch(ct.START, lambda s: [ct.Send("work", i * 10) for i in range(3)], destinations=["work"], max_fanout=3)
    g.join("total", after="work")
    r = run(g.compile())
    assert r.state.joined == [[0, 10, 20]] and r.answer == 30


def test_branch_from_start_with_a_literal_router_picks_the_first_step():
    class Q(ct.State):
        question: str
        answer: str | None = None

    g = ct.Graph(Q, name="pick")

    @g.step
    def short(s):
        return {"answer": "short"}

    @g.step
    def long(s):
        return {"answer": "long"}

    def first(s: Q) -> Literal["short", "long"]:
        return "short" if len(s.question) < 5 else "long"

    g.branch(ct.START, first)
    with warnings.catch_warnings():  # the Literal hint is read although `Q` is local to this function (no CT112)
        warnings.simplefilter("error")
        c = g.compile()
    assert c.graph.branches[0].destinations == ("short", "long")
    assert run(c, question="hi").answer == "short" and run(c, question="a long one").answer == "long"


def test_join_per_level_in_a_send_loop_and_no_join_for_a_fanout_the_cap_stopped():
    class T(ct.State):
        frontier: list[int] = [1]
        seen: ct.Appended[list[int]] = []
        levels: ct.Appended[list[list[int]]] = []
        answer: int | None = None

    g = ct.Graph(T, knob=ct.Knob("branches", cap=6), name="bfs")

    @g.step(knob=True)
    async def expand(s, ctx):
        return {"seen": [ctx.payload * 2, ctx.payload * 2 + 1]}

    @g.step
    def prune(s):
        best = sorted(s.seen, reverse=True)[:2]
        return {"frontier": best, "seen": [], "levels": [best], "answer": best[0]}

    g.branch(ct.START, lambda s: [ct.Send("expand", x) for x in s.frontier], destinations=["expand"], max_fanout=2)
    g.join("prune", after="expand")
    g.branch("prune", lambda s: [ct.Send("expand", x) for x in s.frontier], destinations=["expand"], max_fanout=2)
    r = run(g.compile())
    # launches: 1 + 2 + 2 = 5, then 1 more fits the cap (a partial level is still joined), then none
    assert [len(level) for level in r.state.levels] == [2, 2, 2, 2] and r.knob_used == 6


def test_join_compile_errors_are_coded_and_name_the_step():
    g = fanout_graph(1)
    g.join("total", after="work")
    with pytest.raises(E.JoinWithoutFanoutError) as e:
        g.compile()
    assert e.value.code == "CT109" and e.value.step == "work"

    g = fanout_graph()
    g.join("totl", after="work")
    with pytest.raises(E.UnknownStepError) as e:
        g.compile()
    assert e.value.step == "totl" and "did you mean 'total'" in str(e.value)

    for mutate in (lambda g: g.edge("work", "total").join("work", after="work"),      # its own fan-out
                   lambda g: g.join("total", after="work").edge("work", "total"),       # also per branch
                   lambda g: g.join("total", after="work").join("total", after="work")):  # twice
        g = fanout_graph()
        mutate(g)
        with pytest.raises(E.InvalidJoinError) as e:
            g.compile()
        assert e.value.code == "CT110"


def test_join_of_an_unreachable_fanout_is_unreachable_and_start_excludes_an_entry():
    g = fanout_graph()

    @g.step(fanout=2)
    def orphan(s):
        return {}

    g.join("total", after="orphan")
    g.edge("work", ct.END)
    with pytest.raises(E.UnreachableStepError) as e:
        g.compile()
    assert e.value.step == "total" and "it joins 'orphan', which nothing reaches" in str(e.value)

    g = fanout_graph()
    g.entry("work").edge(ct.START, "work")
    with pytest.raises(E.InvalidGraphError):
        g.compile()


def _warnings(g: ct.Graph) -> list[type]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g.compile()
    return [w.category for w in caught]


def test_missing_answer_warns_ct111_unless_answer_or_answer_field():
    class NoAnswer(ct.State):
        x: int = 0

    g = ct.Graph(NoAnswer, name="na")
    g.step(name="a")(lambda s: {})
    with pytest.warns(E.MissingAnswerWarning, match="CT111"):
        g.compile()
    g.answer(lambda s: s.x)
    assert _warnings(g) == []
    g = fanout_graph()
    g.edge("work", "total")
    assert _warnings(g) == []   # S has an answer field


def test_router_without_destination_hint_warns_ct112():
    def one_step(**kw) -> ct.Graph:
        g = ct.Graph(S, knob=ct.Knob("iterations", cap=3), name="r")
        g.step(name="a")(lambda s: {})
        return g

    g = one_step()
    g.branch("a", lambda s: ct.END)
    with pytest.warns(E.UnhintedRouterWarning, match="CT112") as w:
        g.compile()
    assert w[0].message.step == "a"

    def hinted(s) -> Literal["a", "__end__"]:
        return ct.END

    for router, kw in ((hinted, {}), (lambda s: ct.END, {"destinations": ["a", ct.END]})):
        g = one_step()
        g.branch("a", router, **kw)
        assert _warnings(g) == []


# ---- the examples written with the join (examples/*.py, on the scripted fake backend) ----------
def test_best_of_n_joins_all_candidates_or_stops_at_a_verified_one():
    bon = example("best_of_n")
    answers = ["\\boxed{7}", "\\boxed{8}", "\\boxed{8}", "\\boxed{9}"]
    weights = {"7": 0.6, "8": 0.4, "9": 0.1}   # 8 wins on total verifier score (2 x 0.4) though 7 scores highest

    def verifier(req):
        p = weights[req.prompt.split("Proposed answer: ")[1].split("\n")[0]]
        return {"Yes": p, "No": 1 - p}

    r = ct.Runtime(ct.ScriptedBackend(responses=answers, scores=verifier)).run_sync(bon.program, question="q")
    assert r.exit_reason == "done" and len(r.state.scored) == 8 and r.state.best == "8" and r.answer == "8"

    backend = ct.ScriptedBackend(responses=answers, scores=lambda req: {"Yes": 0.99, "No": 0.01},
                                 latency=lambda req: 0.01 * (req.branch % 4))
    r = ct.Runtime(backend).run_sync(bon.program, question="q")
    assert r.exit_reason == "certaindex" and r.state.best is None and len(r.state.scored) < 8
    assert r.answer in ("7", "8", "9") and backend.abort_calls and backend.live_rids() == set()


def test_tot_bfs_prunes_once_per_level_and_keeps_the_best_path():
    tot = example("tot_bfs")

    def value(req):   # the path whose steps are all "b" is the best
        path = req.prompt.split("Steps so far:\n")[1].split("Is this on track?")[0].split()
        return {"Yes": path.count("b") / len(path), "No": 1 - path.count("b") / len(path)}

    backend = ct.ScriptedBackend(responses=lambda req: "ab"[req.seed % 2] + f" {req.seed}", scores=value)
    r = ct.Runtime(backend).run_sync(tot.program, question="q")
    assert r.error is None and r.exit_reason == "done"
    assert r.state.depth == tot.DEPTH and r.knob_used == tot.BREADTH * (1 + tot.BEAM * (tot.DEPTH - 1))
    assert [len([p for p in r.state.proposals if p[0] == d]) for d in range(tot.DEPTH)] == [3, 6, 6]
    best = r.state.frontier[0].splitlines()
    assert len(best) == tot.DEPTH and all(line.startswith("b ") for line in best)
    assert r.answer == best[-1].split()[-1]


def test_debate_stops_at_consensus_or_after_exactly_its_rounds():
    debate = example("debate")
    stubborn = ct.Runtime(ct.ScriptedBackend(
        responses=lambda req: "\\boxed{1}" if "alice" in req.prompt.split(".")[0] else "\\boxed{2}"))
    r = stubborn.run_sync(debate.program, question="q")
    assert r.exit_reason == "cap" and r.state.round == debate.ROUNDS == r.knob_used
    assert len(r.state.said) == 2 * debate.ROUNDS and r.answer == "1"   # no extra round after the last
    agree = ct.Runtime(ct.ScriptedBackend(responses=["\\boxed{5}"])).run_sync(debate.program, question="q")
    assert agree.exit_reason == "certaindex" and agree.state.round == 1 and agree.answer == "5"


@pytest.mark.parametrize("name", ["best_of_n", "tot_bfs", "debate"])
def test_join_example_runs_as_a_script(name):
    out = subprocess.run([sys.executable, "-W", "error::UserWarning", str(EXAMPLES / f"{name}.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "answer:" in out.stdout and "exit:" in out.stdout


def test_drawing_shows_the_join_and_the_start_branch():
    text = str(example("tot_bfs").program.draw())
    assert "expand ==>|join| prune" in text and "__start__ -.->|grow| expand" in text
    assert "__start__ --> expand" not in text and "expand --> __end__" not in text

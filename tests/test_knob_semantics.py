"""The knob counts what docs/concepts.md ("Knob") says: finished branches of the knob step; the
cap bounds how many start; when the knob step is a join, once the cap is spent no branch of
the fan-out it joins (or of its lanes) starts either, so a debate with a cap of N rounds runs
exactly N rounds (issue 21)."""

from __future__ import annotations

import pytest

import certa as ct

from .conftest import load_example


class D(ct.State):
    question: str = "q"
    round: int = 0
    said: ct.Appended[list[tuple[int, str]]] = []
    answer: str | None = None


def debate(cap: int, *, knob_on: str = "close_round", unit: str = "iterations") -> ct.CompiledGraph:
    """Two agents per round; the join closes the round; only the knob cap ends it (no round check)."""
    g = ct.Graph(D, knob=ct.Knob(unit, cap=cap, step=knob_on), name="debate")

    @g.step
    async def speak(s: D, ctx: ct.Context):
        out = await ctx.gen(f"{ctx.payload}: {s.question}", max_tokens=4)
        return {"said": [(s.round, out.text)]}

    @g.step
    def close_round(s: D):
        return {"round": s.round + 1, "answer": s.said[-1][1]}

    def agents(s: D) -> list[ct.Send]:
        return [ct.Send("speak", a) for a in ("alice", "bob")]

    g.branch(ct.START, agents, destinations=["speak"], max_fanout=2)
    g.join("close_round", after="speak")
    g.branch("close_round", agents, destinations=["speak"], max_fanout=2)
    return g.compile()


def run(program: ct.CompiledGraph, backend: ct.ScriptedBackend | None = None) -> ct.Result:
    return ct.Runtime(backend or ct.ScriptedBackend(responses=["x"])).run_sync(program)


@pytest.mark.parametrize("rounds", [1, 2, 3, 5])
def test_a_debate_with_a_knob_cap_of_n_rounds_runs_exactly_n_rounds(rounds):
    backend = ct.ScriptedBackend(responses=["x"])
    r = run(debate(rounds), backend)
    assert r.state.round == rounds == r.knob_used and r.exit_reason == "cap"
    assert len(r.state.said) == 2 * rounds == len(backend.requests)   # no speech for a round past the cap
    assert {n for n, _ in r.state.said} == set(range(rounds))


def test_the_counted_unit_is_the_knob_steps_finished_branches():
    program = debate(5, knob_on="speak", unit="branches")   # the knob counts speeches, not rounds
    r = run(program)
    assert r.knob_used == 5 == program.new().knob_cap and r.program_id
    assert len(r.state.said) == 5 and r.state.round == 3    # round 3 starts one speech: a partial round, joined
    assert program.feeds_knob == frozenset()                # the knob step is not a join: no round to keep whole
    assert debate(3).feeds_knob == frozenset({"speak"})     # a join knob: its fan-out is the round's work


def test_steps_that_can_end_without_the_knob_step_still_run_after_the_cap():
    class V(ct.State):
        answers: ct.Appended[list[str]] = []
        checks: ct.Appended[list[int]] = []
        answer: str | None = None

    g = ct.Graph(V, knob=ct.Knob("branches", cap=6), name="sc")

    @g.step(fanout=3, knob=True)
    async def sample(s: V, ctx: ct.Context):
        return {"answers": [(await ctx.gen("q")).text]}

    @g.step
    def check(s: V):
        return {"checks": [len(s.answers)]}

    @g.step
    def vote(s: V):
        return {"answer": max(set(s.answers), key=s.answers.count)}

    def more(s: V) -> list[str]:
        return ["sample"] if len(s.answers) < 99 else ["vote"]   # always asks for more: the cap says no

    g.join("check", after="sample")
    g.branch("check", more, destinations=["sample", "vote"])
    g.edge("sample", ct.END)
    program = g.compile()
    assert program.feeds_knob == frozenset()   # check can end (through vote) without sampling
    r = run(program)
    assert r.knob_used == 6 and len(r.state.answers) == 6 and r.exit_reason == "cap"
    assert r.state.checks == [3, 6]   # the join after the last fan-out ran, though the cap was spent


def test_the_debate_example_runs_its_rounds_and_no_more():
    ex = load_example("debate")
    backend = ct.ScriptedBackend(
        responses=lambda req: "\\boxed{1}" if "alice" in req.prompt.split(".")[0] else "\\boxed{2}")
    r = ct.Runtime(backend).run_sync(ex.program, question="q")
    assert r.exit_reason == "cap" and r.state.round == ex.ROUNDS == r.knob_used
    assert len(r.state.said) == 2 * ex.ROUNDS == len(backend.requests)

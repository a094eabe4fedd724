"""Runtime behaviour on the scripted backend: reducers, fan-out, nesting, early exit, accounting."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

import certa as ct
from certa.runtime.backends.testing.scripted import words
from certa.runtime.errors import CertaindexRangeError, ConfigError

from .conftest import SC, make_sc


async def test_reducer_merges_concurrent_branches():
    b = ct.ScriptedBackend(responses=["a", "b", "c", "d", "e", "f"], latency=0.01)
    r = await ct.Runtime(b).run(make_sc(cap=6, fanout=3), question="q")
    assert r.ok, r.error
    assert sorted(r.state.answers) == ["a", "b", "c", "d", "e", "f"]
    assert r.knob_used == 6 and r.exit_reason == "cap"


async def test_fanout_launches_n_branches_at_once():
    b = ct.ScriptedBackend(responses=["x"], latency=0.05)
    seen = []
    rt = ct.Runtime(b)
    rt.events.subscribe(lambda ev: seen.append(ev) if ev.kind == "step_start" else None)
    task = asyncio.ensure_future(rt.run(make_sc(cap=4, fanout=4), question="q"))
    await asyncio.sleep(0.02)
    assert len(b.live_rids()) == 4
    r = await task
    assert len(seen) == 4 and r.knob_used == 4


async def test_fast_branch_never_waits_for_slow_sibling():
    # branch 0's requests are slow (1 s); the other lane is fast and loops on without waiting
    def latency(req):
        return 0.5 if req.branch == 0 else 0.01

    b = ct.ScriptedBackend(responses=["x"], latency=latency)
    starts = []
    rt = ct.Runtime(b)
    rt.events.subscribe(lambda ev: starts.append((ev.t, ev.branch)) if ev.kind == "step_start" else None)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    r = await rt.run(make_sc(cap=6, fanout=2), question="q")
    assert r.ok and r.knob_used == 6
    fast = [t for t, br in starts if br != 0]
    assert len(fast) == 5
    assert max(fast) - t0 < 0.3, "fast lane must finish its 5 branches while branch 0 is still running"


async def test_early_exit_aborts_in_flight_requests():
    b = ct.ScriptedBackend(responses=lambda r: "42", latency=lambda r: 0.01 if r.branch < 4 else 5.0)
    rt = ct.Runtime(b)
    r = await rt.run(make_sc(cap=16, fanout=8, policy=ct.Threshold(0.9, detect_at=4)), question="q")
    assert r.exit_reason == "certaindex"
    assert r.knob_used == 4
    assert b.live_rids() == set(), "nothing may stay in flight after early exit"
    assert len(b.abort_calls) == 4
    assert r.tokens_saved > 0 and r.answer == "42"


async def test_no_exit_when_answers_disagree():
    b = ct.ScriptedBackend(responses=["1", "2", "3", "4"])
    r = await ct.Runtime(b).run(make_sc(cap=8, fanout=4, policy=ct.Threshold(0.9, detect_at=4)), question="q")
    assert r.exit_reason == "cap" and r.knob_used == 8


async def test_token_accounting_by_kind():
    class Probe(ct.State):
        q: str
        out: str = ""

    g = ct.Graph(Probe, name="probe")

    @g.step
    async def think(s, ctx):
        a = await ctx.gen("main", max_tokens=100)
        p = await ctx.gen("probe", kind="probe", max_tokens=100)
        sc = await ctx.score("score?")
        return {"out": a.text + p.text + str(sc.probs)}

    b = ct.ScriptedBackend(responses={"main": "one two three", "probe": "four five", "score?": "Yes"})
    r = await ct.Runtime(b).run(g.compile(), q="x")
    assert r.ok, r.error
    assert (r.tokens.main, r.tokens.probe) == (3, 2)
    assert r.tokens.score >= 1
    assert r.tokens.total == r.tokens.main + r.tokens.probe + r.tokens.score
    assert r.tokens.requests == 3


async def test_nested_subprogram_counts_tokens_and_aborts_on_exit():
    inner = make_sc(cap=2, fanout=2)
    g = ct.Graph(SC, knob=ct.Knob("branches", cap=6), name="outer")  # SC: the inner program's state too

    @g.step(fanout=3)
    async def sub(s, ctx):
        res = await ctx.call(inner, question=s.question)
        return {"answers": [res.answer]}

    @g.certaindex
    def same(s) -> float:
        return 1.0 if len(s.answers) >= 2 and len(set(s.answers)) == 1 else 0.0

    g.loop("sub")
    # the third sub-program (program id outer-0/sc-3) is slow: in flight when the outer program exits
    b = ct.ScriptedBackend(responses=["7"], latency=lambda req: 5.0 if req.program_id.endswith("sc-3") else 0.01)
    r = await ct.Runtime(b).run(g.compile(policy=ct.Threshold(1.0, detect_at=2)), question="q")
    assert r.exit_reason == "certaindex", r.error
    assert r.state.answers == ["7", "7"] and r.knob_used == 2
    assert b.live_rids() == set()
    assert any(rid.startswith("outer-0/sc-3") for rid in b.abort_calls)
    assert r.tokens.main == 4  # 2 finished sub-programs x 2 branches x 1 token roll up into the parent


async def test_hand_written_program_runs_in_same_runtime():
    class Majority(ct.Program):
        knob = ct.Knob("branches", cap=5)

        def __init__(self, question: str):
            super().__init__()
            self.state = {"q": question, "answers": []}

        async def execute(self, ctx):
            out = await ctx.gen(self.state["q"], temperature=0.7)
            self.state["answers"].append(out.text)
            self.knob_used += 1
            return True

        def update_certaindex(self):
            a = self.state["answers"]
            return Counter(a).most_common(1)[0][1] / len(a)

        def answer(self):
            return Counter(self.state["answers"]).most_common(1)[0][0]

    Majority.policy = ct.Threshold(0.99, detect_at=3)
    b = ct.ScriptedBackend(responses=["5"])
    r = await ct.Runtime(b).run(Majority, question="q")
    assert r.exit_reason == "certaindex" and r.knob_used == 3 and r.answer == "5"
    assert [round(p.value, 3) for p in r.certaindex] == [1.0, 1.0, 1.0]


async def test_step_exception_fails_only_its_program():
    class S(ct.State):
        q: str

    g = ct.Graph(S, name="boom")

    @g.step
    async def explode(s, ctx):
        if s.q == "bad":
            raise ValueError("kaboom")
        await ctx.gen("x")
        return {}

    rt = ct.Runtime(ct.ScriptedBackend(responses=["fine"]))
    good, bad = await rt.run_many([(g.compile(), {"q": "ok"}), (g.compile(), {"q": "bad"})])
    assert good.ok and not bad.ok
    assert bad.error.code == "CT201" and bad.error.step == "explode" and "kaboom" in str(bad.error)


async def test_certaindex_out_of_range_is_an_error():
    class S(ct.State):
        q: str = ""

    g = ct.Graph(S, knob=ct.Knob("iterations", cap=3), name="bad")

    @g.step
    def s1(s):
        return {}

    @g.certaindex
    def broken(s) -> float:
        return 1.5

    g.loop("s1")
    with pytest.raises(CertaindexRangeError) as e:
        await ct.Runtime("scripted").run(g.compile())
    assert e.value.code == "CT202" and e.value.step == "broken" and e.value.program.startswith("bad-")


async def test_bad_inputs_are_config_errors():
    with pytest.raises(ConfigError) as e:   # a missing input raises by default
        await ct.Runtime("scripted").run(make_sc(), wrong="x")
    assert e.value.code == "CT300" and "question" in str(e.value) and e.value.program.startswith("sc")
    r = await ct.Runtime("scripted").run(make_sc(), wrong="x", return_errors=True)   # the option: a Result
    assert r.exit_reason == "error" and r.error.code == "CT300" and "question" in str(r.error)


async def test_cancelling_run_aborts_everything():
    b = ct.ScriptedBackend(responses=["x"], latency=10.0)
    rt = ct.Runtime(b)
    task = asyncio.ensure_future(rt.run(make_sc(cap=8, fanout=4), question="q"))
    await asyncio.sleep(0.05)
    assert len(b.live_rids()) == 4
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert b.live_rids() == set() and len(b.abort_calls) == 4


async def test_sequence_probes_are_counted_as_probe_tokens():
    class C(ct.State):
        q: str
        probes: ct.Appended[list[str]] = []

    g = ct.Graph(C, name="cot")

    @g.step
    async def think(s, ctx):
        async with await ctx.sequence(s.q, max_tokens=12) as seq:
            found = []
            while not seq.finished:
                await seq.extend(4)
                found.append((await seq.probe(" answer:", max_tokens=5)).text)
        return {"probes": found}

    text = " ".join(f"w{i}" for i in range(12))
    b = ct.ScriptedBackend(responses=[text], probe=lambda t, suf: f"{len(words(t))}}}")
    r = await ct.Runtime(b).run(g.compile(), q="x")
    assert r.ok, r.error
    assert r.state.probes == ["4}", "8}", "12}"]
    assert r.tokens.main == 12 and r.tokens.probe == 3
    assert b.live_rids() == set()


async def test_sequence_chunks_and_probes_are_scheduled_under_tickets():
    """CoT chunks and probes take scheduling tickets like requests: admission limits bind them
    and the scheduler orders them (they used to go to the backend past the scheduler)."""
    class C(ct.State):
        q: str

    g = ct.Graph(C, name="cot")

    @g.step
    async def think(s, ctx):
        async with await ctx.sequence(s.q, max_tokens=8) as seq:
            while not seq.finished:
                await seq.extend(4)
                await seq.probe(" answer:", max_tokens=5)
        return {}

    class Spy(ct.Scheduler):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.rids: list[str] = []

        def ticket(self, rid, program, *a, **kw):
            self.rids.append(rid)
            return super().ticket(rid, program, *a, **kw)

    spy = Spy(limits=ct.AdmissionLimits(max_requests=1))
    inflight: list[int] = []
    waiting: list[int] = []

    def probe(text: str, suffix: str) -> str:
        inflight.append(spy.inflight)
        waiting.append(spy.queue_depth)
        return "1}"

    b = ct.ScriptedBackend(responses=[" ".join(f"w{i}" for i in range(8))], probe=probe, latency=0.01)
    rt = ct.Runtime(b, scheduler=spy)
    results = await asyncio.gather(*(rt.run(g.compile(), q=f"x{i}") for i in range(2)))
    assert all(r.ok for r in results), [r.error for r in results]
    assert sum(".probe" in rid for rid in spy.rids) == 4  # 2 probes per program, each under a ticket
    assert sum(".probe" not in rid for rid in spy.rids) == 4  # 2 chunks per program
    assert inflight and max(inflight) == 1  # one slot: a probe runs alone, admitted like a request
    assert max(waiting) >= 1  # meanwhile the other program's next piece waited for admission
    assert b.live_rids() == set() and spy.inflight == 0


def test_run_sync_inside_running_loop():
    async def inner():
        # a running loop in this thread, as in Jupyter
        return ct.Runtime(ct.ScriptedBackend(responses=["z"])).run_sync(make_sc(cap=2, fanout=2), question="q")

    r = asyncio.run(inner())
    assert r.ok and r.state.answers == ["z", "z"]


async def test_native_priority_backends_get_the_scheduling_policy_priority():
    from certa.runtime.scheduling.policies import make_policy
    b = ct.ScriptedBackend(responses=["x"], latency=0.01)
    b.capabilities.priority = True  # as SGLang backends declare
    rt = ct.Runtime(b, scheduler=ct.Scheduler(policy=make_policy("app-fifo")))
    first = asyncio.ensure_future(rt.run(make_sc(cap=2, fanout=2), question="q1"))
    await asyncio.sleep(0.005)
    await rt.run(make_sc(cap=2, fanout=2), question="q2")
    await first
    by_program: dict[str, set[float]] = {}
    for req in b.requests:
        by_program.setdefault(req.program_id, set()).add(req.priority)
    (p1,), (p2,) = by_program["sc-0"], by_program["sc-1"]  # one priority per program (gang)
    assert p1 < p2  # app-fifo: the older program is more urgent (lower = sooner)


async def test_certaindex_informs_the_remaining_work_estimate():
    seen = {}
    b = ct.ScriptedBackend(responses=["5"])
    rt = ct.Runtime(b)
    rt.events.subscribe(lambda ev: seen.setdefault(ev.data["knob"], rt.scheduler.programs[ev.program_id].est_remaining_tokens)
                        if ev.kind == "certaindex" else None)
    r = await rt.run(make_sc(cap=16, fanout=1, policy=ct.Threshold(0.9, detect_at=4)), question="q")
    assert r.exit_reason == "certaindex" and r.knob_used == 4
    # agreeing answers: the estimate at knob 3 expects a stop at the detection step (1 more step), not the cap
    assert seen[3] == pytest.approx(1.0 * (r.tokens.total / 4) * 1, rel=0.01)


# ---- one driving loop; a public API with no private arguments ------------------------------
def test_public_runtime_methods_take_no_private_argument():
    import inspect
    for name, fn in inspect.getmembers(ct.Runtime, callable):
        if name.startswith("_"):
            continue
        private = [p for p in inspect.signature(fn).parameters if p.startswith("_")]
        assert not private, f"Runtime.{name} takes private {private}"


async def test_any_input_name_reaches_the_program_and_subprograms_still_nest():
    class Echo(ct.Program):
        knob = ct.Knob("iterations", cap=1)

        def __init__(self, _parent: str = "", parent: str = ""):
            super().__init__()
            self.state = {"answer": _parent + parent}

        async def execute(self, ctx):
            self.knob_used += 1
            return False

    class Outer(Echo):
        async def execute(self, ctx):
            self.state["child"] = (await ctx.call(Echo, _parent="x", parent="y")).program_id
            return await super().execute(ctx)

    rt = ct.Runtime("scripted")
    assert (await rt.run(Echo, _parent="a", parent="b")).answer == "ab"  # once swallowed by run(_parent=)
    r = await rt.run(Outer)
    assert r.ok and r.state["child"].startswith(r.program_id + "/Echo-")


async def test_runtime_drives_through_the_shared_loop_with_its_bookkeeping_as_the_hook(monkeypatch):
    import certa.runtime.runtime as runtime_mod
    from certa.runtime import driver

    calls = []

    async def spy(program, ctx, *, on_certaindex=None, **kw):
        calls.append(program.program_id)
        return await driver.drive(program, ctx, on_certaindex=on_certaindex, **kw)

    monkeypatch.setattr(runtime_mod, "drive", spy)
    rt = ct.Runtime(ct.ScriptedBackend(responses=["5"]))
    events = []
    rt.events.subscribe(lambda ev: events.append((ev.data["knob"], ev.data["value"])) if ev.kind == "certaindex" else None)
    r = await rt.run(make_sc(cap=8, fanout=2, policy=ct.Threshold(0.9, detect_at=4)), question="q")
    assert calls == [r.program_id] and r.exit_reason == "certaindex"
    assert events == [(c.knob, c.value) for c in r.certaindex] and len(events) == 4


def test_drive_hook_sees_each_point_before_the_policy_decides():
    from certa.runtime.driver import drive, run_unsuspended

    class Count(ct.Program):
        knob = ct.Knob("iterations", cap=10)

        async def execute(self, ctx):
            self.knob_used += 1
            return True

        def update_certaindex(self):
            return {"a": self.knob_used / 10, "b": 0.3}

    seen = []
    prog = Count()
    prog.policy = ct.Threshold(0.3, detect_at=1, every=1)
    assert run_unsuspended(drive(prog, None, on_certaindex=lambda p: seen.append((p.knob, p.value)))) == "certaindex"
    assert seen == [(1, 0.1), (2, 0.2), (3, 0.3)] == [(c.knob, c.value) for c in prog.trajectory]
    assert prog.signals == {"a": 0.3, "b": 0.3}
    assert run_unsuspended(drive(Count(), None)) == "cap"  # no policy: the runtime-enforced cap


def test_run_unsuspended_refuses_a_coroutine_that_suspends():
    from certa.runtime.driver import run_unsuspended

    async def sleeps():
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="suspended"):
        run_unsuspended(sleeps())


@pytest.mark.parametrize("module", ["certa.runtime.driver", "certa.runtime.runtime"])
def test_runtime_docstring_examples_run(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


async def test_events_reach_a_listener_subscribed_after_runs_without_one():
    # the hot path skips event work while nobody ever listened (EventBus.may_listen): a
    # listener subscribed later, unsubscribed and subscribed again still gets every event
    rt = ct.Runtime(ct.ScriptedBackend(responses=["x"]))
    await rt.run(make_sc(cap=2, fanout=2), question="q")
    assert rt.events.may_listen is False
    kinds: list[str] = []
    off = rt.events.subscribe(lambda ev: kinds.append(ev.kind))
    await rt.run(make_sc(cap=2, fanout=2), question="q")
    assert Counter(kinds)["step_start"] == 2 and Counter(kinds)["request_done"] == 2
    assert Counter(kinds)["certaindex"] >= 1
    off()
    assert rt.events.may_listen is False and rt.events.active is False
    n = len(kinds)
    await rt.run(make_sc(cap=2, fanout=2), question="q")
    assert len(kinds) == n, "no events after unsubscribing"
    rt.events.subscribe(lambda ev: kinds.append(ev.kind))
    await rt.run(make_sc(cap=2, fanout=2), question="q")
    assert Counter(kinds[n:])["step_start"] == 2


async def test_branch_tasks_honour_a_task_factory_set_on_the_loop():
    # branches start as plain asyncio.Task on a default loop; a factory the user set is used
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(lp, coro, **kw):
        made.append(getattr(coro, "__qualname__", ""))
        return asyncio.Task(coro, loop=lp, **kw)

    loop.set_task_factory(factory)
    try:
        r = await ct.Runtime(ct.ScriptedBackend(responses=["x"])).run(make_sc(cap=3, fanout=3), question="q")
    finally:
        loop.set_task_factory(None)
    assert r.ok and r.knob_used == 3
    assert sum("_run_step" in name for name in made) == 3

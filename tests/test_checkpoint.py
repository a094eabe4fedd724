"""Checkpoints, interrupts and state history (issue 21 part B): stores, resume, pause, edit."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

import certa as ct
from certa.dsl import errors as E
from certa.runtime.checkpoint import Checkpoint, InterruptedResult, MemoryCheckpointer
from certa.runtime.checkpoint_sqlite import SqliteCheckpointer
from certa.runtime.errors import CheckpointError, ConfigError


class S(ct.State):
    question: str
    plan: str = ""
    samples: ct.Appended[list[str]] = []
    answer: str = ""


def build(fanout: int = 3) -> ct.CompiledGraph:
    """plan -> sample (fan-out, joined) -> vote -> finish: one request per branch, prompts name the branch."""
    g = ct.Graph(S, name="ckpt")

    @g.step
    async def plan(s, ctx):
        return {"plan": (await ctx.gen(f"plan {s.question}")).text}

    @g.step(fanout=fanout)
    async def sample(s, ctx):
        return {"samples": [(await ctx.gen(f"sample {ctx.branch} {s.plan}")).text]}

    @g.step
    async def vote(s, ctx):
        return {"answer": (await ctx.gen("vote " + " | ".join(sorted(s.samples)))).text}

    @g.step
    async def finish(s, ctx):
        return {"answer": (await ctx.gen(f"finish {s.answer}")).text}

    g.edge("plan", "sample").join("vote", after="sample").edge("vote", "finish")
    return g.compile()


def sent(backend: ct.ScriptedBackend) -> Counter:
    """Requests the backend served, per (step, branch)."""
    return Counter((r.step, r.branch) for r in backend.requests)


@pytest.fixture(params=["memory", "sqlite"])
def saver(request, tmp_path):
    s = MemoryCheckpointer() if request.param == "memory" else SqliteCheckpointer(tmp_path / "threads.db")
    yield s
    s.close()


def reference() -> ct.Result:
    return ct.Runtime(ct.ScriptedBackend()).run_sync(build(), question="q")


# ---- the stores -----------------------------------------------------------------------
def test_a_checkpoint_round_trips_through_both_stores_and_indices_must_follow(saver):
    cp = Checkpoint("t1", 0, "ckpt", "step", "sample", 3, "running", '{"question": "q", "samples": ["a"]}',
                    knob_used=2, tokens={"main": 7, "requests": 2}, next=("sample", "vote"),
                    data={"pending": [[4, "sample", {"x": [1, 2]}]], "inputs": {"question": "q"}}, created=12.5)
    saver.put(cp)
    assert saver.latest("t1") == cp and saver.history("t1") == [cp]
    assert cp.state == {"question": "q", "samples": ["a"]} and not cp.finished
    with pytest.raises(CheckpointError, match="out of order"):
        saver.put(Checkpoint("t1", 5, "ckpt", "step", None, None, "running", "{}"))
    saver.put(Checkpoint("t1", 1, "ckpt", "step", None, None, "done", "{}"))
    assert [c.index for c in saver.history("t1")] == [1, 0] and saver.latest("t1").finished
    assert saver.threads() == ["t1"] and saver.latest("nope") is None
    saver.delete("t1")
    assert saver.history("t1") == [] and saver.threads() == []


def test_sqlite_checkpoints_survive_reopening_the_file(tmp_path):
    path = tmp_path / "t.db"
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=SqliteCheckpointer(path))
    first = rt.run_sync(build(), question="q", thread_id="t1")
    again = ct.Runtime(ct.ScriptedBackend(), checkpointer=SqliteCheckpointer(path))
    assert [c.index for c in again.state_history("t1")] == [c.index for c in rt.state_history("t1")]
    rerun = again.run_sync(build(), thread_id="t1")   # a finished thread: its result, nothing sent
    assert again.backend.requests == []
    assert (rerun.answer, rerun.exit_reason, rerun.tokens.as_dict()) == (first.answer, "done", first.tokens.as_dict())


# ---- one row per completed step, newest first ------------------------------------------
def test_state_history_is_newest_first_with_one_row_per_completed_branch(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = rt.run_sync(build(), question="q", thread_id="t1")
    assert r.answer == reference().answer
    hist = rt.state_history("t1")
    assert [c.index for c in hist] == list(range(len(hist) - 1, -1, -1))
    assert [(c.source, c.step, c.branch) for c in reversed(hist)] == [
        ("input", None, None), ("step", "plan", 0), ("step", "sample", 1), ("step", "sample", 2),
        ("step", "sample", 3), ("step", "vote", 4), ("step", "finish", 5)]
    assert [c.status for c in reversed(hist)] == ["running"] * 6 + ["done"]
    assert hist[-1].state["plan"] == "" and hist[-2].state["plan"] and len(hist[2].state["samples"]) == 3
    assert hist[3].next == ("sample", "vote") or hist[3].next == ("sample",)   # in flight when it was saved
    requests = [c.tokens["requests"] for c in reversed(hist)]   # every request finished by then
    assert requests[:2] == [0, 1] and requests == sorted(requests) and requests[-1] == 6
    assert rt.get_state("t1") == hist[0] and rt.get_state_history("t1", limit=2) == hist[:2]


# ---- crash (cancel) and resume ---------------------------------------------------------
async def _crash_while(saver, step: str, branch: int, program=None, *, saved: tuple[str, int] | None = None,
                       **inputs) -> None:
    """Run until the request of (step, branch) is in flight (and the checkpoint of ``saved`` is
    written), then cancel the run: a crash at that point."""
    seen, written = asyncio.Event(), asyncio.Event()

    def latency(req):
        if (req.step, req.branch) == (step, branch):
            seen.set()
            return 3600.0
        return 0.0

    def put(cp, real=saver.put):
        real(cp)
        if saved is None or (cp.step, cp.branch) == saved:
            written.set()

    saver.put = put
    rt = ct.Runtime(ct.ScriptedBackend(latency=latency), checkpointer=saver)
    task = asyncio.ensure_future(rt.run(program or build(), thread_id="t1", **inputs))
    await seen.wait()
    await written.wait()
    task.cancel()
    del saver.put
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_run_resumes_after_a_crash_without_resending_completed_branches(saver):
    await _crash_while(saver, "sample", 3, saved=("sample", 2), question="q")
    before = saver.latest("t1")
    assert (before.step, before.status, before.next) == ("sample", "running", ("sample",))
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = await rt.run(build(), thread_id="t1")   # inputs may be omitted on resume
    ref = reference()
    assert sent(rt.backend) == Counter({("sample", 3): 1, ("vote", 4): 1, ("finish", 5): 1})
    assert r.answer == ref.answer and r.state == ref.state and r.exit_reason == "done"
    assert r.tokens.requests == ref.tokens.requests   # 3 finished before the crash + 3 after


async def test_a_loop_with_a_knob_cap_and_policy_resumes_to_the_same_result(saver):
    from .conftest import make_sc
    program = make_sc(cap=8, fanout=4)
    ref = ct.Runtime(ct.ScriptedBackend()).run_sync(program, question="q")
    await _crash_while(saver, "sample", 5, program=program, question="q")
    done_before = {(c.step, c.branch) for c in saver.history("t1") if c.step}
    assert ("sample", 0) in done_before
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = await rt.run(program, thread_id="t1", question="q")   # the same inputs are accepted
    assert not done_before & set(sent(rt.backend)) and ("sample", 5) in sent(rt.backend)
    assert (r.answer, r.state, r.knob_used, r.exit_reason) == (ref.answer, ref.state, ref.knob_used, ref.exit_reason)
    assert [p.value for p in r.certaindex] == [p.value for p in ref.certaindex]


async def test_a_failed_step_is_retried_by_the_next_run_of_the_thread(saver):
    boom = {"on": True}

    def fail(req):
        return ct.CertaError("backend down") if boom["on"] and req.step == "vote" else None

    rt = ct.Runtime(ct.ScriptedBackend(fail=fail), checkpointer=saver)
    with pytest.raises(ct.CertaError, match="backend down"):
        await rt.run(build(), question="q", thread_id="t1")
    assert saver.latest("t1").status == "running"
    boom["on"] = False
    rt.backend.requests.clear()
    r = await rt.run(build(), thread_id="t1")
    assert sent(rt.backend) == Counter({("vote", 4): 1, ("finish", 5): 1}) and r.answer == reference().answer


class Lanes(ct.State):
    seen: ct.Appended[list[tuple[str, int]]] = []
    joins: int = 0


def lanes() -> ct.CompiledGraph:
    """START sends 3 lanes (dict payloads) through work -> a -> b; ``total`` joins them all."""
    g = ct.Graph(Lanes, name="lanes")

    @g.step
    async def work(s, ctx):
        await ctx.gen(f"work {ctx.payload['lane']}")
        return {"seen": [("work", ctx.payload["lane"])]}

    @g.step
    async def a(s, ctx):
        await ctx.gen(f"a {ctx.branch}")
        return {"seen": [("a", ctx.branch)]}

    @g.step
    async def b(s, ctx):
        await ctx.gen(f"b {ctx.branch}")
        return {"seen": [("b", ctx.branch)]}

    @g.step
    def total(s):
        return {"joins": s.joins + 1}

    g.branch(ct.START, lambda s: [ct.Send("work", {"lane": i}) for i in range(3)], destinations=["work"],
             max_fanout=3)
    g.sequence("work", "a", "b").join("total", after="work")
    g.answer(lambda s: s.joins)
    return g.compile()


@pytest.mark.parametrize("crash", [(("work", 2), ("work", 1), [2, "work", {"lane": 2}]),
                                   (("a", 4), ("a", 3), [4, "a", None])])
async def test_a_crash_inside_joined_lanes_resumes_with_the_join_still_waiting_for_every_lane(saver, crash):
    (step, branch), saved, in_flight = crash
    ref = ct.Runtime(ct.ScriptedBackend()).run_sync(lanes())
    await _crash_while(saver, step, branch, program=lanes(), saved=saved)
    pending = saver.latest("t1").data["pending"]
    assert in_flight in pending and saver.latest("t1").data["groups"]   # a Send payload saved; the join waits
    done_before = {(c.step, c.branch) for c in saver.history("t1") if c.step}
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = await rt.run(lanes(), thread_id="t1")
    assert not done_before & set(sent(rt.backend))
    assert r.answer == 1 == ref.answer and sorted(r.state.seen) == sorted(ref.state.seen)
    assert isinstance(r.state.seen[0], tuple)   # tuples come back through JSON as the model's type


# ---- interrupts and human edits --------------------------------------------------------
def test_interrupt_before_pauses_then_update_state_and_a_second_run_resume(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = rt.run_sync(build(), question="q", thread_id="t1", interrupt_before=["vote"])
    assert isinstance(r, InterruptedResult) and r.exit_reason == "interrupted" and r.error is None
    assert (r.interrupt.step, r.interrupt.when, r.interrupt.next) == ("vote", "before", ("vote",))
    assert "interrupted before step 'vote'" in str(r.interrupt) and r.tokens_saved == 0
    assert len(r.state.samples) == 3 and not r.state.answer
    assert sent(rt.backend)[("vote", 4)] == 0 and r.summary()["interrupt"]["step"] == "vote"
    cp = rt.update_state("t1", {"samples": ["human"]})   # through the reducer: appended
    assert cp.source == "update" and cp.status == "interrupted" and cp.state["samples"][-1] == "human"
    assert rt.get_state("t1").interrupt.step == "vote"
    r2 = rt.run_sync(build(), thread_id="t1", interrupt_before=["vote"])   # the held branch goes past it
    assert r2.exit_reason == "done" and sent(rt.backend)[("vote", 4)] == 1
    vote_prompt = next(q.prompt for q in rt.backend.requests if q.step == "vote")
    assert "human" in vote_prompt
    assert [c.source for c in rt.state_history("t1")][:3] == ["step", "step", "update"]


def test_interrupt_after_holds_the_routing_so_an_edit_steers_what_follows(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = rt.run_sync(build(), question="q", thread_id="t1", interrupt_after=["plan"])
    assert (r.exit_reason, r.interrupt.step, r.interrupt.when) == ("interrupted", "plan", "after")
    assert set(sent(rt.backend)) == {("plan", 0)}
    rt.update_state("t1", {"plan": "EDITED"}, overwrite=True)
    r2 = rt.run_sync(build(), thread_id="t1")
    prompts = [q.prompt for q in rt.backend.requests if q.step == "sample"]
    assert len(prompts) == 3 and all(p.endswith("EDITED") for p in prompts) and r2.exit_reason == "done"


def test_interrupt_in_a_fanout_drains_the_branches_in_flight_and_the_join_runs_once(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = rt.run_sync(build(), question="q", thread_id="t1", interrupt_after=["sample"])
    assert r.exit_reason == "interrupted" and len(r.state.samples) == 3   # nothing in flight thrown away
    assert sent(rt.backend)[("vote", 4)] == 0
    r2 = rt.run_sync(build(), thread_id="t1")
    assert sent(rt.backend) == Counter({("plan", 0): 1, ("sample", 1): 1, ("sample", 2): 1, ("sample", 3): 1,
                                        ("vote", 4): 1, ("finish", 5): 1})
    assert r2.answer == reference().answer


def test_interrupt_before_the_entry_step_pauses_before_any_request(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = rt.run_sync(build(), question="q", thread_id="t1", interrupt_before=["plan"])
    assert r.interrupt.step == "plan" and rt.backend.requests == []
    rt.update_state("t1", {"question": "other"})
    assert rt.run_sync(build(), thread_id="t1").state.question == "other"


def test_update_state_is_validated_like_a_step_update(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    rt.run_sync(build(), question="q", thread_id="t1", interrupt_before=["vote"])
    with pytest.raises(E.InvalidUpdateError, match="plan"):
        rt.update_state("t1", {"plan": 3})
    with pytest.raises(E.UnknownStateKeyError):
        rt.update_state("t1", {"nope": 1})
    fresh = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)   # no run of it here: name the program
    with pytest.raises(ConfigError, match="program="):
        fresh.update_state("t1", {"plan": "x"})
    assert fresh.update_state("t1", {"plan": "x"}, program=build()).state["plan"] == "x"
    with pytest.raises(CheckpointError, match="no checkpoint"):
        rt.update_state("unknown", {"plan": "x"})


# ---- refusals ---------------------------------------------------------------------------
def test_threads_refuse_what_they_cannot_resume(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    with pytest.raises(ConfigError, match="checkpointer"):
        ct.Runtime(ct.ScriptedBackend()).run_sync(build(), question="q", thread_id="t1")
    with pytest.raises(ConfigError, match="need a thread_id"):
        rt.run_sync(build(), question="q", interrupt_before=["vote"])
    with pytest.raises(E.UnknownStepError, match="did you mean 'vote'"):
        rt.run_sync(build(), question="q", thread_id="t0", interrupt_before=["vot"])
    rt.run_sync(build(), question="q", thread_id="t1", interrupt_before=["vote"])
    with pytest.raises(CheckpointError, match="other inputs"):
        rt.run_sync(build(), question="other", thread_id="t1")
    other = ct.Graph(S, name="other")
    other.step(lambda s: {"answer": "x"}, name="only")
    with pytest.raises(CheckpointError, match="runs program 'ckpt'"):
        rt.run_sync(other.compile(), thread_id="t1")
    with pytest.raises(ConfigError, match="cannot run on a thread"):
        rt.run_sync(_Hand, thread_id="t2")


async def test_a_thread_runs_once_at_a_time_and_states_must_be_json(saver):
    rt = ct.Runtime(ct.ScriptedBackend(latency=0.01), checkpointer=saver)
    first = asyncio.ensure_future(rt.run(build(), question="q", thread_id="t1"))
    await asyncio.sleep(0)
    with pytest.raises(CheckpointError, match="already running"):
        await rt.run(build(), question="q", thread_id="t1")
    again = await rt.run(build(), question="q", thread_id="t1", return_errors=True)   # a batch's view
    assert again.exit_reason == "error" and isinstance(again.error, CheckpointError)
    assert (await first).exit_reason == "done"

    class Opaque(ct.State):
        model_config = {"arbitrary_types_allowed": True}
        thing: object = None

    g = ct.Graph(Opaque, name="opaque")
    g.step(lambda s: {"thing": object()}, name="only")
    g.answer(lambda s: None)
    with pytest.raises(CheckpointError, match="not JSON"):
        await rt.run(g.compile(), thread_id="t3")


class _Hand(ct.Program):
    async def execute(self, ctx):
        return False


def test_run_many_runs_each_item_on_its_own_thread(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    items = [(build(), {"question": q, "thread_id": f"job-{q}"}) for q in ("a", "b")]
    results = rt.run_many_sync(items)
    assert [r.exit_reason for r in results] == ["done", "done"] and saver.threads() == ["job-a", "job-b"]
    n = len(rt.backend.requests)
    assert [r.answer for r in rt.run_many_sync(items)] == [r.answer for r in results]   # finished: not rerun
    assert len(rt.backend.requests) == n

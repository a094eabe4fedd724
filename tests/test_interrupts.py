"""Interrupts (issue 40 items 8 and 12): a crash does not lose a run's ``interrupt_before``;
``ctx.interrupt(value)`` pauses a running step until ``Command(resume=...)`` continues it."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

import certa as ct
from certa.runtime.checkpoint import Command, InterruptedResult
from certa.runtime.errors import CheckpointError, ConfigError

from .test_checkpoint import _crash_while, build, saver, sent  # noqa: F401 - saver is a fixture


# ---- item 8: the interrupt survives a crash ----------------------------------------------
async def test_a_run_resumed_after_a_crash_still_pauses_at_its_interrupt(saver):
    """The docs/concepts.md example: started with interrupt_before=["vote"], crashed during a
    sample, resumed with a plain run: it pauses before vote (it used to run past it)."""
    await _crash_while(saver, "sample", 3, saved=("sample", 2), question="q", interrupt_before=["vote"])
    assert saver.latest("t1").data["interrupts"] == [["vote"], []]
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = await rt.run(build(), thread_id="t1")   # interrupt_before not given again
    assert isinstance(r, InterruptedResult) and (r.interrupt.step, r.interrupt.when) == ("vote", "before")
    assert sent(rt.backend) == Counter({("sample", 3): 1})   # the crashed branch, nothing past the interrupt
    r2 = await rt.run(build(), thread_id="t1")   # the pause ended that run's call: the next goes past it
    assert r2.exit_reason == "done" and sent(rt.backend)[("vote", 4)] == 1


async def test_interrupts_given_to_the_resuming_run_replace_the_crashed_runs(saver):
    await _crash_while(saver, "sample", 3, saved=("sample", 2), question="q", interrupt_before=["vote"])
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = await rt.run(build(), thread_id="t1", interrupt_before=[])   # explicitly none
    assert r.exit_reason == "done" and sent(rt.backend)[("vote", 4)] == 1


async def test_an_edit_of_a_crashed_thread_keeps_its_interrupts(saver):
    await _crash_while(saver, "sample", 3, saved=("sample", 2), question="q", interrupt_after=["sample"])
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    rt.update_state("t1", {"plan": "edited"}, program=build(), overwrite=True)
    r = await rt.run(build(), thread_id="t1")
    assert (r.exit_reason, r.interrupt.step, r.interrupt.when) == ("interrupted", "sample", "after")


# ---- item 12: ctx.interrupt and Command(resume=...) --------------------------------------
class Review(ct.State):
    question: str
    draft: str = ""
    verdicts: ct.Appended[list[str]] = []
    answer: str = ""


def review_graph(asks: int = 1, fanout: int = 1, sync: bool = False, catch: bool = True) -> ct.CompiledGraph:
    """draft -> review (pauses ``asks`` times per branch, ``fanout`` branches) -> finish; with
    ``catch`` the step wraps each ctx.interrupt in ``except Exception``."""
    g = ct.Graph(Review, name="review")

    @g.step
    async def draft(s, ctx):
        return {"draft": (await ctx.gen(f"draft {s.question}")).text}

    def decide(s, ctx):
        got = []
        for i in range(asks):
            if not catch:
                got.append(ctx.interrupt({"draft": s.draft, "lane": ctx.lane, "ask": i}))
                continue
            try:
                got.append(ctx.interrupt({"draft": s.draft, "lane": ctx.lane, "ask": i}))
            except Exception:   # a step's own except Exception must not swallow the pause
                got.append("swallowed")
        return {"verdicts": ["+".join(map(str, got))]}

    if sync:
        g.step(fanout=fanout, name="review")(decide)
    else:
        async def review(s, ctx):
            return decide(s, ctx)
        g.step(fanout=fanout)(review)

    @g.step
    async def finish(s, ctx):
        return {"answer": (await ctx.gen("finish " + ",".join(sorted(s.verdicts)))).text}

    g.edge("draft", "review").join("finish", after="review") if fanout > 1 else g.sequence("draft", "review", "finish")
    return g.compile()


@pytest.mark.parametrize("sync", [False, True])
def test_ctx_interrupt_pauses_the_step_and_command_resume_continues_it(saver, sync):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = rt.run_sync(review_graph(sync=sync), question="q", thread_id="t1")
    assert isinstance(r, InterruptedResult) and r.error is None and r.exit_reason == "interrupted"
    it = r.interrupt
    assert (it.step, it.when, it.next) == ("review", "during", ("review",))
    assert it.value == {"draft": r.state.draft, "lane": 0, "ask": 0} and [a.id for a in it.asks] == ["review:1:0"]
    assert "interrupted during step 'review'" in str(it) and r.summary()["interrupt"]["asks"][0]["id"] == "review:1:0"
    assert rt.get_state("t1").interrupt == it and sent(rt.backend) == Counter({("draft", 0): 1})
    r2 = rt.run_sync(review_graph(sync=sync), thread_id="t1", command=Command(resume="approve"))
    assert r2.exit_reason == "done" and r2.state.verdicts == ["approve"]
    assert sent(rt.backend) == Counter({("draft", 0): 1, ("finish", 2): 1})   # the draft is not sent again


def test_each_call_gets_its_own_answer_and_an_unanswered_one_pauses_again(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    assert rt.run_sync(review_graph(asks=2), question="q", thread_id="t1").interrupt.asks[0].id == "review:1:0"
    r = rt.run_sync(review_graph(asks=2), thread_id="t1", command=ct.Command(resume="first"))
    assert r.interrupt.value["ask"] == 1 and r.interrupt.asks[0].id == "review:1:1"   # the second call asks
    again = rt.run_sync(review_graph(asks=2), thread_id="t1")   # no answer: it asks the same again
    assert again.interrupt.asks[0].id == "review:1:1"
    done = rt.run_sync(review_graph(asks=2), thread_id="t1", command=ct.Command(resume="second"))
    assert done.exit_reason == "done" and done.state.verdicts == ["first+second"]


def test_a_fanout_pauses_once_with_every_ask_and_answers_go_by_id(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    r = rt.run_sync(review_graph(fanout=3), question="q", thread_id="t1")
    ids = [a.id for a in r.interrupt.asks]
    assert ids == ["review:1:0", "review:2:0", "review:3:0"] and [a.value["lane"] for a in r.interrupt.asks] == [0, 1, 2]
    r2 = rt.run_sync(review_graph(fanout=3), thread_id="t1", command=Command(resume={ids[0]: "a", ids[2]: "c"}))
    assert [a.id for a in r2.interrupt.asks] == [ids[1]]   # the one not answered asks again
    r3 = rt.run_sync(review_graph(fanout=3), thread_id="t1", command=Command(resume="b"))
    assert r3.exit_reason == "done" and sorted(r3.state.verdicts) == ["a", "b", "c"]
    assert sent(rt.backend)[("finish", 4)] == 1   # the join ran once, after every lane


def test_command_update_edits_the_state_before_the_step_runs_again(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    rt.run_sync(review_graph(), question="q", thread_id="t1")
    r = rt.run_sync(review_graph(), thread_id="t1", command=Command(update={"draft": "EDITED"}, resume="ok"))
    assert r.state.draft == "EDITED" and r.exit_reason == "done" and r.state.verdicts == ["ok"]
    rows = list(reversed(rt.state_history("t1")))
    edit = next(c for c in rows if c.source == "update")
    assert edit.state["draft"] == "EDITED" and edit.status == "interrupted" and rows.index(edit) == 3
    rt.run_sync(review_graph(), question="q2", thread_id="t2")
    with pytest.raises(ct.CertaError, match="CT113"):   # validated like update_state
        rt.run_sync(review_graph(), thread_id="t2", command=Command(update={"draft": 3}))


async def test_an_answer_survives_a_crash_of_the_resumed_run(saver):
    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    await rt.run(review_graph(fanout=2), question="q", thread_id="t1")
    stuck = asyncio.Event()

    def latency(req):   # the join's request never answers: the resumed run crashes there
        if req.step == "finish":
            stuck.set()
            return 3600.0
        return 0.0

    rt2 = ct.Runtime(ct.ScriptedBackend(latency=latency), checkpointer=saver)
    task = asyncio.ensure_future(rt2.run(review_graph(fanout=2), thread_id="t1", command=Command(resume="yes")))
    await stuck.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    r = await ct.Runtime(ct.ScriptedBackend(), checkpointer=saver).run(review_graph(fanout=2), thread_id="t1")
    assert r.exit_reason == "done" and r.state.verdicts == ["yes", "yes"]


def test_ctx_interrupt_is_refused_where_it_cannot_resume(saver):
    with pytest.raises(ConfigError, match="needs the program run on a thread") as err:
        ct.Runtime(ct.ScriptedBackend()).run_sync(review_graph(catch=False), question="q")
    assert (err.value.code, err.value.step) == ("CT300", "review")

    g = ct.Graph(Review, name="outer")   # its step calls the review graph as a sub-program
    g.step(lambda s, ctx: None, name="noop")

    @g.step
    async def call(s, ctx):
        return {"answer": (await ctx.call(review_graph(catch=False), question=s.question)).state.verdicts[0]}

    g.edge("noop", "call")

    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=saver)
    with pytest.raises(ConfigError, match="sub-program cannot pause"):
        rt.run_sync(g.compile(), question="q", thread_id="t1")
    with pytest.raises(CheckpointError, match="no checkpoint to resume"):
        rt.run_sync(review_graph(), thread_id="new", command=Command(resume=1))
    rt.run_sync(build(), question="q", thread_id="t2", interrupt_before=["vote"])
    with pytest.raises(CheckpointError, match="not paused in ctx.interrupt"):
        rt.run_sync(build(), thread_id="t2", command=Command(resume=1))
    with pytest.raises(ConfigError, match="Command"):
        rt.run_sync(build(), thread_id="t2", command={"resume": 1})

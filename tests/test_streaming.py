"""Runtime.stream (issue 21, streaming): updates, tokens, certaindex and events modes;
leaving early cancels the program and aborts its backend requests."""

from __future__ import annotations

import asyncio
import gc

import pytest

import certa as ct
from certa.runtime.errors import ConfigError, StepFailedError
from certa.runtime.events import Event
from certa.runtime.streaming import CertaindexUpdate, StepUpdate
from certa.runtime.token_stream import TokenChunk


class S(ct.State):
    q: str = ""
    drafts: ct.Appended[list[str]] = []
    answer: str | None = None


def fan_program(n: int = 3, tokens: int = 8) -> ct.CompiledGraph:
    """``n`` drafts in parallel, then a join that picks the answer; certaindex = drafts / n."""
    g = ct.Graph(S, name="fan", knob=ct.Knob("branches", cap=n))

    @g.step(fanout=n)
    async def draft(s, ctx):
        return {"drafts": [(await ctx.gen(f"{s.q} #{ctx.branch}", max_tokens=tokens)).text]}

    @g.step
    def pick(s):
        return {"answer": sorted(s.drafts)[0]}

    g.join("pick", after="draft")

    @g.certaindex
    def progress(s):
        return len(s.drafts) / n

    return g.compile()


def backend(**kw) -> ct.ScriptedBackend:
    kw.setdefault("responses", lambda req: f"one two three {req.prompt[-1]}")
    return ct.ScriptedBackend(**kw)


async def collect(stream) -> list:
    return [part async for part in stream]


def stream_all(program, mode, **kw) -> tuple[list, object]:
    """Every part of ``program``'s stream in ``mode`` (on the scripted backend), and its Result."""
    async def main():
        s = ct.Runtime(backend(**kw)).stream(program, mode=mode, q="Q")
        return await collect(s), s.result
    return asyncio.run(main())


def test_updates_mode_yields_each_steps_update_then_the_result():
    parts, result = stream_all(fan_program(), "updates")
    assert all(isinstance(p, StepUpdate) for p in parts)
    assert [p.step for p in parts] == ["draft"] * 3 + ["pick"]
    assert sorted(p.update["drafts"][0] for p in parts[:3]) == ["one two three 0", "one two three 1",
                                                                 "one two three 2"]
    assert parts[-1].update == {"answer": "one two three 0"}
    assert len({p.branch for p in parts}) == 4 and {p.program_id for p in parts} == {result.program_id}
    assert result.answer == "one two three 0" and result.error is None


def test_tokens_mode_streams_every_gen_word_by_word_with_its_rid_step_and_branch():
    parts, result = stream_all(fan_program(), "tokens")
    assert all(isinstance(p, TokenChunk) for p in parts)
    by_rid: dict[str, list[TokenChunk]] = {}
    for p in parts:
        by_rid.setdefault(p.rid, []).append(p)
    assert len(by_rid) == 3  # three gens
    for rid, chunks in by_rid.items():
        assert len(chunks) == 4  # "one " "two " "three " "N": one chunk per scripted token
        assert {(c.step, c.branch, c.attempt) for c in chunks} == {("draft", chunks[0].branch, 0)}
        assert rid.startswith(f"{result.program_id}:draft:{chunks[0].branch}:")
    assert sorted("".join(c.text for c in cs) for cs in by_rid.values()) == sorted(result.state.drafts)
    assert result.tokens.main == 12  # streaming changes no token count


def test_certaindex_mode_matches_the_results_trajectory():
    parts, result = stream_all(fan_program(), "certaindex")
    assert all(isinstance(p, CertaindexUpdate) for p in parts)
    assert [(p.knob, p.value, p.tokens) for p in parts] == [(p.knob, p.value, p.tokens) for p in result.certaindex]
    assert [round(p.value, 3) for p in parts][:3] == [0.333, 0.667, 1.0]


def test_events_mode_gives_raw_events_and_step_end_carries_the_update():
    events, _ = stream_all(fan_program(), "events")
    assert all(isinstance(e, Event) for e in events)
    kinds = [e.kind for e in events]
    assert kinds[0] == "program_start" and kinds[-1] == "exit"
    assert {"step_start", "step_end", "request_sent", "request_done", "certaindex"} <= set(kinds)
    ends = [e for e in events if e.kind == "step_end"]
    assert all(e.data["ok"] for e in ends)
    assert ends[-1].step == "pick" and ends[-1].data["update"] == {"answer": "one two three 0"}
    assert "token" not in kinds  # plain gens stream only in tokens mode


def test_several_modes_yield_mode_part_pairs():
    parts, _ = stream_all(fan_program(), ("updates", "certaindex"))
    assert {m for m, _ in parts} == {"updates", "certaindex"}
    assert all(isinstance(p, StepUpdate if m == "updates" else CertaindexUpdate) for m, p in parts)


def test_an_unknown_mode_is_a_config_error():
    rt = ct.Runtime(backend())
    with pytest.raises(ConfigError, match="unknown stream mode 'messages'"):
        rt.stream(fan_program(), mode="messages", q="Q")


def test_a_failing_program_raises_its_error_after_its_parts():
    g = ct.Graph(S, name="boom")

    @g.step
    async def work(s, ctx):
        await ctx.gen("x", max_tokens=2)
        raise ValueError("bad step")

    rt = ct.Runtime(backend())
    seen: list = []

    async def main():
        s = rt.stream(g.compile(), mode="events", q="Q")
        with pytest.raises(StepFailedError, match="bad step"):
            async for ev in s:
                seen.append(ev.kind)
        return s.result

    result = asyncio.run(main())
    assert seen[-1] == "exit" and result.exit_reason == "error"


def slow_backend() -> ct.ScriptedBackend:
    # 40 words, 20 ms each: a request is live for most of a second
    return ct.ScriptedBackend(responses=[" ".join(["w"] * 40)], token_latency=0.02)


def all_aborted_after(main):
    """``main(rt, be)`` run on a fresh runtime over :func:`slow_backend`; afterwards no program is
    left running and all three drafts' requests were aborted mid-stream. Returns what ``main`` did."""
    be = slow_backend()
    rt = ct.Runtime(be)
    out = asyncio.run(main(rt, be))
    assert rt.active_programs == {} and be.live_rids() == set()
    assert len(set(be.abort_calls)) == 3
    return out


def slow_stream(rt: ct.Runtime):
    """A token stream of :func:`fan_program` whose three drafts are still decoding for a while."""
    return rt.stream(fan_program(tokens=40), mode="tokens", q="Q")


def test_aclose_after_break_cancels_the_program_and_aborts_its_requests():
    async def main(rt, be):
        s = slow_stream(rt)
        async for _ in s:
            assert be.live_rids()  # the branches' requests are streaming
            break
        await s.aclose()
        return s

    assert all_aborted_after(main).result is None  # cancelled: no result


def test_async_with_block_exit_cancels_the_program():
    async def leave_early(rt, be):
        async with slow_stream(rt) as s:
            await s.__anext__()

    all_aborted_after(leave_early)


def test_a_dropped_stream_cancels_its_program():
    async def main(rt, be):
        exited = asyncio.Event()
        reasons: list[str] = []

        def on_exit(ev: Event) -> None:
            if ev.kind == "exit":
                reasons.append(ev.data["reason"])
                exited.set()

        rt.events.subscribe(on_exit)
        async for _ in slow_stream(rt):
            break  # no aclose: the stream object is dropped here
        gc.collect()
        await exited.wait()  # the program's own exit event, after its cleanup
        return reasons

    assert all_aborted_after(main) == ["cancelled"]


def test_cancelling_the_consumer_task_cancels_the_program():
    async def main(rt, be):
        started = asyncio.Event()
        s = slow_stream(rt)

        async def consume():
            async for _ in s:
                started.set()

        task = asyncio.ensure_future(consume())
        await started.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await s.aclose()  # waits for the program's cleanup (it was cancelled by the consumer)

    all_aborted_after(main)


def test_sub_program_parts_come_with_their_own_program_id():
    inner = fan_program(n=2)

    class Outer(ct.State):
        q: str = ""
        answer: str | None = None

    g = ct.Graph(Outer, name="outer")

    @g.step
    async def ask(s, ctx):
        return {"answer": (await ctx.call(inner, q=s.q)).answer}

    parts, result = stream_all(g.compile(), "updates")
    outer_id = result.program_id
    assert [p.step for p in parts if p.program_id == outer_id] == ["ask"]
    inner_ids = {p.program_id for p in parts} - {outer_id}
    assert len(inner_ids) == 1 and next(iter(inner_ids)).startswith(outer_id + "/")

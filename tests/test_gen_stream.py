"""ctx.gen(..., stream=True) (issue 21, streaming): chunks as decoded, the GenResult, token
accounting, retries, aborts, the scheduler ticket, backends that cannot stream."""

from __future__ import annotations

import asyncio

import pytest

import certa as ct
from certa.runtime.backends.base import Backend
from certa.runtime.errors import BackendError, LimitExceededError
from certa.runtime.limits import RetryPolicy, RuntimeLimits
from certa.runtime.scheduling.admission import AdmissionLimits
from certa.runtime.scheduling.scheduler import Scheduler
from certa.runtime.token_stream import TokenChunk
from certa.runtime.types import GenRequest, GenResult

TEXT = "the answer is forty two"


class S(ct.State):
    q: str = ""
    chunks: ct.Appended[list[str]] = []
    answer: str | None = None


def streaming_program(**gen_kw) -> tuple[ct.CompiledGraph, list]:
    seen: list = []
    g = ct.Graph(S, name="streamer")

    @g.step
    async def think(s, ctx):
        stream = ctx.gen(s.q, stream=True, **gen_kw)
        async for chunk in stream:
            seen.append(chunk)
        seen.append(stream.result)
        return {"chunks": [c.text for c in seen if isinstance(c, TokenChunk)], "answer": stream.result.text}

    return g.compile(), seen


def test_async_for_yields_each_piece_as_decoded_and_then_holds_the_gen_result():
    prog, seen = streaming_program(max_tokens=64)
    r = ct.Runtime(ct.ScriptedBackend(responses=[TEXT])).run_sync(prog, q="Q")
    *chunks, result = seen
    assert [c.text for c in chunks] == ["the ", "answer ", "is ", "forty ", "two"]
    assert all((c.step, c.branch, c.attempt, c.program_id) == ("think", 0, 0, r.program_id) for c in chunks)
    assert {c.rid for c in chunks} == {result.rid} and result.rid.startswith(f"{r.program_id}:think:0:")
    assert isinstance(result, GenResult) and result.text == TEXT and result.tokens == 5
    assert r.answer == TEXT and r.tokens.main == 5 and r.tokens.requests == 1  # counted once, as a plain gen


def test_streamed_and_plain_gen_count_the_same_tokens():
    g = ct.Graph(S, name="plain")

    @g.step
    async def think(s, ctx):
        return {"answer": (await ctx.gen(s.q, max_tokens=64)).text}

    plain = ct.Runtime(ct.ScriptedBackend(responses=[TEXT])).run_sync(g.compile(), q="Q")
    streamed = ct.Runtime(ct.ScriptedBackend(responses=[TEXT])).run_sync(streaming_program(max_tokens=64)[0], q="Q")
    assert plain.tokens.as_dict() == streamed.tokens.as_dict() and plain.answer == streamed.answer


def test_awaiting_a_stream_consumes_it_and_returns_the_gen_result():
    g = ct.Graph(S, name="await")

    @g.step
    async def think(s, ctx):
        out = await ctx.gen(s.q, stream=True, max_tokens=3)
        return {"answer": f"{out.text}|{out.tokens}|{out.finish_reason}"}

    r = ct.Runtime(ct.ScriptedBackend(responses=[TEXT])).run_sync(g.compile(), q="Q")
    assert r.answer == "the answer is |3|length"


class NoStream(Backend):
    """A backend with only ``generate``: the base ``generate_stream`` gives one chunk."""

    def __init__(self) -> None:
        self.live: set[str] = set()

    async def generate(self, req: GenRequest) -> GenResult:
        return GenResult(TEXT, 5, prompt_tokens=1, rid=req.rid)

    async def abort(self, rid: str) -> bool:
        return False

    def live_rids(self) -> set[str]:
        return set()


def test_a_backend_that_cannot_stream_yields_one_chunk():
    prog, seen = streaming_program()
    r = ct.Runtime(NoStream()).run_sync(prog, q="Q")
    assert [c.text for c in seen if isinstance(c, TokenChunk)] == [TEXT] and r.answer == TEXT


class FlakyStream(ct.ScriptedBackend):
    """The first attempt streams two words, then the connection drops (retryable)."""

    def __init__(self) -> None:
        super().__init__(responses=[TEXT])
        self.attempts = 0

    async def generate_stream(self, req, on_text):
        self.attempts += 1
        if self.attempts == 1:
            on_text("the ")
            on_text("answer ")
            raise BackendError("connection reset mid-stream", retryable=True)
        return await super().generate_stream(req, on_text)


def test_a_retry_streams_again_from_its_start_as_the_next_attempt():
    prog, seen = streaming_program(max_tokens=64)
    be = FlakyStream()
    r = ct.Runtime(be, retry=RetryPolicy(max_attempts=2, base_delay=0.0)).run_sync(prog, q="Q")
    *chunks, result = seen
    assert [(c.text, c.attempt) for c in chunks] == [("the ", 0), ("answer ", 0), ("the ", 1), ("answer ", 1),
                                                     ("is ", 1), ("forty ", 1), ("two", 1)]
    assert chunks[-1].rid.endswith("~r1") and result.text == TEXT
    assert r.tokens.main == 5 and r.tokens.requests == 1  # only the attempt that succeeded counts


def test_a_failed_attempts_late_text_is_dropped():
    """A fault that leaves the first attempt streaming on the engine (``disconnect``): its
    later pieces must not mix into the retry's."""
    late: list = []

    class Orphaning(ct.ScriptedBackend):
        async def generate_stream(self, req, on_text):
            if not req.rid.endswith("~r1"):
                late.append(on_text)  # the engine keeps the callback of the dropped stream
                raise BackendError("disconnect", retryable=True)
            late[0]("LATE ")  # the first attempt's text arrives while the retry streams
            return await super().generate_stream(req, on_text)

    prog, seen = streaming_program(max_tokens=64)
    ct.Runtime(Orphaning(responses=[TEXT]), retry=RetryPolicy(max_attempts=2, base_delay=0.0)).run_sync(prog, q="Q")
    assert "".join(c.text for c in seen if isinstance(c, TokenChunk)) == TEXT


def test_cancelling_the_consuming_step_aborts_the_streamed_request():
    be = ct.ScriptedBackend(responses=[" ".join(["w"] * 50)], token_latency=0.02)
    rt = ct.Runtime(be)
    first = asyncio.Event()
    g = ct.Graph(S, name="cancelled")

    @g.step
    async def think(s, ctx):
        async for _ in ctx.gen(s.q, stream=True, max_tokens=50):
            first.set()
        return {"answer": "never"}

    async def main():
        task = asyncio.ensure_future(rt.run(g.compile(), q="Q"))
        await first.wait()
        assert be.live_rids()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert be.live_rids() == set() and rt.active_programs == {} and len(be.abort_calls) == 1


def test_leaving_an_async_with_block_aborts_the_request_and_the_step_goes_on():
    be = ct.ScriptedBackend(responses=[" ".join(["w"] * 50)], token_latency=0.02)
    g = ct.Graph(S, name="early")

    @g.step
    async def think(s, ctx):
        got = []
        async with ctx.gen(s.q, stream=True, max_tokens=50) as stream:
            async for chunk in stream:
                got.append(chunk.text)
                if len(got) == 3:
                    break
        return {"answer": "".join(got), "chunks": [stream.text]}

    r = ct.Runtime(be).run_sync(g.compile(), q="Q")
    assert r.answer == "w w w " and r.error is None
    assert be.live_rids() == set() and len(be.abort_calls) == 1
    assert r.tokens.main == 0  # an aborted request's tokens are never counted (as for a cancelled gen)


def test_streamed_requests_go_through_the_scheduler():
    """Two branches stream under an admission limit of one request at a time."""
    be = ct.ScriptedBackend(responses=["a b c d e f"], token_latency=0.005)
    most: list[int] = []
    g = ct.Graph(S, name="admitted")

    @g.step(fanout=2)
    async def think(s, ctx):
        texts = []
        async for chunk in ctx.gen(s.q, stream=True, max_tokens=16):
            most.append(len(be.live_rids()))
            texts.append(chunk.text)
        return {"chunks": ["".join(texts)]}

    rt = ct.Runtime(be, scheduler=Scheduler(limits=AdmissionLimits(max_requests=1)))
    r = rt.run_sync(g.compile(), q="Q")
    assert r.state.chunks == ["a b c d e f"] * 2 and max(most) == 1


def test_limits_are_checked_before_anything_is_sent():
    prog, _ = streaming_program()
    be = ct.ScriptedBackend(responses=[TEXT])
    rt = ct.Runtime(be, limits=RuntimeLimits(max_prompt_chars=4))
    with pytest.raises(LimitExceededError, match="prompt of 10 chars"):
        rt.run_sync(prog, q="0123456789")
    assert be.requests == []


def test_nothing_is_sent_for_a_stream_never_iterated():
    be = ct.ScriptedBackend(responses=[TEXT])
    g = ct.Graph(S, name="lazy")

    @g.step
    async def think(s, ctx):
        ctx.gen(s.q, stream=True)
        return {"answer": "done"}

    assert ct.Runtime(be).run_sync(g.compile(), q="Q").answer == "done" and be.requests == []

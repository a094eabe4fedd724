"""Sync (plain ``def``) steps run in a worker thread, off the event loop (issue 20 item 7)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import certa as ct
from certa.runtime.errors import ConfigError, StepFailedError


class S(ct.State):
    q: str = ""
    done_at: float | None = None
    answer: str | None = None


def blocking_program(seconds: float = 0.5) -> ct.CompiledGraph:
    g = ct.Graph(S, name="blocking")

    @g.step
    def work(s):  # a plain def that blocks, e.g. CPU work or a sync client
        time.sleep(seconds)
        return {"answer": "slow", "done_at": time.perf_counter()}

    return g.compile()


def fast_program() -> ct.CompiledGraph:
    g = ct.Graph(S, name="fast")

    @g.step
    async def work(s, ctx):
        text = (await ctx.gen(f"Q: {s.q}", max_tokens=8)).text
        return {"answer": text, "done_at": time.perf_counter()}

    return g.compile()


def test_a_blocking_sync_step_does_not_stall_another_program_on_the_same_runtime():
    rt = ct.Runtime(ct.ScriptedBackend(responses=["42"]))
    t0 = time.perf_counter()
    slow, fast = rt.run_many_sync([(blocking_program(1.0), {}), (fast_program(), {"q": "x"})])
    assert slow.error is None and fast.error is None, (slow.error, fast.error)
    assert slow.answer == "slow" and fast.answer == "42"
    # on the loop (before) the fast program could only finish after the 1 s sleep; margins for a busy machine
    assert fast.state.done_at < slow.state.done_at, "the fast program waited for the blocking sync step"
    assert fast.state.done_at - t0 < 0.75 and slow.state.done_at - t0 >= 1.0


def test_sync_step_runs_off_the_loop_thread_and_its_return_value_and_ctx_are_used():
    g = ct.Graph(S, name="where")
    seen: dict[str, object] = {}

    @g.step
    def work(s, ctx):
        seen["thread"] = threading.current_thread() is not threading.main_thread()
        seen["step"] = ctx.step
        return {"answer": s.q.upper()}

    r = ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile(), q="abc")
    assert r.error is None and r.answer == "ABC"
    assert seen == {"thread": True, "step": "work"}


def run_one_sync_step(body, name: str):
    """The Result of a one-step graph whose plain ``def`` step runs ``body()``."""
    g = ct.Graph(S, name=name)
    g.step(lambda s: body(), name="work")
    return ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile(), return_errors=True)


def test_a_sync_step_exception_is_the_same_coded_error_as_before():
    def work():
        raise ValueError("bad input")

    r = run_one_sync_step(work, "boom")
    assert isinstance(r.error, StepFailedError) and r.error.code == StepFailedError.code
    assert r.error.step == "work" and "ValueError: bad input" in str(r.error)
    assert isinstance(r.error.__cause__, ValueError)


def test_a_certa_error_from_a_sync_step_keeps_its_type_and_is_named():
    def work():
        raise ConfigError("no such thing")

    r = run_one_sync_step(work, "coded")
    assert isinstance(r.error, ConfigError) and r.error.step == "work"


def test_a_sync_step_returning_a_non_dict_is_still_rejected():
    r = run_one_sync_step(lambda: "oops", "nondict")
    assert isinstance(r.error, StepFailedError) and "expected a dict" in str(r.error)


def test_cancelling_a_program_whose_sync_step_is_running_does_not_wait_for_the_thread():
    async def main() -> float:
        rt = ct.Runtime(ct.ScriptedBackend())
        t0 = time.perf_counter()
        task = asyncio.ensure_future(rt.run(blocking_program(0.5)))
        await asyncio.sleep(0.05)  # the loop is free while the step sleeps in its thread
        task.cancel()
        try:
            await asyncio.wait_for(task, timeout=2)
        except asyncio.CancelledError:
            pass
        return time.perf_counter() - t0

    assert asyncio.run(main()) < 0.3  # cancelled at ~0.05 s, not after the 0.5 s step

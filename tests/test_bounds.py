"""Bounds on work (issue 20): admission order under the heap, sub-program depth, steps, request timeouts."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

import certa as ct
from certa.runtime import AdmissionLimits, RetryPolicy, RuntimeLimits, Scheduler
from certa.runtime.errors import CallDepthError, ConfigError, RequestTimeoutError, StepLimitError
from certa.runtime.scheduling.policies import make_policy
from certa.runtime.scheduling.queue import key_mode
from certa.runtime.scheduling.scheduler import ProgramInfo, SchedulingPolicy


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def mixed_workload(policy: SchedulingPolicy, seed: int) -> list[str]:
    """A seeded mix of arrivals, fan-outs, releases, cancels, estimate updates and finishes;
    returns every admission (rid) in order."""
    rng, clock = random.Random(seed), Clock()
    s = Scheduler(policy, AdmissionLimits(max_requests=6, inflight_tokens=900), clock=clock)
    infos: dict[str, ProgramInfo] = {}
    waiting, running, trace = [], [], []
    for tick in range(400):
        clock.t = tick * 0.25
        op = rng.random()
        if op < 0.3 or not infos:
            pid = f"p{tick}"
            infos[pid] = info = ProgramInfo(pid, clock.t, knob_cap=rng.choice([4, 8, None]))
            s.register(info)
            for i in range(rng.randint(1, 8)):  # a fan-out (some larger than max_requests: admitted in part)
                t = s.ticket(f"{pid}-{i}", info, est_tokens=rng.choice([50, 100, 400]))
                s.submit(t)
                waiting.append(t)
        elif op < 0.45:
            info = infos[rng.choice(sorted(infos))]  # a certaindex point moved its estimate
            info.knob_used += 1
            info.certaindex = rng.random()
            info.tokens_per_step = rng.choice([50.0, 200.0])
            info.est_remaining_tokens = rng.choice([0.0, 100.0, 2000.0])
            s.rekey(info)
        elif op < 0.55 and waiting:
            t = waiting.pop(rng.randrange(len(waiting)))  # a cancelled request
            s.discard(t)
        elif op < 0.65:
            pid = rng.choice(sorted(infos))  # a program finishes
            info = infos.pop(pid)
            info.tokens, info.knob_used = rng.randint(100, 3000), max(1, info.knob_used)
            for t in [t for t in waiting if t.program is info]:
                waiting.remove(t)
                s.discard(t)
            s.unregister(pid)
        elif running:
            s.release(running.pop(rng.randrange(len(running))))
        got = s.admit()
        for t in got:
            waiting.remove(t)
        running += got
        trace += [t.rid for t in got]
    return trace


@pytest.mark.parametrize("name", ["fcfs", "app-fifo", "certa", "certa-nocd", "lpm"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_heap_admission_keeps_the_policys_order(name, seed):
    fast, reference = make_policy(name), make_policy(name)
    reference.key_stability = "dynamic"  # the old path: sort every waiting ticket by the policy's key
    assert key_mode(reference) == "dynamic"
    assert key_mode(fast) == {"lpm": "dynamic", "certa": "program", "certa-nocd": "program"}.get(name, "ticket")
    got, want = mixed_workload(fast, seed), mixed_workload(reference, seed)
    assert len(want) > 100 and got == want


def test_a_subclass_that_overrides_key_is_sorted_not_heaped():
    class Newest(SchedulingPolicy):
        def key(self, ticket, now):
            return (-ticket.enqueued, ticket.seq)

    assert key_mode(Newest()) == "dynamic" and key_mode(SchedulingPolicy()) == "ticket"
    clock = Clock()
    s = Scheduler(Newest(), AdmissionLimits(max_requests=1), clock=clock)
    info = ProgramInfo("p", 0.0)
    s.register(info)
    for i in range(3):
        clock.t = float(i)
        s.submit(s.ticket(f"r{i}", info))
    assert [t.rid for t in s.admit()] == ["r2"]


# ---- sub-program depth (issue 20 item 2) ------------------------------------------------------
class Rec(ct.State):
    depth: int = 0
    answer: str | None = None


def self_calling(base_case: int | None = None) -> ct.CompiledGraph:
    """A step that ``ctx.call``s its own graph (no base case unless ``base_case``: then the
    deepest one waits on a generation)."""
    g = ct.Graph(Rec, name="rec")

    @g.step
    async def go(s: Rec, ctx: ct.Context):
        if base_case is not None and s.depth >= base_case:
            return {"answer": (await ctx.gen("q", max_tokens=4)).text}
        return {"answer": (await ctx.call(compiled, depth=s.depth + 1)).answer}

    compiled = g.compile()
    return compiled


def assert_nothing_left(rt: ct.Runtime, backend: ct.ScriptedBackend) -> None:
    assert rt._active == {} and rt.active_programs == {} and rt.scheduler.programs == {}
    assert backend.live_rids() == set() and rt.scheduler.inflight == 0


async def test_a_graph_calling_itself_stops_at_the_depth_limit_naming_the_chain():
    backend = ct.ScriptedBackend()
    rt = ct.Runtime(backend)
    ids: list[str] = []
    rt.events.subscribe(lambda ev: ids.append(ev.program_id) if ev.kind == "program_start" else None)
    t0 = time.perf_counter()
    result = await rt.run(self_calling(), return_errors=True)
    assert time.perf_counter() - t0 < 5
    err = result.error
    assert isinstance(err, CallDepthError) and err.code == "CT206" and result.exit_reason == "error"
    limit = RuntimeLimits().max_call_depth
    assert limit == 32 and len(ids) == limit + 1  # the root and 32 nested sub-programs, no more
    chain = err.message.split(": ", 1)[1].split(" -> ")
    assert chain == ids and f"max_call_depth={limit}" in err.message and err.program == ids[-1]
    assert max(map(len, ids)) < 20, "a sub-program's id is its root's and its own, not the whole path"
    assert len(set(ids)) == len(ids) and all(i.startswith(ids[0] + "/") for i in ids[1:])
    assert_nothing_left(rt, backend)


async def test_a_bounded_recursion_within_the_limit_runs():
    backend = ct.ScriptedBackend(responses=["leaf"])
    rt = ct.Runtime(backend, limits=RuntimeLimits(max_call_depth=5))
    assert (await rt.run(self_calling(base_case=5))).answer == "leaf"
    failed = await ct.Runtime(ct.ScriptedBackend(), limits=RuntimeLimits(max_call_depth=4)).run(self_calling(5), return_errors=True)
    assert isinstance(failed.error, CallDepthError)


async def test_cancelling_an_unbounded_recursion_ends_it_and_leaves_nothing():
    """With no depth limit, the deepest program keeps starting new ones: the cancel must not race it
    (before: 57,453 programs still active 60 s later; RecursionError)."""
    backend = ct.ScriptedBackend()
    rt = ct.Runtime(backend, limits=RuntimeLimits(max_call_depth=None))
    task = asyncio.ensure_future(rt.run(self_calling()))
    while len(rt._active) < 300:
        await asyncio.sleep(0.01)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=10)
    assert done, f"cancel did not finish: {len(rt._active)} programs still active"
    assert task.cancelled()
    assert_nothing_left(rt, backend)


# ---- steps (issue 20 item 3) ------------------------------------------------------------------
class Loop(ct.State):
    question: str = "q"
    n: int = 0
    answer: str | None = None


def endless() -> ct.CompiledGraph:
    """A loop bounded only by a certaindex that never fires (no knob cap)."""
    g = ct.Graph(Loop, name="endless", knob=ct.Knob("iterations"))

    @g.step
    async def think(s: Loop, ctx: ct.Context):
        await ctx.gen(s.question, max_tokens=2)
        return {"n": s.n + 1}

    g.certaindex(lambda s: 0.0, name="never")
    g.loop("think")
    return g.compile(policy=ct.Threshold(0.9, detect_at=1, every=1))


async def test_a_loop_only_a_certaindex_bounds_stops_at_the_step_limit():
    backend = ct.ScriptedBackend()
    rt = ct.Runtime(backend, limits=RuntimeLimits(max_steps=300))
    result = await rt.run(endless(), return_errors=True)
    err = result.error
    assert isinstance(err, StepLimitError) and err.code == "CT207"
    assert err.program == result.program_id and err.step == "think" and "300 steps" in err.message
    assert result.state.n == 300 and len(backend.requests) == 300
    assert_nothing_left(rt, backend)


async def test_the_step_limit_is_on_by_default():
    assert RuntimeLimits().max_steps == 10_000
    t0 = time.perf_counter()
    result = await ct.Runtime(ct.ScriptedBackend()).run(endless(), return_errors=True)
    assert isinstance(result.error, StepLimitError) and result.state.n == 10_000
    assert time.perf_counter() - t0 < 60


# ---- request timeout (issue 20 item 3) --------------------------------------------------------
def one_gen(seq: bool = False) -> ct.CompiledGraph:
    g = ct.Graph(Loop, name="ask")

    @g.step
    async def ask(s: Loop, ctx: ct.Context):
        if seq:
            async with await ctx.sequence(s.question, max_tokens=8) as sq:
                await sq.extend(4)
            return {"n": 1}
        await ctx.gen(s.question, max_tokens=4)
        return {"n": 1}

    return g.compile()


async def test_a_backend_that_never_answers_times_out_and_is_aborted():
    backend = ct.ScriptedBackend(latency=1e6)  # never answers
    rt = ct.Runtime(backend, limits=RuntimeLimits(request_timeout=0.2))
    t0 = time.perf_counter()
    result = await rt.run(one_gen(), return_errors=True)
    assert time.perf_counter() - t0 < 3
    err = result.error
    assert isinstance(err, RequestTimeoutError) and err.code == "CT208" and err.step == "ask"
    assert len(backend.requests) == 1, "a timeout is not retried by default"
    assert backend.abort_calls == [backend.requests[0].rid]
    assert_nothing_left(rt, backend)


async def test_timeouts_are_retried_only_when_asked_and_cover_sequences():
    backend = ct.ScriptedBackend(latency=1e6)
    rt = ct.Runtime(backend, limits=RuntimeLimits(request_timeout=0.1),
                    retry=RetryPolicy(max_attempts=3, base_delay=0.0, retry_timeouts=True))
    result = await rt.run(one_gen(), return_errors=True)
    assert isinstance(result.error, RequestTimeoutError) and "gave up after 3 attempts" in result.error.message
    assert len(backend.requests) == 3
    assert_nothing_left(rt, backend)
    seq_backend = ct.ScriptedBackend(latency=1e6, probe=lambda text, suffix: "4")
    rt = ct.Runtime(seq_backend, limits=RuntimeLimits(request_timeout=0.1))
    result = await rt.run(one_gen(seq=True), return_errors=True)
    assert isinstance(result.error, RequestTimeoutError)
    assert_nothing_left(rt, seq_backend)


async def test_an_outside_cancel_is_not_turned_into_a_timeout():
    backend = ct.ScriptedBackend(latency=1e6)
    rt = ct.Runtime(backend, limits=RuntimeLimits(request_timeout=5.0))
    task = asyncio.ensure_future(rt.run(one_gen()))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_nothing_left(rt, backend)


def test_limits_are_checked():
    for bad in ({"max_call_depth": 0}, {"max_steps": -1}, {"request_timeout": 0}, {"request_timeout": float("inf")},
                {"request_timeout": True}):
        with pytest.raises(ConfigError):
            RuntimeLimits(**bad)
    assert RuntimeLimits(max_call_depth=None, max_steps=None, request_timeout=None).request_timeout is None


async def test_a_repeated_cancel_of_a_deep_tree_does_not_recurse_down_it():
    """A second cancel while a 2,000-deep tree unwinds (a second Ctrl-C) stops at the level it hits:
    it used to travel down every level's gather at once (RecursionError)."""
    depth = 2000
    backend = ct.ScriptedBackend(latency=1e6)
    rt = ct.Runtime(backend, limits=RuntimeLimits(max_call_depth=None))
    task = asyncio.ensure_future(rt.run(self_calling(base_case=depth)))
    while len(rt._active) < depth + 1:
        await asyncio.sleep(0.02)
    task.cancel()
    for _ in range(depth // 2):  # half the tree is inside its cleanup now
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=20)
    assert done and task.cancelled(), "the cancel must not fail (RecursionError) or hang"
    assert_nothing_left(rt, backend)


def test_the_timeout_holds_across_event_loops():
    """run_sync starts a new loop per call: the watchdog re-arms on each one."""
    backend = ct.ScriptedBackend(latency=1e6)
    rt = ct.Runtime(backend, limits=RuntimeLimits(request_timeout=0.1))
    for _ in range(2):
        t0 = time.perf_counter()
        with pytest.raises(RequestTimeoutError):   # raised by default
            rt.run_sync(one_gen())
        assert time.perf_counter() - t0 < 2
    assert rt.deadlines.live == 0

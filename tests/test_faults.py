"""Fault injection: retried when safe, otherwise only the faulted program fails, and it says where.

Every test runs on the scripted fake backend wrapped in :class:`FaultyBackend`.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

import certa as ct
from certa.runtime import RetryPolicy
from certa.runtime.backends.testing.faults import FAULT_KINDS, FaultyBackend
from certa.runtime.errors import BackendError, ConfigError
from certa.runtime.types import GenRequest

from .conformance import BackendConformance
from .conftest import make_sc as shared_sc

RETRYABLE = ("error_before", "error_mid", "disconnect", "timeout", "abort_race")
FAST_RETRY = RetryPolicy(max_attempts=4, base_delay=0.002, max_delay=0.02)


def make_sc(policy=None, cap=8, fanout=4):
    return shared_sc(cap, fanout, policy, max_tokens=64)


def respond(req: GenRequest) -> str:
    """Agreeing questions (``agree-N``) answer N on every branch; the others depend on the branch."""
    kind, n = req.prompt.split("-")
    value = int(n) if kind == "agree" else int(n) + req.branch % 3
    return f"let me think step by step so the answer is {value}"


def workload(n: int = 100):
    agree, split = make_sc(ct.Threshold(0.99, detect_at=4)), make_sc()
    return [(agree, {"question": f"agree-{i}"}) if i % 2 == 0 else (split, {"question": f"split-{i}"})
            for i in range(n)]


class FirstAttemptOnly(FaultyBackend):
    """Faults only first attempts, so every fault is recoverable by one retry."""

    def plan(self, rid):
        return None if "~r" in rid else super().plan(rid)


# ---- the plan ------------------------------------------------------------------------
def test_plan_is_deterministic_seeded_and_near_the_rate():
    inner = ct.ScriptedBackend(responses=["x"])
    a, b, c = (FaultyBackend(inner, rate=0.1, seed=s) for s in (1, 1, 2))
    rids = [f"p-{i}:s:0:{i % 7}" for i in range(5000)]
    plan_a = [a.plan(r) for r in rids]
    assert plan_a == [b.plan(r) for r in rids]
    assert plan_a != [c.plan(r) for r in rids]
    hits = [p for p in plan_a if p is not None]
    assert 0.08 < len(hits) / len(rids) < 0.12
    assert set(k for k, _ in hits) == set(FAULT_KINDS)
    only = FaultyBackend(inner, rate=1.0, kinds={"slow": 1.0, "fatal": 0.0})
    assert {only.plan(r)[0] for r in rids[:200]} == {"slow"}


def test_bad_fault_config_is_refused():
    inner = ct.ScriptedBackend(responses=["x"])
    for bad in (dict(rate=1.5), dict(kinds=["meteor"]), dict(kinds=[]), dict(kinds={"slow": -1.0})):
        with pytest.raises(ConfigError):
            FaultyBackend(inner, **bad)


def test_retry_delay_is_bounded_and_jittered():
    policy, rng = RetryPolicy(max_attempts=5, base_delay=0.1, max_delay=0.5), random.Random(0)
    for attempt in range(6):
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        nominal = min(0.5, 0.1 * 2 ** attempt)
        assert all(0.5 * nominal <= d < 1.5 * nominal for d in delays)
        assert len({round(d, 9) for d in delays}) > 150, "retries must be jittered"


# ---- one fault kind at a time ----------------------------------------------------------
@pytest.mark.parametrize("kind", RETRYABLE + ("slow",))
async def test_each_fault_kind_is_survived_with_exact_tokens(kind):
    clean = await ct.Runtime(ct.ScriptedBackend(responses=respond, latency=0.003)).run(
        make_sc(), question="split-5")
    inner = ct.ScriptedBackend(responses=respond, latency=0.003)
    fb = FirstAttemptOnly(inner, rate=1.0, kinds=[kind], seed=3, timeout_s=0.01, race_s=0.001)
    rt = ct.Runtime(fb, retry=FAST_RETRY)
    r = await rt.run(make_sc(), question="split-5")
    assert r.ok, r.error
    assert (r.answer, r.knob_used, r.exit_reason) == (clean.answer, clean.knob_used, clean.exit_reason)
    assert r.tokens.main == clean.tokens.main, "a retried request must not count its failed attempts' tokens"
    assert r.tokens.requests == clean.tokens.requests
    stats = fb.stats()
    assert stats["injected"] == stats["survived"] == 8, stats
    assert inner.live_rids() == set() and stats["orphans"] == 0
    if kind in ("disconnect", "timeout"):  # the engine kept these rids: the runtime must have aborted them
        assert {f.rid for f in fb.log} <= set(inner.abort_calls)


async def test_mid_stream_disconnect_aborts_the_rid_and_names_the_branch():
    inner = ct.ScriptedBackend(responses=respond, latency=5.0)  # the engine would hold the rid for 5 s
    fb = FaultyBackend(inner, rate=1.0, kinds=["disconnect"], mid_s=0.01)
    rt = ct.Runtime(fb, retry=RetryPolicy(max_attempts=2, base_delay=0.001))
    r = await asyncio.wait_for(rt.run(make_sc(cap=2, fanout=2), question="split-1", return_errors=True), 2.0)
    assert not r.ok and r.exit_reason == "error"
    err = r.error
    assert isinstance(err, BackendError) and err.code == "CT203"
    assert err.program == r.program_id and err.step == "sample" and err.branch in (0, 1)
    assert "gave up after 2 attempts" in str(err) and "connection reset" in str(err)
    assert inner.live_rids() == set(), "a failed request must be aborted on the engine"
    assert fb.stats()["orphans"] == 0


async def test_engine_side_abort_is_retried_not_returned_as_an_answer():
    inner = ct.ScriptedBackend(responses=respond, latency=0.05)
    fb = FirstAttemptOnly(inner, rate=1.0, kinds=["abort_race"], race_s=0.001)
    r = await ct.Runtime(fb, retry=FAST_RETRY).run(make_sc(cap=2, fanout=2), question="agree-4")
    assert r.ok and r.answer == "4" and r.state.answers == ["4", "4"]
    assert len(inner.aborted) == 2 and r.tokens.requests == 2


async def test_non_retryable_fault_is_not_retried():
    inner = ct.ScriptedBackend(responses=respond)
    fb = FaultyBackend(inner, rate=1.0, kinds=["fatal"])
    r = await ct.Runtime(fb, retry=FAST_RETRY).run(make_sc(cap=1, fanout=1), question="agree-1", return_errors=True)
    assert r.error is not None and r.error.code == "CT203" and "refused" in str(r.error)
    assert "gave up" not in str(r.error)
    assert fb.stats()["requests"] == 1 and inner.requests == []


async def test_retries_are_bounded_with_fresh_rids():
    fb = FaultyBackend(ct.ScriptedBackend(responses=respond), rate=1.0, kinds=["error_before"])
    r = await ct.Runtime(fb, retry=FAST_RETRY).run(make_sc(cap=1, fanout=1), question="agree-1", return_errors=True)
    assert not r.ok and "gave up after 4 attempts" in str(r.error)
    rids = [f.rid for f in fb.log]
    assert len(rids) == 4 and len(set(rids)) == 4
    assert [rid.rsplit("~", 1)[-1] for rid in rids[1:]] == ["r1", "r2", "r3"]


class CountingScheduler(ct.Scheduler):
    """Counts the tickets it hands out."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.made: list[str] = []

    def ticket(self, rid, program, *args, **kw):
        self.made.append(rid)
        return super().ticket(rid, program, *args, **kw)


@pytest.mark.parametrize("limited", [False, True])
async def test_one_ticket_per_request_across_retries_and_priority(limited):
    inner = ct.ScriptedBackend(responses=respond)
    inner.capabilities.priority = True  # as SGLang backends declare: priority comes from the same ticket
    fb = FirstAttemptOnly(inner, rate=1.0, kinds=["error_before"])
    sched = CountingScheduler(limits=ct.AdmissionLimits(max_requests=2) if limited else None)
    r = await ct.Runtime(fb, scheduler=sched, retry=FAST_RETRY).run(make_sc(cap=4, fanout=2), question="agree-3")
    assert r.ok and r.tokens.requests == 4 and len(fb.log) == 4  # 4 requests, each failed once and retried
    assert len(sched.made) == 4, sched.made
    assert sched.inflight == 0 and sched.queue_depth == 0


async def test_score_requests_are_retried_too():
    class S(ct.State):
        q: str
        p: float = 0.0

    g = ct.Graph(S, name="judge")

    @g.step
    async def judge(s, ctx):
        return {"p": (await ctx.score("is it right?")).probs["Yes"]}

    inner = ct.ScriptedBackend(responses=["x"], scores=lambda req: {"Yes": 0.75, "No": 0.25})
    fb = FirstAttemptOnly(inner, rate=1.0, kinds=["error_before"])
    r = await ct.Runtime(fb, retry=FAST_RETRY).run(g.compile(), q="q")
    assert r.ok and r.state.p == 0.75 and fb.stats()["survived"] == 1


# ---- the acceptance run: 100 programs, 10% of requests faulted -------------------------
async def test_100_programs_with_10_percent_faults():
    before = asyncio.all_tasks()
    clean = await ct.Runtime(ct.ScriptedBackend(responses=respond, latency=0.002)).run_many(workload())
    assert all(r.ok for r in clean)

    inner = ct.ScriptedBackend(responses=respond, latency=0.002)
    fb = FaultyBackend(inner, rate=0.1, seed=11, timeout_s=0.02)
    rt = ct.Runtime(fb, retry=FAST_RETRY)
    results = await rt.run_many(workload())

    by_program: dict[str, list] = {}
    for f in fb.log:
        by_program.setdefault(f.program_id, []).append(f)
    failed = [r for r in results if not r.ok]
    for r in failed:  # only faulted programs fail, with an error that says where
        err = r.error
        assert isinstance(err, BackendError) and err.code == "CT203", err
        assert err.program == r.program_id and err.step == "sample" and isinstance(err.branch, int)
        assert f"program={r.program_id} step=sample branch={err.branch}" in str(err)
        faults = by_program[r.program_id]
        logical = Counter(f.rid.split("~")[0] for f in faults)
        assert any(f.kind == "fatal" for f in faults) or max(logical.values()) >= FAST_RETRY.max_attempts
    for c, r in zip(clean, results):  # everyone else finishes exactly as without faults
        if r.ok:
            assert (r.answer, r.exit_reason, r.knob_used) == (c.answer, c.exit_reason, c.knob_used), r.program_id
            if r.exit_reason == "cap":
                assert r.tokens.main == c.tokens.main and r.tokens.requests == c.tokens.requests

    stats = fb.stats()
    print(f"\nfaults: {stats['requests']} requests, {stats['injected']} injected, {stats['survived']} survived "
          f"{stats['injected_by_kind']}; programs ok {len(results) - len(failed)}/{len(results)}")
    assert stats["injected"] >= 50 and set(stats["injected_by_kind"]) == set(FAULT_KINDS)
    assert 0 < len(failed) < 15
    assert stats["survived"] >= stats["injected"] - stats["injected_by_kind"].get("fatal", 0) - 3 * len(failed) - 10
    exits = {r.program_id: r.exit_reason for r in results}
    for rid, kinds in fb.unsurvived().items():  # a fault not survived belongs to a failed or early-exited program
        assert exits[rid.split(":")[0]] in ("error", "certaindex"), (rid, kinds)
    assert inner.live_rids() == set() and stats["orphans"] == 0 and rt.active_programs == {}
    await rt.close()
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set(), "no task may outlive the run"


# ---- a fault-free wrapper is a conforming backend ------------------------------------
class TestFaultyBackendWithoutFaults(BackendConformance):
    backend_name = "faulty"
    long_tokens = 400

    @pytest.fixture
    async def backend(self):
        counting = " ".join(f"n{i}," for i in range(1, 500))
        b = FaultyBackend(ct.ScriptedBackend(responses=lambda r: counting, token_latency=0.0005), rate=0.0)
        yield b
        await b.close()

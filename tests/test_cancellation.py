"""Cancelling a run (asyncio cancel, Ctrl-C in the CLI) aborts every in-flight request: no live rid.

On the scripted fake backend (with queued, retrying, sequence, score and nested-program
requests in flight) and, when it and its model are installed, on the real llama.cpp engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

import certa as ct
from certa.runtime import AdmissionLimits, RetryPolicy, Scheduler
from certa.runtime.backends.testing.faults import FaultyBackend

from .conftest import make_sc, never

ROOT = pathlib.Path(__file__).resolve().parent.parent


def sc_graph(name="sc", cap=8, fanout=4):
    return make_sc(cap, fanout, name=name, max_tokens=32, certaindex=never)


class Notes(ct.State):
    question: str
    notes: ct.Appended[list[str]] = []


def mixed_workload(n: int):
    """Programs that hold every kind of in-flight work: gens, sequences + probes, scores, sub-programs."""
    sc = sc_graph()
    inner = sc_graph("inner", cap=2, fanout=2)
    g = ct.Graph(Notes, knob=ct.Knob("iterations", cap=3), name="mixed")

    @g.step(fanout=3)
    async def work(s, ctx):
        if ctx.branch % 3 == 0:
            async with await ctx.sequence(s.question, max_tokens=40) as seq:
                while not seq.finished:
                    await seq.extend(8)
                    await seq.probe(" answer:", max_tokens=3)
            return {"notes": [seq.text[-10:]]}
        if ctx.branch % 3 == 1:
            return {"notes": [str((await ctx.score(s.question)).probs["Yes"])]}
        return {"notes": [str((await ctx.call(inner, question=s.question)).answer)]}

    g.certaindex(never)
    return [(sc if i % 2 else g.compile(), {"question": f"q{i}"}) for i in range(n)]


def latency(req) -> float:
    return 0.001 + hashlib.sha256(req.rid.encode()).digest()[0] / 255 * 0.03


def assert_nothing_left(rt: ct.Runtime, inner: ct.ScriptedBackend, fb: FaultyBackend | None = None) -> None:
    assert inner.live_rids() == set(), "no rid may stay live after cancel"
    assert rt.active_programs == {}
    assert rt.scheduler.queue_depth == 0 and rt.scheduler.inflight == 0 and rt.scheduler.programs == {}
    if fb is not None:
        assert fb.stats()["orphans"] == 0


@pytest.mark.parametrize("delay", [0.0, 0.003, 0.012, 0.04])
async def test_cancel_mid_run_aborts_every_kind_of_in_flight_work(delay):
    before = asyncio.all_tasks()
    text = " ".join(f"w{i}" for i in range(40))
    inner = ct.ScriptedBackend(responses=lambda r: f"{text} {r.branch}", latency=latency, probe=lambda t, s: "7}",
                               scores=lambda r: {"Yes": 0.5, "No": 0.5})
    fb = FaultyBackend(inner, rate=0.2, kinds=["error_before", "disconnect", "timeout", "slow"], seed=5,
                       timeout_s=0.01)
    rt = ct.Runtime(fb, scheduler=Scheduler(limits=AdmissionLimits(max_requests=12)),
                    retry=RetryPolicy(max_attempts=5, base_delay=0.01))
    task = asyncio.ensure_future(rt.run_many(mixed_workload(30)))
    await asyncio.sleep(delay)
    if delay >= 0.012:
        assert inner.live_rids(), "the cancel should land while requests are in flight"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_nothing_left(rt, inner, fb)
    assert set(inner.aborted) <= set(inner.abort_calls)
    twice = [rid for rid, n in Counter(inner.abort_calls).items() if n > 1]
    assert twice == [], "the runtime aborts a request once (ProgramRun.abort owns it)"
    await rt.close()
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set(), "no task may outlive the cancelled run"


async def test_cancel_while_requests_wait_in_the_scheduler_queue():
    inner = ct.ScriptedBackend(responses=["a b c"], latency=5.0)
    rt = ct.Runtime(inner, scheduler=Scheduler(limits=AdmissionLimits(max_requests=2)))
    task = asyncio.ensure_future(rt.run_many([(sc_graph(), {"question": "q"})] * 5))
    await asyncio.sleep(0.05)
    assert len(inner.live_rids()) == 2 and rt.scheduler.queue_depth == 18
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_nothing_left(rt, inner)
    assert len(inner.requests) == 2, "queued requests never reach the backend"
    assert {r.rid for r in inner.requests} <= set(inner.abort_calls)


async def test_cancel_during_retry_backoff_leaves_nothing_live():
    inner = ct.ScriptedBackend(responses=["x"], latency=0.001)
    fb = FaultyBackend(inner, rate=1.0, kinds=["disconnect"], mid_s=0.001)
    rt = ct.Runtime(fb, retry=RetryPolicy(max_attempts=10, base_delay=10.0, max_delay=10.0))
    task = asyncio.ensure_future(rt.run(sc_graph(cap=4, fanout=4), question="q"))
    await asyncio.sleep(0.05)  # every branch failed once and sleeps before its retry
    assert fb.stats()["injected"] == 4 and inner.live_rids() == set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_nothing_left(rt, inner, fb)


# ---- Ctrl-C in the CLI ---------------------------------------------------------------
SLOW_PROGRAM = '''
    import atexit, json, os, pathlib
    import certa as ct

    class S(ct.State):
        question: str
        answers: ct.Appended[list[str]] = []

    g = ct.Graph(S, knob=ct.Knob("branches", cap=4), name="slow")
    _backend = []

    @g.step(fanout=4)
    async def sample(s, ctx):
        if not _backend:  # test only: certa run has no latency option, so slow the scripted fake down
            _backend.append(ctx.run.backend)
            ctx.run.backend._latency = 60.0
        with open(os.environ["CT_STARTED"], "a") as f:  # one line per branch about to send
            f.write("x\\n")
        out = await ctx.gen(s.question, max_tokens=8)
        return {"answers": [out.text]}

    @g.certaindex
    def never(s):
        return 0.0

    g.loop("sample")
    program = g.compile()

    @atexit.register
    def _report():
        if _backend:
            b = _backend[0]
            pathlib.Path(os.environ["CT_REPORT"]).write_text(json.dumps(
                {"live": sorted(b.live_rids()), "sent": [r.rid for r in b.requests], "abort_calls": b.abort_calls}))
'''


@pytest.mark.slow
def test_ctrl_c_in_cli_aborts_in_flight_requests(tmp_path):
    prog = tmp_path / "slow_prog.py"
    prog.write_text(textwrap.dedent(SLOW_PROGRAM))
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(6)))
    env = dict(os.environ, CT_STARTED=str(tmp_path / "started"), CT_REPORT=str(tmp_path / "report.json"))
    proc = subprocess.Popen([sys.executable, "-m", "certa", "run", f"{prog}:program", "--backend", "scripted",
                             "--dataset", str(data), "--journal", str(tmp_path / "j.jsonl"), "--concurrency", "2"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        started = tmp_path / "started"
        while not (started.exists() and started.read_text().count("\n") >= 8):  # both programs' 4 branches
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the programs never started"
            time.sleep(0.02)
        time.sleep(0.2)  # their requests reach the (60 s) backend
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 8, "Ctrl-C must give the shell back within seconds"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report["sent"]) == 8
    assert report["live"] == [] and set(report["sent"]) <= set(report["abort_calls"])
    assert (tmp_path / "j.jsonl").read_text() == "", "nothing finished, nothing journaled"


# ---- the real llama.cpp engine --------------------------------------------------------
@pytest.fixture
async def llamacpp_backend():
    """The embedded engine on the 0.5B model (skips when llama.cpp or the model is absent)."""
    llamacpp = pytest.importorskip("certa.runtime.backends.llamacpp.backend", reason="llama.cpp backend not available")
    from certa.runtime import models
    small = models.KNOWN_MODELS["qwen2.5-coder-0.5b"]
    if models.locate(small)[0] == "missing":  # in the cache, or installed as packages
        pytest.skip(f"the 0.5B model is not installed ({small.pip_hint})")
    backend = llamacpp.LlamaCppBackend(model="qwen2.5-coder-0.5b", n_ctx=2048, n_seq=8)
    yield backend
    await backend.close()


@pytest.mark.model
@pytest.mark.slow
async def test_cancel_aborts_in_flight_requests_on_llamacpp_engine(llamacpp_backend):
    backend = llamacpp_backend
    g = ct.Graph(Notes, knob=ct.Knob("branches", cap=6), name="engine")

    @g.step(fanout=3)
    async def think(s, ctx):
        if ctx.branch == 0:
            async with await ctx.sequence(s.question, max_tokens=400, chat=True) as seq:
                while not seq.finished:
                    await seq.extend(16)
                    await seq.probe(" The answer is \\boxed{", max_tokens=4)
            return {"notes": [seq.text]}
        out = await ctx.gen(s.question, max_tokens=400, temperature=0.7, seed=ctx.branch, chat=True)
        return {"notes": [out.text]}

    g.certaindex(never)
    g.loop("think")
    rt = ct.Runtime(backend)
    engine_aborts: list[str] = []
    real_abort = backend.engine.abort
    backend.engine.abort = lambda rid: engine_aborts.append(rid) or real_abort(rid)
    q = "Write a long story about counting sheep, one sheep per sentence."
    task = asyncio.ensure_future(rt.run_many([(g.compile(), {"question": q})] * 2))
    deadline = time.monotonic() + 60
    while len(backend.live_rids()) < 4:  # several requests decoding at once
        assert not task.done(), task.result()
        assert time.monotonic() < deadline, "the engine never got busy"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 5
    while backend.live_rids() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert backend.live_rids() == set(), "the engine still holds rids after cancel"
    assert engine_aborts and len(engine_aborts) == len(set(engine_aborts)), \
        f"each request is aborted once, by the runtime: {Counter(engine_aborts).most_common(3)}"
    assert rt.active_programs == {}
    out = await backend.generate(ct.GenRequest(prompt="2+2=", max_tokens=4, rid="after-cancel"))
    assert out.tokens > 0, "the engine must keep serving after a cancel"


@pytest.mark.model
async def test_llamacpp_orders_each_request_by_its_one_scheduler_ticket(llamacpp_backend):
    backend = llamacpp_backend
    made: list = []

    class Counting(Scheduler):
        def ticket(self, *args, **kw):
            made.append(super().ticket(*args, **kw))
            return made[-1]

    jobs: list = []
    real_submit = backend.engine.submit
    backend.engine.submit = lambda job: jobs.append(job) or real_submit(job)
    rt = ct.Runtime(backend, scheduler=Counting(limits=AdmissionLimits(max_requests=2)))
    r = await rt.run(sc_graph(cap=4, fanout=4), question="Say one word.")
    assert r.ok and r.tokens.requests == 4
    assert len(made) == 4 and len(jobs) == 4, "one ticket per request: none made by the engine"
    assert all(any(j.ticket is t for t in made) and j.owned for j in jobs)

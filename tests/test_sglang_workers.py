"""Many SGLang workers: certa's client-side routing (affinity, health checks, failover,
re-admission) and the REAL SGLang Model Gateway (``smg`` from PyPI) in front of three fake
SGLang workers, all on 127.0.0.1.

The gateway test needs the ``smg`` executable (``pip install smg==1.13.0``; ``.ci/run``
installs it) on PATH or in ``CERTA_SMG``; without it the test skips with the reason. The
fake workers serve what the gateway probes when it registers a worker (``/health``,
``/v1/models`` with ``owned_by: sglang``, ``/server_info``, ``/model_info``, ``/version``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time

import pytest

import certa.runtime as rt_mod
from certa.runtime.limits import RetryPolicy
from certa.runtime.types import GenRequest, ScoreRequest

from .conftest import stop_process
from .fakes.sglang_fake import FakeSGLangConfig
from .fakes.sglang_fake_http import FakeSGLangServer

httpx = pytest.importorskip("httpx", reason="the HTTP backends need httpx (pip install 'certa[http]')")
from certa.runtime.backends.http_common import ROUTING_HEADER, wire_rid  # noqa: E402
from certa.runtime.backends.sglang.http import SGLangHTTPBackend  # noqa: E402

W = wire_rid


async def _workers(n: int = 3, **cfg) -> list[FakeSGLangServer]:
    cfg = {"step_seconds": 0.005, "disconnect_abort_delay": 0.2, **cfg}
    return [await FakeSGLangServer(FakeSGLangConfig(**cfg), name=f"w{i}").start() for i in range(n)]


async def _until(cond, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met in {timeout} s")
        await asyncio.sleep(0.01)


def _holder(srvs, rid: str) -> list[str]:
    return [s.name for s in srvs if any(r.get("rid") == W(rid) for r in s.core.received)]


def _programs_per_worker(b: SGLangHTTPBackend, per_worker: int = 1) -> dict[str, list[str]]:
    """Program ids such that every worker is the first choice of ``per_worker`` of them."""
    chosen: dict[str, list[str]] = {w: [] for w in b.workers}
    for i in range(10_000):
        prog = f"prog{i}"
        first = b.pool.ranked(prog)[0]
        if len(chosen[first]) < per_worker:
            chosen[first].append(prog)
        if min(len(v) for v in chosen.values()) >= per_worker:
            return chosen
    raise AssertionError("no program set covers every worker")


# ---- the routing key ------------------------------------------------------------------------------
async def test_every_request_carries_the_program_routing_key():
    (srv,) = await _workers(1)
    b = SGLangHTTPBackend(srv.url)
    await b.generate(GenRequest(prompt="q", max_tokens=2, rid="r1", program_id="prog-A"))
    await b.generate(GenRequest(prompt="q", max_tokens=2, rid="r2", program_id="prog-A", chat=True))
    seq = await b.open_sequence(GenRequest(prompt="q", max_tokens=4, rid="r3", program_id="prog-A"))
    await seq.extend(2)
    await seq.probe(" answer:", max_tokens=2)
    await b.score(ScoreRequest(prompt="Yes or No", rid="r4", program_id="prog-A"))
    await b.generate(GenRequest(prompt="q", max_tokens=2, rid="r5", program_id="ünï prog"))
    sent = [r.headers.get(ROUTING_HEADER.lower()) for r in srv.http.requests if r.method == "POST"]
    assert sent[:5] == ["prog-A"] * 5 and sent[5] and sent[5].isascii() and sent[5] != "prog-A"
    await b.close()
    await srv.close()


# ---- client-side routing: health checks, failover, re-admission -------------------------------
async def test_dead_worker_fails_over_to_the_next_on_the_ring_and_is_readmitted():
    srvs = await _workers(3)
    by_url = {s.url: s for s in srvs}
    b = SGLangHTTPBackend(urls=[s.url for s in srvs], health_interval=0.05)
    progs = _programs_per_worker(b, 2)
    victim = b.workers[0]
    port = by_url[victim].port
    await by_url[victim].close()  # dies while idle
    for prog in progs[victim]:
        out = await b.generate(GenRequest(prompt="q", max_tokens=3, rid=f"{prog}-a", program_id=prog))
        assert out.tokens == 3 and out.finish_reason == "length"  # nothing lost
        assert _holder(srvs, f"{prog}-a") == [by_url[b.pool.ranked(prog)[1]].name]  # the next on ITS ring
    others = [p for w, ps in progs.items() if w != victim for p in ps]
    for prog in others:  # the other programs did not move
        await b.generate(GenRequest(prompt="q", max_tokens=2, rid=f"{prog}-a", program_id=prog))
        assert _holder(srvs, f"{prog}-a") == [by_url[b.pool.ranked(prog)[0]].name]
    assert victim in b.pool.down and b.metrics()["failovers"] >= 1
    await by_url[victim].start(port)  # back on the same address
    await _until(lambda: victim not in b.pool.down, what="re-admission by the health probe")
    prog = progs[victim][0]
    await b.generate(GenRequest(prompt="q", max_tokens=2, rid=f"{prog}-back", program_id=prog))
    assert _holder(srvs, f"{prog}-back") == [by_url[victim].name] and b.metrics()["workers_readmitted"] == 1
    await b.close()
    for s in srvs:
        await s.close()


async def test_a_single_url_is_marked_up_again_by_a_good_request():
    (srv,) = await _workers(1)
    port = srv.port
    await srv.close()
    b = SGLangHTTPBackend(srv.url)  # one URL (e.g. a gateway): no prober, nothing to fail over to
    with pytest.raises(Exception) as e:
        await b.generate(GenRequest(prompt="q", max_tokens=1, rid="x1", program_id="p"))
    assert getattr(e.value, "retryable", False) and b.metrics()["workers_down"] == 1
    await srv.start(port)
    await b.generate(GenRequest(prompt="q", max_tokens=1, rid="x2", program_id="p"))
    assert b.metrics()["workers_down"] == 0 and b.metrics()["workers_readmitted"] == 1
    await b.close()
    await srv.close()


async def test_health_probes_mark_a_silent_worker_down_before_any_request_fails():
    srvs = await _workers(2)
    b = SGLangHTTPBackend(urls=[s.url for s in srvs], health_interval=0.05)
    await b.generate(GenRequest(prompt="q", max_tokens=1, rid="warm", program_id="p"))  # starts the prober
    await srvs[1].close()
    await _until(lambda: srvs[1].url in b.pool.down, what="probe-based mark-down")
    assert b.metrics()["health_probes_failed"] >= 2 and b.metrics()["failovers"] == 0
    await b.close()
    await srvs[0].close()


class _Steps(rt_mod.Program):
    """A program of ``n`` sequential generation steps (each one request to the backend)."""

    knob = rt_mod.Knob("iterations", cap=1)

    def __init__(self, n: int = 4, tokens: int = 30):
        super().__init__()
        self.n_steps, self.n_tokens = n, tokens
        self.state = {"outs": []}

    async def execute(self, ctx):
        for i in range(self.n_steps):
            out = await ctx.gen(f"question of {self.program_id} step {i}", max_tokens=self.n_tokens)
            self.state["outs"].append((out.tokens, out.finish_reason))
        self.state["answer"] = "done"
        self.knob_used += 1
        return False


async def _run_programs(backend, srvs, n_programs: int = 6, retry: RetryPolicy | None = None):
    """Run ``n_programs`` through the Runtime, kill the worker serving most of them mid-stream;
    returns the results and the killed worker."""
    runtime = rt_mod.Runtime(backend, retry=retry or RetryPolicy(max_attempts=4, base_delay=0.05))
    runs = [asyncio.ensure_future(runtime.run(_Steps())) for _ in range(n_programs)]
    await _until(lambda: sum(len(s.core.running) for s in srvs) >= n_programs, what="all programs running")
    victim = max(srvs, key=lambda s: len(s.core.running))
    await victim.close()  # killed mid-stream
    return await asyncio.wait_for(asyncio.gather(*runs), 60), victim


async def test_a_killed_workers_programs_finish_on_the_others_client_side():
    srvs = await _workers(3)
    b = SGLangHTTPBackend(urls=[s.url for s in srvs], health_interval=0.1)
    results, victim = await _run_programs(b, srvs)
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert all(r.state["outs"] == [(30, "length")] * 4 for r in results)  # every step, in full
    assert victim.url in b.pool.down
    await b.close()
    for s in srvs:
        await s.close()


# ---- the real gateway ---------------------------------------------------------------------------
def _smg() -> str:
    exe = os.environ.get("CERTA_SMG") or shutil.which("smg")
    if not exe:
        pytest.skip("SGLang Model Gateway not installed (pip install smg==1.13.0, or set CERTA_SMG)")
    try:
        subprocess.run([exe, "launch", "--help"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the smg executable {exe} does not run here: {exc}")
    return exe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gateway_command(exe: str, port: int, workers: list[str]) -> list[str]:
    """The gateway as docs/backends.md starts it (consistent hashing on X-SMG-Routing-Key)."""
    return [exe, "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
            "--policy", "consistent_hashing", "--health-check-interval-secs", "1",
            "--health-failure-threshold", "1", "--health-success-threshold", "1", "--log-level", "warn"]


@pytest.fixture
async def gateway(tmp_path):
    exe = _smg()
    srvs = await _workers(3, step_seconds=0.01)
    port = _free_port()
    log = open(tmp_path / "smg.log", "wb")
    proc = subprocess.Popen(gateway_command(exe, port, [s.url for s in srvs]), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=2.0) as c:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    pytest.skip(f"smg exited with {proc.returncode}: {(tmp_path / 'smg.log').read_text()[-300:]}")
                try:
                    ws = (await c.get(url + "/workers")).json()["workers"]
                    if sum(1 for w in ws if w["is_healthy"]) == 3:
                        break
                except (httpx.HTTPError, ValueError, KeyError):
                    pass
                if time.monotonic() > deadline:
                    pytest.fail("smg did not register the 3 workers in 30 s")
                await asyncio.sleep(0.2)
        yield url, srvs
    finally:
        stop_process(proc)
        log.close()
        for s in srvs:
            await s.close()


async def test_behind_the_real_gateway_affinity_aborts_and_failover(gateway):
    url, srvs = gateway
    b = SGLangHTTPBackend(url)  # one URL: the gateway routes by the X-SMG-Routing-Key certa sends
    owner: dict[str, str] = {}
    for i in range(9):  # affinity: all of a program's requests on one worker
        prog = f"prog{i}"
        for j in range(2):
            await b.generate(GenRequest(prompt=f"{prog} q", max_tokens=2, rid=f"{prog}-{j}", program_id=prog))
        seq = await b.open_sequence(GenRequest(prompt=f"{prog} q", max_tokens=4, rid=f"{prog}-s", program_id=prog))
        await seq.extend(2)
        await seq.probe(" answer:", max_tokens=2)
        holders = {s.name for s in srvs for r in s.core.received if r["rid"].startswith(prog + "-")}
        assert len(holders) == 1, f"{prog} was split over {holders}"
        owner[prog] = holders.pop()
        assert {r["priority"] for s in srvs for r in s.core.received if r["rid"].startswith(prog + "-")} == {0}
    assert len(set(owner.values())) >= 2  # and programs spread over the workers
    # abort: the request stops on the worker that runs it (smg has no /abort_request; closing
    # the stream is seen by that worker as a client disconnect)
    task = asyncio.ensure_future(b.generate(GenRequest(prompt="long", max_tokens=10**6, rid="long-1",
                                                       program_id="prog0")))
    runner = next(s for s in srvs if s.name == owner["prog0"])
    await _until(lambda: W("long-1") in runner.core.states, what="the long request running")
    assert await b.abort("long-1") is True and (await task).finish_reason == "abort"
    await _until(lambda: W("long-1") not in runner.core.states, what="the worker dropping the aborted request")
    assert [s.name for s in srvs if any(r["rid"] == W("long-1") for r in s.core.received)] == [runner.name]
    assert b.metrics()["abort_failures"] == 0
    # a killed worker's programs finish on the others, nothing lost
    # the gateway's health check runs every second: retries (bounded) outlast its detection
    results, _ = await _run_programs(b, srvs, retry=RetryPolicy(max_attempts=6, base_delay=0.2, max_delay=1.0))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert all(r.state["outs"] == [(30, "length")] * 4 for r in results)
    await b.close()


def test_gateway_command_in_the_docs_matches_the_test():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "backends.md").read_text()
    cmd = " ".join(gateway_command("smg", 30000, [f"http://127.0.0.1:3000{i}" for i in (1, 2, 3)]))
    flat = " ".join(doc.replace("\\\n", " ").split())
    assert " ".join(cmd.split()) in flat, cmd

"""SGLang backends against a CONTRACT FAKE of SGLang's request semantics (no real SGLang here).

The fake (tests/fakes/sglang_fake.py, routes in sglang_fake_http.py) reproduces, as read from
the sglang==0.5.23 wheel: rid/priority fields, fcfs/lof priority ordering and the start-up
refusal of other policies with priority, the tokenizer manager's exact-rid abort gate in front
of the scheduler's PREFIX match, seeds honoured only with deterministic inference, in-stream
errors and aborts, ids without text in Engine logprobs, the admin key on /abort_request.
The real-engine run is tests/test_sglang_gpu.py (GPU only); many workers and the real gateway
are in tests/test_sglang_workers.py; the issue-22 fidelity checks in tests/test_sglang_fidelity.py.
"""

from __future__ import annotations

import asyncio

import pytest

from certa.runtime.errors import BackendError, ConfigError
from certa.runtime.types import GenRequest, ScoreRequest

from .conformance import BackendConformance
from .fakes.sglang_fake import FakeSGLangConfig
from .fakes.sglang_fake_http import FakeEngine, FakeSGLangServer

pytest.importorskip("httpx", reason="the HTTP backends need httpx (pip install 'certa[http]')")
from certa.runtime.backends.sglang.engine import ENGINE_DEFAULTS, SGLangEngineBackend  # noqa: E402
from certa.runtime.backends.sglang.http import PriorityGate, SGLangHTTPBackend, sglang_priority  # noqa: E402
from certa.runtime.backends.http_common import wire_rid  # noqa: E402

FAST = dict(step_seconds=0.002)
W = wire_rid  # what certa sends for a rid


async def _server(**cfg) -> FakeSGLangServer:
    return await FakeSGLangServer(FakeSGLangConfig(**{**FAST, **cfg})).start()


async def _until(cond, timeout=3.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


async def _running_pair(srv, b, rid_x: str, rid_y: str) -> tuple[asyncio.Future, asyncio.Future]:
    """Start two requests that run until aborted (prompts "x" and "y") and wait until ``srv`` runs both."""
    pair = tuple(asyncio.ensure_future(b.generate(GenRequest(prompt=prompt, max_tokens=10_000, rid=rid)))
                 for prompt, rid in (("x", rid_x), ("y", rid_y)))
    await _until(lambda: len(srv.core.running) == 2)
    return pair


# ---- conformance ---------------------------------------------------------------------------------
HTTP_SETUPS = {  # (fake server config, backend options): the server orders by priority, or certa does
    "server-priority": (dict(enable_priority_scheduling=True), dict()),
    "client-ordering": (dict(enable_priority_scheduling=False, incremental_streaming_output=True),
                        dict(server_priority=False, max_in_flight=2, incremental_output=True)),
}


class TestSGLangHTTPConformance(BackendConformance):
    backend_name = "sglang-http"
    @pytest.fixture(params=list(HTTP_SETUPS.values()), ids=list(HTTP_SETUPS))
    async def backend(self, request):
        server_cfg, backend_kw = request.param
        srv = await _server(**server_cfg, enable_deterministic_inference=True)
        b = SGLangHTTPBackend(srv.url, server_deterministic=True, **backend_kw)
        yield b
        await b.close()
        await srv.close()


class TestSGLangEngineConformance(BackendConformance):
    backend_name = "sglang"
    @pytest.fixture
    async def backend(self):
        b = SGLangEngineBackend(engine=FakeEngine(FakeSGLangConfig(enable_priority_scheduling=True,
                                                                   enable_deterministic_inference=True, **FAST)))
        yield b
        await b.close()


# ---- request mapping -----------------------------------------------------------------------------
def test_priority_mapping():
    assert sglang_priority(3.0) == -3 and sglang_priority(3.0, low_values_first=True) == 3
    assert sglang_priority(0.4, scale=10) == -4 and sglang_priority(1e20) == -(2**31 - 1)
    b = SGLangHTTPBackend("http://127.0.0.1:1", priority_map=lambda p: 100 - int(p))
    assert b.priority_of(GenRequest(prompt="", priority=7)) == 93
    assert SGLangHTTPBackend("http://127.0.0.1:1", server_priority=False).priority_of(GenRequest(prompt="")) is None


async def test_generate_body_has_top_level_rid_and_priority():
    srv = await _server(enable_priority_scheduling=True)
    b = SGLangHTTPBackend(srv.url, extra_body={"routing_key": "k"})
    with pytest.warns(RuntimeWarning, match="ignores sampling_seed"):  # the server is not deterministic
        await b.generate(GenRequest(prompt="a b c", max_tokens=3, temperature=0.5, top_k=4, seed=9, stop=("zz",),
                                    rid="prog1-think-0", program_id="prog1", priority=2.0, logprobs=1))
    body = srv.core.received[-1]
    assert body["rid"] == W("prog1-think-0") and body["priority"] == -2 and body["stream"] is True
    assert body["sampling_params"] == {"max_new_tokens": 3, "temperature": 0.5, "top_p": 1.0, "top_k": 4,
                                       "stop": ["zz"], "sampling_seed": 9}
    assert body["return_logprob"] is True and body["top_logprobs_num"] == 1 and body["routing_key"] == "k"
    out = await b.generate(GenRequest(prompt="hi", max_tokens=2, rid="c1", chat=True, priority=1.0))
    chat_req = srv.http.requests[-1]
    assert chat_req.path == "/v1/chat/completions"
    assert chat_req.json()["rid"] == W("c1") and chat_req.json()["priority"] == -1 and out.tokens == 2
    await b.close()
    await srv.close()


async def test_results_tokens_logprobs_and_cache_counts():
    srv = await _server()
    b = SGLangHTTPBackend(srv.url)
    a = await b.generate(GenRequest(prompt="q1 shared prefix here", max_tokens=5, rid="r1", logprobs=1))
    c = await b.generate(GenRequest(prompt="q1 shared prefix there", max_tokens=5, rid="r2"))
    assert (a.tokens, a.prompt_tokens, a.finish_reason) == (5, 4, "length") and a.token_logprobs == [-0.1] * 5
    assert c.cached_prompt_tokens == 3 and c.token_logprobs is None
    s = await b.score(ScoreRequest(prompt="Is it? Yes or No", rid="s1"))
    assert s.probs == pytest.approx({"Yes": 0.8, "No": 0.2})
    await b.close()
    await srv.close()


# ---- priority ---------------------------------------------------------------------------------
async def _admission_order(server_cfg: dict, backend_kw: dict, prios=(5.0, 1.0, 3.0),
                           lengths=(2, 2, 2)) -> list[str]:
    srv = await _server(max_running_requests=1, **server_cfg)
    b = SGLangHTTPBackend(srv.url, **backend_kw)
    try:
        blocker = asyncio.ensure_future(b.generate(GenRequest(prompt="block", max_tokens=10**6, rid="blocker")))
        await _until(lambda: srv.core.admitted == [W("blocker")])
        tasks = []
        for i, (p, n) in enumerate(zip(prios, lengths)):
            tasks.append(asyncio.ensure_future(b.generate(GenRequest(prompt=f"p{p}", max_tokens=n, rid=f"p{p:g}",
                                                                     priority=p))))
            await _until(lambda: len(srv.core.received) == i + 2)  # distinct arrival order: 5, 1, 3
        await b.abort("blocker")  # frees the only running slot: the queue is admitted in its order
        await asyncio.gather(blocker, *tasks)
        return [r[:-1] for r in srv.core.admitted[1:]]  # the plain rids (no terminator)
    finally:
        await b.close()
        await srv.close()


async def test_server_orders_by_mapped_priority_under_fcfs():
    assert await _admission_order({"enable_priority_scheduling": True}, {}) == ["p1", "p3", "p5"]
    low = {"enable_priority_scheduling": True, "schedule_low_priority_values_first": True}
    assert await _admission_order(low, {"low_priority_values_first": True}) == ["p1", "p3", "p5"]
    # mismatched convention inverts the order: why the option exists
    assert await _admission_order(low, {}) == ["p5", "p3", "p1"]


async def test_priority_is_ignored_without_the_flag_and_lpm_refuses_it():
    assert await _admission_order({"schedule_policy": "lpm"}, {}) == ["p5", "p1", "p3"]
    assert await _admission_order({}, {}) == ["p5", "p1", "p3"]
    with pytest.raises(ValueError, match="must be 'fcfs' or 'lof'"):  # SGLang refuses to start
        FakeSGLangConfig(enable_priority_scheduling=True, schedule_policy="lpm")


async def test_lof_orders_by_priority_then_longest_output():
    lof = {"enable_priority_scheduling": True, "schedule_policy": "lof"}
    assert await _admission_order(lof, {}) == ["p1", "p3", "p5"]
    # without priority scheduling lof is longest-output-first, not arrival order
    assert await _admission_order({"schedule_policy": "lof"}, {}, lengths=(2, 9, 5)) == ["p1", "p3", "p5"]
    assert await _admission_order({}, {}, lengths=(2, 9, 5)) == ["p5", "p1", "p3"]


def test_engine_refuses_priority_with_a_cache_aware_policy(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sglang", None)
    with pytest.raises(ConfigError, match="fcfs.*lof") as e:  # said before SGLang would refuse to start
        SGLangEngineBackend(model="m", schedule_policy="lpm")
    assert "enable_priority_scheduling=False" in str(e.value)


async def test_client_side_ordering_when_server_priority_is_off():
    srv = await _server(abort_on_priority_when_disabled=True, max_running_requests=16)
    b = SGLangHTTPBackend(srv.url, server_priority=False, max_in_flight=1)
    blocker = asyncio.ensure_future(b.generate(GenRequest(prompt="block", max_tokens=10**6, rid="blocker")))
    await _until(lambda: srv.core.admitted == [W("blocker")])
    tasks = {}
    gate = b.gates[b.workers[0]]
    for i, p in enumerate((5.0, 1.0, 3.0, 2.0)):
        tasks[p] = asyncio.ensure_future(b.generate(GenRequest(prompt=f"p{p}", max_tokens=2, rid=f"p{p:g}",
                                                               priority=p)))
        await _until(lambda: gate.queued == i + 1)
    assert b.live_rids() == {"blocker", "p5", "p1", "p3", "p2"}  # queued client-side = still live
    assert await b.abort("p3") is True  # never sent: no server call, an abort result
    assert (await tasks[3.0]).finish_reason == "abort"
    assert srv.abort_calls == []
    await b.abort("blocker")  # sent, so aborted on the server too; its slot goes to the most urgent
    await asyncio.gather(blocker, *tasks.values())
    assert [r["rid"] for r in srv.core.received] == [W(x) for x in ("blocker", "p1", "p2", "p5")]
    assert all("priority" not in r for r in srv.core.received)  # the server would reject it
    assert srv.abort_calls == [{"rid": W("blocker"), "abort_all": False}]
    await b.close()
    await srv.close()


async def test_priority_gate_orders_and_survives_cancelled_waiters():
    gate = PriorityGate(1)
    order: list[str] = []

    async def job(name: str, prio: float, hold: float = 0.01):
        async with gate.slot(prio):
            order.append(name)
            await asyncio.sleep(hold)

    first = asyncio.ensure_future(job("first", 9, 0.05))
    await asyncio.sleep(0)
    waiters = {n: asyncio.ensure_future(job(n, p)) for n, p in (("c", 3), ("a", 1), ("x", 0), ("b", 2))}
    await asyncio.sleep(0.01)
    waiters["x"].cancel()
    await asyncio.gather(first, *waiters.values(), return_exceptions=True)
    assert order == ["first", "a", "b", "c"] and gate.active == 0 and gate.queued == 0


# ---- abort -------------------------------------------------------------------------------------
async def test_abort_sends_exact_rid_and_prefix_abort_is_not_honoured():
    srv = await _server()
    b = SGLangHTTPBackend(srv.url)
    t1, t2 = await _running_pair(srv, b, "prog9-s-0", "prog9-s-1")
    import httpx

    async with httpx.AsyncClient(trust_env=False) as c:  # the public path, as another client would
        await c.post(srv.url + "/abort_request", json={"rid": "prog9"})  # a prefix: ignored
        await c.post(srv.url + "/abort_request", json={"rid": ""})  # empty: ignored
        await c.post(srv.url + "/abort_request", json={"rid": "no-such-rid"})  # unknown: ignored
    await asyncio.sleep(0.02)
    assert len(srv.core.running) == 2 and not t1.done()
    assert await b.abort("prog9") is False and await b.abort("prog9-s-0") is True
    assert srv.abort_calls[-1] == {"rid": W("prog9-s-0"), "abort_all": False}
    assert (await t1).finish_reason == "abort"
    await _until(lambda: W("prog9-s-0") not in srv.core.states)
    assert W("prog9-s-1") in srv.core.states
    await b.abort("prog9-s-1")
    await t2
    await b.close()
    await srv.close()


async def test_cancelling_the_caller_aborts_on_the_server_at_once():
    srv = await _server(disconnect_abort_delay=30.0)  # only the explicit abort can free it in time
    b = SGLangHTTPBackend(srv.url)
    task = asyncio.ensure_future(b.generate(GenRequest(prompt="x", max_tokens=10_000, rid="gone")))
    await _until(lambda: W("gone") in srv.core.states and srv.core.running)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until(lambda: W("gone") not in srv.core.states, timeout=5.0)  # << the 30 s disconnect path
    assert {"rid": W("gone"), "abort_all": False} in srv.abort_calls and b.live_rids() == set()
    await b.close()
    await srv.close()


async def test_server_side_abort_is_a_retryable_error():
    srv = await _server()
    b = SGLangHTTPBackend(srv.url)
    task = asyncio.ensure_future(b.generate(GenRequest(prompt="x", max_tokens=10_000, rid="victim",
                                                       program_id="p", step="s")))
    await _until(lambda: W("victim") in srv.core.states and srv.core.running)
    srv.core.abort_request(W("victim"))  # e.g. evicted by a higher-priority arrival
    with pytest.raises(BackendError) as e:
        await task
    assert e.value.retryable and "program=p" in str(e.value)
    await b.close()
    await srv.close()


async def test_priority_sent_to_a_server_without_priority_scheduling_is_a_config_error():
    srv = await _server(abort_on_priority_when_disabled=True)  # SGLang aborts it in-stream with 503
    b = SGLangHTTPBackend(srv.url)  # wrongly assumes the server orders by priority
    with pytest.raises(ConfigError) as e:  # not a (retryable) BackendError: retrying cannot help
        await b.generate(GenRequest(prompt="x", rid="r", priority=1.0, program_id="p"))
    assert "--enable-priority-scheduling" in str(e.value) and "server_priority=False" in str(e.value)
    assert e.value.code == "CT300" and len(srv.core.received) == 1
    import certa.runtime as rt

    class One(rt.Program):
        knob = rt.Knob("iterations", cap=1)

        async def execute(self, ctx):
            await ctx.gen("q", max_tokens=2)
            return False

    res = await rt.Runtime(b).run(One, return_errors=True)  # through the runtime: the program fails once, not retried
    assert not res.ok and "CT300" in str(res.error) and len(srv.core.received) == 2
    eng = FakeEngine(FakeSGLangConfig(abort_on_priority_when_disabled=True, **FAST))
    with pytest.raises(ConfigError, match="--enable-priority-scheduling"):
        await SGLangEngineBackend(engine=eng).generate(GenRequest(prompt="x", rid="r", priority=1.0))
    await b.close()
    await srv.close()


async def test_in_stream_errors_keep_their_code():
    srv = await _server(step_seconds=0.05)
    first, second = SGLangHTTPBackend(srv.url), SGLangHTTPBackend(srv.url)
    task = asyncio.ensure_future(first.generate(GenRequest(prompt="x", max_tokens=10_000, rid="same")))
    await _until(lambda: W("same") in srv.core.states)
    with pytest.raises(BackendError) as e:  # HTTP 200, then data: {"error": {"message", "code": 400}}
        await second.generate(GenRequest(prompt="x", rid="same", program_id="p"))
    assert "HTTP 400" in str(e.value) and "Duplicate request ID" in str(e.value) and not e.value.retryable
    await first.abort("same")
    await task
    for b in (first, second):
        await b.close()
    await srv.close()


# ---- many workers --------------------------------------------------------------------------------
async def test_program_affinity_across_workers():
    srvs = [await _server() for _ in range(3)]
    b = SGLangHTTPBackend([s.url for s in srvs])
    by_worker: dict[str, set[str]] = {w: set() for w in b.workers}
    progs = (f"prog{i}" for i in range(1000))
    while min(len(v) for v in by_worker.values()) < 2:  # ports are random: pick programs covering all
        prog = next(progs)
        by_worker[b.route(GenRequest(prompt="", program_id=prog))].add(prog)
    for prog in set().union(*by_worker.values()):
        for i in range(2):
            await b.generate(GenRequest(prompt=f"{prog} question", max_tokens=2, rid=f"{prog}-{i}", program_id=prog))
        seq = await b.open_sequence(GenRequest(prompt=f"{prog} question", max_tokens=6, rid=f"{prog}-seq",
                                               program_id=prog))
        await seq.extend(3)
        await seq.probe(" answer:", max_tokens=2)
    for s in srvs:  # every request of a program (branches, chunks, probes) reached its one worker
        assert {r["rid"].split("-")[0] for r in s.core.received} == by_worker[s.url]
        assert len(s.core.received) == 4 * len(by_worker[s.url])  # 2 requests, 1 chunk, 1 probe
    await b.close()
    for s in srvs:
        await s.close()


# ---- embedded engine -------------------------------------------------------------------------
async def test_engine_backend_maps_rid_priority_and_abort():
    eng = FakeEngine(FakeSGLangConfig(enable_priority_scheduling=True, **FAST))
    b = SGLangEngineBackend(engine=eng)
    with pytest.warns(RuntimeWarning, match="ignores sampling_seed"):
        out = await b.generate(GenRequest(prompt="a b", max_tokens=3, rid="e1", priority=4.0, seed=2,
                                          temperature=0.5))
    sent = eng.core.received[-1]
    assert sent["rid"] == W("e1") and sent["priority"] == -4 and sent["sampling_params"]["sampling_seed"] == 2
    assert out.tokens == 3 and out.prompt_tokens == 2
    task = asyncio.ensure_future(b.generate(GenRequest(prompt="x", max_tokens=10_000, rid="e2")))
    await _until(lambda: W("e2") in eng.core.states)
    assert await b.abort("e2") is True and (await task).finish_reason == "abort"
    assert (W("e2"), [W("e2")]) in eng.core.aborts and W("e2") not in eng.core.states
    s = await b.score(ScoreRequest(prompt="Yes or No", rid="s"))
    assert s.probs == pytest.approx({"Yes": 0.8, "No": 0.2})
    await b.close()
    assert eng.shut_down is False  # not ours to shut down


async def test_engine_backend_reads_a_built_engines_settings():
    eng = FakeEngine(FakeSGLangConfig(enable_priority_scheduling=True, schedule_low_priority_values_first=True,
                                      incremental_streaming_output=True, **FAST))
    b = SGLangEngineBackend(engine=eng)
    assert b.low_priority_values_first and b.incremental
    out = await b.generate(GenRequest(prompt="a b", max_tokens=4, rid="i1", priority=3.0))
    ref = FakeEngine(FakeSGLangConfig(**FAST))
    want = await SGLangEngineBackend(engine=ref).generate(GenRequest(prompt="a b", max_tokens=4, rid="i1"))
    assert eng.core.received[-1]["priority"] == 3 and out.text == want.text and out.tokens == 4


def test_engine_defaults_and_missing_sglang(monkeypatch):
    assert ENGINE_DEFAULTS["enable_priority_scheduling"] is True and ENGINE_DEFAULTS["schedule_policy"] == "fcfs"
    import sys

    monkeypatch.setitem(sys.modules, "sglang", None)  # import fails like an absent package
    with pytest.raises(ConfigError):
        SGLangEngineBackend(model_path="some/model")
    with pytest.raises(ConfigError):
        SGLangEngineBackend()



def test_module_examples_run():
    import doctest

    import certa.runtime.backends.sglang.engine as engine_mod
    import certa.runtime.backends.sglang.http as http_mod
    import certa.runtime.backends.sglang.protocol as protocol_mod
    import certa.runtime.backends.worker_pool as pool_mod

    for mod in (http_mod, engine_mod, protocol_mod, pool_mod):
        res = doctest.testmod(mod)
        assert res.failed == 0 and res.attempted > 0, mod.__name__

"""Server-side bounds on one request's work (issue 20, item 3, the server part).

A request could ask for ``knob_cap=10**9``, a policy with ``detect_at`` or ``window`` far over
any cap, ``Infinity`` in a policy (a raw ``OverflowError``: a 500), and then run until its
client left. Now: non-finite numbers are a coded 400, policy fields are bounded by the
server's ``max_knob``/``max_tokens`` (refused with CT205 naming the field and the limit, as
``knob_cap`` is), and ``max_request_s`` aborts a program still running at the limit — its
backend requests too — with CT415.
"""

from __future__ import annotations

import asyncio
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette", reason="starlette is not installed (pip install 'certa[serve]')")

import certa as ct  # noqa: E402
from certa.algorithms.programs.library import build  # noqa: E402
from certa.runtime.errors import ConfigError, LimitExceededError  # noqa: E402
from certa.serve import Server, create_app  # noqa: E402
from certa.serve.errors import BadRequestError, TimeLimitError  # noqa: E402

Q = [{"role": "user", "content": "q"}]


def disagree(req) -> str:
    """Five answers in turn: never a majority, so the program runs on to its (huge) cap."""
    return f"so \\boxed{{{(req.seed or 0) % 5}}}"


def endless(**kw) -> tuple[Server, ct.ScriptedBackend]:
    b = ct.ScriptedBackend(disagree, latency=0.002)
    return Server({"sc": build("sc", branches_per_round=2, cap=10**6, max_tokens=64)}, b, **kw), b


def app_client(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(server)), base_url="http://t", timeout=30)


def nothing_left(server: Server, b: ct.ScriptedBackend) -> None:
    assert server.running == 0
    assert server.runtime._active == {}
    assert b.live_rids() == set()


# ---- (1) non-finite numbers ---------------------------------------------------------
@pytest.mark.parametrize("policy, field", [
    ('{"kind": "pareto", "curve": [[1, Infinity]]}', "curve[0][1]=Infinity"),
    ('{"kind": "esc", "window": Infinity}', "window=Infinity"),
    ('{"kind": "threshold", "tau": NaN}', "tau=NaN"),
    ('{"kind": "threshold", "tau": 0.5, "detect_at": -Infinity}', "detect_at=-Infinity"),
    ('{"kind": "threshold", "tau": {"agree": NaN}}', "tau.agree=NaN"),
])
async def test_non_finite_numbers_in_a_policy_are_a_coded_400(policy, field):
    server = Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."]), max_knob=8)
    body = '{"model": "sc", "messages": [{"role": "user", "content": "q"}], "certa": {"policy": %s}}' % policy
    async with app_client(server) as c:
        r = await c.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "CT410", r.text
    assert field in err["message"] and "finite" in err["message"]
    assert server.running == 0


async def test_non_finite_numbers_in_process_too():
    async with Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."])) as server:
        with pytest.raises(BadRequestError, match=r"certa\.policy: window=Infinity is not a finite number"):
            await server.complete("q", policy={"kind": "esc", "window": float("inf")})


# ---- (2) policy fields over the server's maximums ------------------------------------
@pytest.mark.parametrize("policy, field, limit, flag", [
    ({"kind": "threshold", "tau": 1.0, "detect_at": 10**6}, "detect_at", 8, "--max-knob"),
    ({"kind": "check_every", "tau": 0.5, "every": 10**6}, "every", 8, "--max-knob"),
    ({"kind": "esc", "window": 9}, "window", 8, "--max-knob"),
    ({"kind": "margin", "margin": 10**9}, "margin", 8, "--max-knob"),
    ({"kind": "even", "cap": 10**9}, "cap", 8, "--max-knob"),
    ({"kind": "length", "max_tokens": 10**7}, "max_tokens", 1000, "--max-token-budget"),
])
async def test_policy_fields_over_the_server_limits_are_refused_naming_field_and_limit(policy, field, limit, flag):
    server, b = endless(max_knob=8, max_token_budget=1000)
    async with app_client(server) as c:
        r = await c.post("/v1/chat/completions", json={"model": "sc", "messages": Q, "certa": {"policy": policy}})
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "CT205", r.text
    assert err["param"] == f"certa.policy.{field}"
    assert f"certa.policy.{field}={policy[field]} is over this server's limit of {limit} ({flag})" in err["message"]
    assert server.metrics()["requests_rejected"] == {"over_limit": 1}
    nothing_left(server, b)


async def test_tau_outside_unit_interval_is_refused_naming_the_field():
    async with Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."])) as server:
        for policy, text in (({"kind": "threshold", "tau": 1.5}, "certa.policy.tau=1.5 is outside [0, 1]"),
                             ({"kind": "threshold", "tau": {"agree": -0.1}}, "certa.policy.tau="),
                             ({"kind": "adaptive_consistency", "threshold": 2.0},
                              "certa.policy.threshold=2.0 is outside [0, 1]")):
            with pytest.raises(ConfigError, match=r"bad policy .*outside \[0, 1\]") as info:
                await server.complete("q", policy=policy)
            assert text in info.value.message and info.value.param.startswith("certa.policy.")


async def test_policy_fields_within_the_limits_still_run():
    async with Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."]), max_knob=8, max_token_budget=4000) as s:
        c = await s.complete("q", policy={"kind": "threshold", "tau": 1.0, "detect_at": 8, "every": 2})
        assert c.content == "\\boxed{18}"
        c = await s.complete("q", policy={"kind": "even", "cap": 8}, knob_cap=8)
        assert c.knob_used <= 8


# ---- (3) the per-request wall-time limit --------------------------------------------
def test_max_request_s_is_validated():
    for bad in (0, -1, float("inf"), float("nan"), True, "10"):
        with pytest.raises(ConfigError, match="max_request_s"):
            Server("sc", ct.ScriptedBackend(responses=["x"]), max_request_s=bad)


async def test_a_program_running_at_the_time_limit_is_aborted_with_its_backend_requests():
    server, b = endless(max_request_s=0.4)
    try:
        t0 = time.perf_counter()
        with pytest.raises(TimeLimitError, match=r"ran past this server's limit of 0\.4s \(--max-request-seconds\)"):
            await server.complete("q")
        took = time.perf_counter() - t0
        assert 0.35 < took < 2.0, took
        assert isinstance(TimeLimitError("x"), LimitExceededError) and TimeLimitError.code == "CT415"
        nothing_left(server, b)
        # a stream too: the error comes out of the iteration, and nothing keeps running
        seen = 0
        with pytest.raises(TimeLimitError):
            async with server.stream("q") as stream:
                async for _ in stream:
                    seen += 1
        assert seen > 0  # progress arrived before the limit
        nothing_left(server, b)
        await asyncio.sleep(0.1)
        assert b.live_rids() == set()
        assert server.metrics()["programs_finished"] == {"time_limit": 2}
    finally:
        await server.shutdown(0)


async def test_time_limit_over_http_plain_and_streaming():
    server, b = endless(max_request_s=0.3)
    async with app_client(server) as c:
        r = await c.post("/v1/chat/completions", json={"model": "sc", "messages": Q})
        err = r.json()["error"]
        # issue 40 item 14: a server-side stop, not the client's invalid request (was 400 invalid_request_error)
        assert r.status_code == 504 and err["code"] == "CT415" and err["type"] == "server_error", r.text
        assert r.headers["x-should-retry"] == "false"   # the same request would run into the limit again
        nothing_left(server, b)
        async with c.stream("POST", "/v1/chat/completions", json={"model": "sc", "messages": Q, "stream": True}) as s:
            text = "".join([line async for line in s.aiter_lines()])
        assert '"CT415"' in text and "--max-request-seconds" in text and '"server_error"' in text
        assert "invalid_request_error" not in text
    nothing_left(server, b)
    await server.shutdown(0)


async def test_requests_that_finish_in_time_and_cancellations_are_unaffected():
    async with Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."]), max_request_s=5) as server:
        c = await server.complete("q")
        assert c.exit_reason == "certaindex"
    server, b = endless(max_request_s=5)
    task = asyncio.ensure_future(server.complete("q"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    nothing_left(server, b)
    assert server.metrics()["programs_finished"] == {"cancelled": 1}
    await server.shutdown(0)


def test_cli_has_the_limit_flags_with_defaults():
    from typer.testing import CliRunner

    from certa.cli import app
    out = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert "--max-request-seconds" in out and "600" in out and "--max-knob" in out and "4096" in out
    r = CliRunner().invoke(app, ["serve", "--backend", "scripted", "--max-request-seconds", "0"])
    assert r.exit_code != 0 and "--max-request-seconds" in r.output

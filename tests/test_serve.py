"""The in-process server API (certa.serve.Server) on the scripted fake backend: completions,
streams, per-request overrides, limits and their errors, cancellation (no live rid left),
graceful shutdown, metrics; plus the request schemas and the ``certa serve`` command."""

from __future__ import annotations

import asyncio
import doctest
import importlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

import certa as ct
from certa.algorithms.programs.library import build
from certa.dsl.errors import MissingCertaindexError
from certa.runtime.errors import ConfigError, LimitExceededError
from certa.serve import (BadRequestError, Completion, Heartbeat, Progress, Server, ServerBusyError, ShuttingDownError,
                         UnknownModelError)
from certa.serve.schemas import ChatRequest, CompletionRequest, parse_request

from .conftest import program_source, wait_for_serve_port

ROOT = pathlib.Path(__file__).resolve().parent.parent
AGREE = "Let me think. The answer is \\boxed{18}."


def scripted(text: str = AGREE, **kw) -> ct.ScriptedBackend:
    return ct.ScriptedBackend(responses=[text], **kw)


def sc(**kw):
    """SC pinned to the paper's threshold (check at 4, 8, ...): these tests count its rounds exactly."""
    kw.setdefault("policy", ct.Threshold(0.55, detect_at=4, every=4))
    return build("sc", branches_per_round=4, cap=16, max_tokens=64, **kw)


async def test_complete_answer_usage_and_certa_details():
    b = scripted()
    async with Server({"sc": sc()}, b) as server:
        c = await server.complete("What is 9 * 2?", request_id="req-1")
    assert isinstance(c, Completion)
    assert (c.content, c.answer, c.finish_reason, c.exit_reason) == ("\\boxed{18}", "18", "stop", "certaindex")
    usage = c.usage()
    per_request = len(AGREE.split())
    assert usage["certa"] == {"main": 4 * per_request, "probe": 0, "score": 0, "requests": 4, "knob_used": 4,
                              "knob_cap": 16, "exit_reason": "certaindex", "tokens_saved": c.tokens_saved,
                              "certaindex": 1.0}
    assert usage["completion_tokens"] == 4 * per_request and usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    d = c.certa()
    assert d["request_id"] == "req-1" and d["program_id"] == c.program_id and d["knob_used"] == 4
    assert d["tokens_saved"] == 12 * per_request and d["certaindex"][-1]["value"] == 1.0
    assert b.live_rids() == set()


async def test_plain_answer_format_and_program_errors_raise():
    async with Server({"sc": sc()}, scripted(), answer_format="plain") as server:
        assert (await server.complete("q")).content == "18"
        assert (await server.complete("q", answer_format="boxed")).content == "\\boxed{18}"
    failing = ct.ScriptedBackend(responses={"never": "x"})  # no response for the prompt: BackendError
    async with Server({"sc": sc()}, failing) as server:
        with pytest.raises(ct.CertaError, match="CT203"):
            await server.complete("q")
        assert server.metrics()["programs_finished"] == {"error": 1}


async def test_stream_yields_progress_then_completion():
    async with Server({"sc": sc()}, scripted(latency=0.01)) as server:
        events = [e async for e in server.stream("What is 9 * 2?")]
        quiet = [e async for e in server.stream("What is 9 * 2?", progress=False)]
    assert isinstance(events[-1], Completion) and events[-1].content == "\\boxed{18}"
    progress = events[:-1]
    assert progress and all(isinstance(p, Progress) for p in progress)
    assert [p.knob for p in progress] == [1, 2, 3, 4] and progress[-1].value == 1.0
    assert len(quiet) == 1 and isinstance(quiet[0], Completion)


async def test_stream_heartbeat_while_waiting():
    async with Server({"sc": sc()}, scripted(latency=0.3)) as server:
        async with server.stream("q", heartbeat_s=0.05) as s:
            first = await s.__anext__()
    assert isinstance(first, Heartbeat)


async def test_per_request_policy_knob_cap_budget_and_preset():
    disagree = ct.ScriptedBackend(responses=[f"so \\boxed{{{i}}}" for i in range(7)])
    async with Server({"sc": sc(), "cot": "cot"}, disagree) as server:
        capped = await server.complete("q", knob_cap=8)
        assert (capped.exit_reason, capped.knob_used, capped.knob_cap) == ("cap", 8, 8)
        even = await server.complete("q", policy={"kind": "even", "cap": 5})
        assert (even.exit_reason, even.knob_used) == ("budget", 5)
        obj = await server.complete("q", policy=ct.Even(3))
        assert obj.knob_used == 3
        budget = await server.complete("q", max_tokens=5)  # 2 tokens a branch: stops once 5 are spent
        assert (budget.exit_reason, budget.finish_reason) == ("length", "length")
        assert 5 <= budget.tokens.total < 5 + 8
        with pytest.raises(ConfigError, match="no presets"):
            await server.complete("q", preset="mid")
        with pytest.raises(ConfigError, match="unknown CoT preset"):
            await server.complete("q", model="cot", preset="lazy")
        with pytest.raises(ConfigError, match="bad policy 'threshold'"):
            await server.complete("q", policy={"kind": "threshold", "tau": 2.0})
        with pytest.raises(BadRequestError, match="certa.knob: unknown field"):
            await server.complete("q", knob=3)
    probe = ct.ScriptedBackend(responses=["a " * 300], probe=lambda text, suffix: "18} \\]")
    async with Server("cot", probe) as server:  # a built-in name: presets rebuild it
        crazy = await server.complete("q", preset="crazy")  # (k=2, T=32): exits after 2 probes
        assert (crazy.answer, crazy.exit_reason, crazy.tokens.main) == ("18", "certaindex", 64)
        assert crazy.usage()["certa"]["probe"] > 0
        assert crazy.usage()["completion_tokens"] == crazy.tokens.main + crazy.tokens.probe


async def test_limits_and_bad_requests():
    async with Server({"sc": sc()}, scripted(latency=0.2), max_knob=8, max_token_budget=1000,
                      max_concurrent=1) as server:
        with pytest.raises(LimitExceededError, match=r"knob_cap=9 is over this server's limit of 8 \(--max-knob\)"):
            await server.complete("q", knob_cap=9)
        with pytest.raises(LimitExceededError, match=r"max_tokens=1001 is over .* 1000"):
            await server.complete("q", max_tokens=1001)
        with pytest.raises(UnknownModelError, match="'gpt-4' is not served here"):
            await server.complete("q", model="gpt-4")
        with pytest.raises(ConfigError, match="question is empty"):
            await server.complete("  ")
        running = server.stream("q")
        with pytest.raises(ServerBusyError, match="--max-concurrent") as busy:
            await server.complete("q")
        assert busy.value.retry_after_s >= 1
        c = [e async for e in running][-1]
        assert c.knob_cap == 8  # the program's default cap of 16 is clamped to --max-knob
        assert server.metrics()["requests_rejected"] == {"over_limit": 2, "unknown_model": 1, "bad_request": 1,
                                                         "busy": 1}


async def test_policy_needing_a_missing_certaindex_is_refused(tmp_path):
    src = tmp_path / "plain.py"
    src.write_text(program_source("plain", state="answer", knob='ct.Knob("iterations", cap=1)', body="""
        @g.step
        async def go(s, ctx):
            return {"answer": (await ctx.gen(s.question, max_tokens=4)).text}
        graph = g.compile()
    """))
    async with Server(f"{src}:graph", scripted()) as server:
        assert server.models == ["plain"]
        assert (await server.complete("q", answer_format="plain")).content == "Let me think. The "  # verbatim
        with pytest.raises(MissingCertaindexError):
            await server.complete("q", policy={"kind": "threshold", "tau": 0.5})


async def test_cancelled_complete_and_closed_stream_abort_every_rid():
    b = scripted(latency=5.0)
    async with Server({"sc": sc()}, b) as server:
        task = asyncio.ensure_future(server.complete("q"))
        await asyncio.sleep(0.05)
        assert len(b.live_rids()) == 4
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert b.live_rids() == set() and server.running == 0
        async with server.stream("q", heartbeat_s=0.05) as s:
            async for event in s:
                assert isinstance(event, Heartbeat) and len(b.live_rids()) == 4
                break  # leaving the block aborts the program
        assert b.live_rids() == set() and server.running == 0
        s2 = server.stream("q")  # closed before it ever started
        await s2.aclose()
        assert server.running == 0
        assert server.metrics()["programs_finished"] == {"cancelled": 3}


async def test_shutdown_finishes_running_programs_then_aborts_late_ones():
    b = scripted(latency=0.05)
    server = Server({"sc": sc()}, b)
    task = asyncio.ensure_future(server.complete("q"))
    await asyncio.sleep(0.01)
    await server.shutdown(timeout=5)
    assert (await task).exit_reason == "certaindex"  # finished within the grace period
    with pytest.raises(ShuttingDownError):
        await server.complete("q")
    slow = scripted(latency=10.0)
    server = Server({"sc": sc()}, slow)
    task = asyncio.ensure_future(server.complete("q"))
    stream = server.stream("q", heartbeat_s=0.01)
    await stream.__anext__()
    t0 = time.perf_counter()
    await server.shutdown(timeout=0.1)
    assert time.perf_counter() - t0 < 2
    with pytest.raises(ShuttingDownError, match="shut down before the program finished"):
        await task
    with pytest.raises(ShuttingDownError):
        await stream.__anext__()
    assert slow.live_rids() == set() and server.running == 0


async def test_metrics_tokens_savings_slo_and_prometheus():
    async with Server({"sc": sc()}, scripted(latency=0.02)) as server:
        await asyncio.gather(server.complete("q", deadline_s=60), server.complete("q", deadline_s=0.001),
                             server.complete("q"))
        m = server.metrics()
        text = server.prometheus()
    assert m["programs_finished"] == {"certaindex": 3} and m["programs_running"] == 0
    assert m["tokens"]["main"] == 3 * 4 * len(AGREE.split()) and m["tokens_saved"] > 0
    assert m["slo"] == {"requests": 2, "met": 1, "attainment": 0.5}
    assert 'certa_programs_finished_total{exit_reason="certaindex"} 3.0' in text
    assert "certa_slo_attainment 0.5" in text and 'certa_tokens_total{kind="main"}' in text
    assert 'certa_server_info{backend="ScriptedBackend",models="sc",scheduler="certa"} 1.0' in text
    from prometheus_client.parser import text_string_to_metric_families  # the format's own parser reads it back
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["certa_request_latency_seconds"].type == "histogram"
    assert {s.labels["kind"]: s.value for s in families["certa_tokens"].samples
            if s.name == "certa_tokens_total"}["main"] == m["tokens"]["main"]
    for line in text.splitlines():  # every sample line parses as `name{labels} value`
        assert line.startswith("#") or re.fullmatch(r'[a-z_]+(\{[^}]*\})? [0-9.e+-]+', line), line


async def test_serves_a_hand_written_program_class():
    class Echo(ct.Program):
        knob = ct.Knob("iterations", cap=3)

        def __init__(self, question: str) -> None:
            super().__init__()
            self.state = {"question": question, "answer": None}

        async def execute(self, ctx) -> bool:
            self.state["answer"] = (await ctx.gen(self.state["question"], max_tokens=2)).text.strip()
            self.knob_used += 1
            return True

    async with Server({"echo": Echo}, scripted(), max_knob=2) as server:
        c = await server.complete("q", answer_format="plain")
    assert (c.content, c.knob_used, c.exit_reason) == ("Let me", 2, "cap")
    with pytest.raises(ConfigError, match="Program instance"):
        Server({"echo": Echo("q")}, scripted())


def test_request_schemas():
    chat = parse_request(ChatRequest, {
        "model": "sc", "temperature": 0.3, "max_completion_tokens": 99, "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "first"},
                     {"role": "assistant", "content": "..."},
                     {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]}]})
    assert (chat.question(), chat.budget(), chat.include_usage()) == ("What is 2+2?", 99, True)
    text = parse_request(CompletionRequest, {"model": "sc", "prompt": ["2+2?"], "max_tokens": 7})
    assert (text.question(), text.budget()) == ("2+2?", 7)
    bad = [({"model": "sc", "messages": [{"role": "user", "content": "q"}], "tools": []}, "tools: unsupported field"),
           ({"model": "sc", "messages": [{"role": "user", "content": "q"}], "n": 3}, "n: only 1"),
           ({"model": "sc", "messages": [{"role": "user", "content": "q"}], "certa": {"knob_cap": 0}},
            "certa.knob_cap: Input should be greater than or equal to 1"),
           ({"model": "sc", "messages": [{"role": "user", "content": "q"}], "certa": {"policy": {"tau": 1}}},
            'certa.policy: a policy needs a "kind"'),
           ({"model": "sc", "messages": [{"role": "user", "content": "q"}], "certa": {"deadline_s": -1}},
            "certa.deadline_s"),
           ({"model": "sc", "prompt": ["a", "b"]}, "one prompt per request"),
           ({"model": "sc", "messages": [{"role": "system", "content": "x"}]}, "a user message"),
           ([1, 2], "must be a JSON object")]
    for body, message in bad:
        with pytest.raises(BadRequestError, match=re.escape(message)):
            req = parse_request(ChatRequest if "messages" in body or not isinstance(body, dict) else CompletionRequest,
                                body)
            req.question()


def test_cli_serve_answers_then_shuts_down_on_sigterm():
    """``certa serve`` on the scripted backend: one request over HTTP, then SIGTERM exits cleanly."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")
    proc = subprocess.Popen([sys.executable, "-m", "certa", "serve", "--backend", "scripted", "--port", "0",
                             "--max-knob", "8", "--log-level", "info"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"})
    try:
        port = wait_for_serve_port(proc, 30)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"X-Request-Id": "cli-1"},
                       json={"model": "sc", "messages": [{"role": "user", "content": "2+2?"}]}, timeout=30)
        assert r.status_code == 200 and r.headers["x-request-id"] == "cli-1"
        assert r.json()["certa"]["knob_cap"] == 8
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode in (0, -signal.SIGTERM), out  # uvicorn re-raises the signal after its shutdown
        assert "request_id=cli-1 model=sc" in out and "Application shutdown complete" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("name", ["serve", "serve.errors", "serve.schemas", "serve.metrics", "serve.completion",
                                  "serve.programs", "serve.server", "serve.format", "serve.http", "serve.launch",
                                  "serve.auth", "serve.connections"])
def test_module_examples_run(name):
    if name in ("serve.http", "serve.launch"):
        pytest.importorskip("starlette", reason="starlette is not installed (pip install 'certa[serve]')")
        pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")
    module = importlib.import_module(f"certa.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

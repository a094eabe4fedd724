"""OpenAIBackend: the conformance suite against a REAL llama-cpp-python server, plus routing,
host-allowlist, error-mapping and body checks against in-process fake workers (loopback only).
"""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from certa.runtime.backends.http_common import HostGuard, validate_url
from certa.runtime.errors import BackendError, ConfigError
from certa.runtime.types import GenRequest, ScoreRequest

from .conformance import BackendConformance
from .conftest import stop_process
from .fakes.openai_fake import FakeOpenAIWorker

pytest.importorskip("httpx", reason="the HTTP backends need httpx (pip install 'certa[http]')")
from certa.runtime.backends.openai_http import OpenAIBackend  # noqa: E402

MODEL_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SERVER_DEPS = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")


def _model_path() -> Path:
    """The 0.5B test model as a file (``llama_cpp.server`` loads a path, so the resolver writes it to
    the cache); where it would be when the model is not installed."""
    from certa.runtime.errors import ModelNotFoundError
    from certa.runtime.models import cache_dir, resolve_model
    try:
        return resolve_model("qwen2.5-coder-0.5b")
    except ModelNotFoundError:
        return cache_dir() / MODEL_NAME


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server():
    """``python -m llama_cpp.server`` on a free loopback port (n_threads=2), killed at teardown."""
    missing = [m for m in SERVER_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"llama_cpp.server needs {', '.join(missing)} (pip install 'certa[server-test]')")
    model = _model_path()
    if not model.exists():
        pytest.skip(f"model {model} is missing (pip install 'certa[model-small]')")
    import httpx

    port = _free_port()
    # interrupt_requests False: the server serialises requests instead of cutting the
    # running stream short whenever another request arrives.
    # certa's wrapper of llama_cpp.server: the same server, runnable on AMX CPUs (docs/backends.md)
    cmd = [sys.executable, "-m", "certa.runtime.backends.llamacpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
           "--n_threads", "2", "--n_ctx", "2048", "--interrupt_requests", "False", "--verbose", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {err}")
            try:
                if httpx.get(url + "/v1/models", timeout=1.0, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not become ready in 90 s")
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)


@pytest.mark.model
class TestOpenAIRealServer(BackendConformance):
    backend_name = "openai"
    long_tokens = 400

    @pytest.fixture
    async def backend(self, llama_server):
        b = OpenAIBackend(llama_server, timeout=120)
        yield b
        await b.close()

    async def test_chat_and_logprobs(self, backend):
        out = await backend.generate(GenRequest(prompt="Say hi.", max_tokens=4, rid="chat-1", chat=True,
                                                system="Be brief.", logprobs=1))
        assert 0 < out.tokens <= 4 and out.token_logprobs is not None and len(out.token_logprobs) == out.tokens

    async def test_score_uses_logprobs(self, backend):
        s = await backend.score(ScoreRequest(prompt="Is 2+2=4? Answer Yes or No:", rid="score-1"))
        assert backend._logprob_score is True
        assert 0.0 < s.probs["Yes"] < 1.0  # a real distribution, not the all-or-nothing fallback


# ---- fakes: routing, security, errors, bodies --------------------------------------------------
@pytest.fixture
async def workers():
    ws = [await FakeOpenAIWorker(name=n).start() for n in ("A", "B")]
    yield ws
    for w in ws:
        await w.close()


async def test_program_affinity_routes_a_program_to_one_worker(workers):
    b = OpenAIBackend([w.url for w in workers], model="m")
    names = {b.workers[0]: "A", b.workers[1]: "B"}
    chosen: dict[str, list[str]] = {"A": [], "B": []}
    progs = (f"p{i}" for i in range(1000))
    while min(len(v) for v in chosen.values()) < 2:  # ports are random: cover both workers
        prog = next(progs)
        chosen[names[b.route(GenRequest(prompt="", program_id=prog))]].append(prog)
    try:
        for name, prog in ((n, p) for n, ps in chosen.items() for p in ps):
            outs = [await b.generate(GenRequest(prompt="x", max_tokens=2, rid=f"{prog}-{i}", program_id=prog))
                    for i in range(3)]
            seq = await b.open_sequence(GenRequest(prompt="x", max_tokens=4, rid=f"{prog}-seq", program_id=prog))
            await seq.extend(2)
            probe = await seq.probe(" answer:", max_tokens=2)
            assert {o.text[0] for o in outs} | {probe.text[0]} == {name}, f"program {prog} left its worker"
        assert [len(w.bodies) for w in workers] == [5 * len(chosen["A"]), 5 * len(chosen["B"])]
    finally:
        await b.close()


async def test_request_body_fields_and_extra_body(workers):
    w = workers[0]
    b = OpenAIBackend(w.url, model="m", api_key="sk-secret", extra_body={"min_p": 0.05, "repetition_penalty": 1.1})
    assert "sk-secret" not in repr(b)
    await b.generate(GenRequest(prompt="hello", max_tokens=3, temperature=0.7, top_p=0.9, top_k=20, seed=11,
                                stop=("\n",), rid="r1", logprobs=2))
    body = w.bodies[-1]
    assert body["prompt"] == "hello" and body["max_tokens"] == 3 and body["temperature"] == 0.7
    assert body["top_p"] == 0.9 and body["top_k"] == 20 and body["seed"] == 11 and body["stop"] == ["\n"]
    assert body["logprobs"] == 2 and body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["min_p"] == 0.05 and body["repetition_penalty"] == 1.1 and body["model"] == "m"
    assert w.requests[-1].headers["authorization"] == "Bearer sk-secret"
    await b.generate(GenRequest(prompt="hi", max_tokens=2, rid="r2", chat=True, system="sys"))
    assert w.requests[-1].path == "/v1/chat/completions"
    assert w.bodies[-1]["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    assert "continue_final_message" not in w.bodies[-1]
    await b.generate(GenRequest(prompt="hi", max_tokens=2, rid="r3", chat=True, assistant_prefix="Step 1:"))
    body = w.bodies[-1]
    assert body["messages"][-1] == {"role": "assistant", "content": "Step 1:"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    await b.close()


async def test_usage_is_preferred_then_chunks_are_counted(workers):
    w = workers[0]
    b = OpenAIBackend(w.url)
    out = await b.generate(GenRequest(prompt="one two three", max_tokens=5, rid="u1"))
    assert (out.tokens, out.prompt_tokens, out.cached_prompt_tokens, out.finish_reason) == (5, 7, 3, "length")
    assert w.bodies[-1]["model"] == "model-A"  # discovered from /v1/models
    w.usage = False
    out = await b.generate(GenRequest(prompt="one two three", max_tokens=5, rid="u2"))
    assert out.tokens == 5 and out.prompt_tokens > 0
    await b.close()


async def test_abort_closes_the_stream_and_the_server_sees_it(workers):
    w = workers[0]
    w.token_delay = 0.02
    b = OpenAIBackend(w.url, model="m")
    task = asyncio.ensure_future(b.generate(GenRequest(prompt="x", max_tokens=500, rid="long")))
    await asyncio.sleep(0.15)
    assert b.live_rids() == {"long"}
    assert await b.abort("long") is True
    out = await asyncio.wait_for(task, 5)
    assert out.finish_reason == "abort" and out.tokens < 500 and b.live_rids() == set()
    for _ in range(50):
        if w.disconnects:
            break
        await asyncio.sleep(0.02)
    assert w.disconnects == 1
    assert await b.abort("long") is False
    await b.close()


async def test_score_falls_back_without_logprobs(workers):
    w = workers[0]
    b = OpenAIBackend(w.url, model="m")
    s = await b.score(ScoreRequest(prompt="Yes or No?", rid="s1"))
    assert s.probs["Yes"] == pytest.approx(1 / (1 + 2.718281828 ** -1.2), rel=1e-3)
    w.logprobs = False
    b2 = OpenAIBackend(w.url, model="m")
    s2 = await b2.score(ScoreRequest(prompt="Yes or No?", rid="s2"))
    assert abs(sum(s2.probs.values()) - 1) < 1e-9 and b2._logprob_score is False
    await b.close()
    await b2.close()


@pytest.mark.parametrize("status,retryable", [(503, True), (429, True), (502, True), (400, False), (404, False)])
async def test_http_errors_map_to_backend_errors(workers, status, retryable):
    w = workers[0]
    w.status, w.error_body = status, {"error": {"message": "model overloaded or bad input"}}
    b = OpenAIBackend(w.url, model="m")
    with pytest.raises(BackendError) as e:
        await b.generate(GenRequest(prompt="x", rid="e1", program_id="prog", step="think", branch=2))
    assert e.value.retryable is retryable and e.value.code == "CT203"
    assert "model overloaded or bad input" in str(e.value) and "program=prog step=think branch=2" in str(e.value)
    assert b.live_rids() == set()
    await b.close()


@pytest.mark.parametrize("error,retryable", [({"message": "overloaded", "code": 503}, True),
                                            ({"message": "bad input", "code": 400}, False),
                                            ({"message": "server says retry", "code": 400, "retryable": True}, True),
                                            ({"message": "no code"}, False)])
async def test_in_stream_errors_are_mapped_by_their_code(workers, error, retryable):
    w = workers[0]
    w.stream_error = error
    b = OpenAIBackend(w.url, model="m")
    with pytest.raises(BackendError) as e:
        await b.generate(GenRequest(prompt="x", rid="ie", program_id="prog"))
    assert e.value.retryable is retryable and error["message"] in str(e.value)
    assert f"HTTP {error.get('code', 500)}" in str(e.value)
    await b.close()


async def test_urls_fail_over_and_requests_carry_the_routing_key(workers):
    port = _free_port()  # a worker that is down
    dead = f"http://127.0.0.1:{port}"
    b = OpenAIBackend(urls=[dead, workers[0].url], model="m", health_interval=None)
    prog = next(p for p in (f"p{i}" for i in range(1000)) if b.pool.ranked(p)[0] == dead)
    out = await b.generate(GenRequest(prompt="x", max_tokens=2, rid="fo", program_id=prog))
    assert out.text.startswith("A") and b.metrics()["failovers"] == 1 and dead in b.pool.down
    assert workers[0].requests[-1].headers["x-smg-routing-key"] == prog
    await b.close()


async def test_connect_error_is_retryable():
    port = _free_port()  # nothing listens there
    b = OpenAIBackend(f"http://127.0.0.1:{port}", model="m", timeout=5)
    with pytest.raises(BackendError) as e:
        await b.generate(GenRequest(prompt="x", rid="c1"))
    assert e.value.retryable is True
    await b.close()


# ---- security ------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "file:///etc/passwd", "127.0.0.1:8000", "http://",
                                 "http://user:pw@127.0.0.1:8000", "http://127.0.0.1:8000/?next=evil",
                                 "http://127.0.0.1:99999"])
def test_invalid_urls_are_rejected(url):
    with pytest.raises(ConfigError):
        OpenAIBackend(url)


def test_allowed_hosts_are_enforced():
    with pytest.raises(ConfigError):
        OpenAIBackend(["http://127.0.0.1:8000", "http://evil.example:8000"], allowed_hosts=["127.0.0.1"])
    b = OpenAIBackend("http://LOCALHOST:8000/v1/", allowed_hosts=["localhost"])
    assert b.workers == ["http://LOCALHOST:8000/v1"] and b.api_base(b.workers[0]) == b.workers[0]
    assert validate_url("https://h:1") == "https://h:1"
    guard = HostGuard(["127.0.0.1"])
    with pytest.raises(BackendError):
        guard.check("http://169.254.169.254/latest/meta-data")
    assert guard.check("http://127.0.0.1:5/x") == "http://127.0.0.1:5/x"


async def test_redirects_are_never_followed(workers):
    target, redirector = workers
    redirector.redirect_to = target.url  # another server, not configured
    b = OpenAIBackend(redirector.url, model="m")
    with pytest.raises(BackendError) as e:
        await b.generate(GenRequest(prompt="x", rid="rd"))
    assert "redirect" in str(e.value) and e.value.retryable is False
    assert target.requests == []
    await b.close()


async def test_proxy_environment_is_ignored(workers, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    b = OpenAIBackend(workers[0].url, model="m")
    out = await b.generate(GenRequest(prompt="x", max_tokens=2, rid="px"))
    assert out.tokens == 2
    await b.close()


async def test_duplicate_rid_in_flight_is_rejected(workers):
    workers[0].token_delay = 0.02
    b = OpenAIBackend(workers[0].url, model="m")
    t = asyncio.ensure_future(b.generate(GenRequest(prompt="x", max_tokens=50, rid="dup")))
    await asyncio.sleep(0.05)
    with pytest.raises(BackendError):
        await b.generate(GenRequest(prompt="x", rid="dup"))
    await b.abort("dup")
    await t
    await b.close()


def test_registry_builds_it():
    from certa.runtime.backends.registry import make_backend

    b = make_backend("openai", base_url="http://127.0.0.1:1")
    assert isinstance(b, OpenAIBackend) and b.capabilities.name == "openai"


def test_module_examples_run():
    import doctest

    import certa.runtime.backends.http_common as common_mod
    import certa.runtime.backends.openai_http as openai_mod

    assert doctest.testmod(common_mod).failed == 0 and doctest.testmod(openai_mod).failed == 0

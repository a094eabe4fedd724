"""``certa serve``'s HTTP app driven by the official ``openai`` client (a client certa did not
write), on loopback, with uvicorn in a thread and the scripted fake backend: plain and
streaming chat and text completions, per-request overrides in ``extra_body``, 4xx errors in
OpenAI's shape, 429 + Retry-After, client disconnects (no live backend rid left), request ids,
``/health``, ``/metrics`` and ``/v1/models``."""

from __future__ import annotations

import threading
import time

import pytest

openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install 'certa[server-test]')")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")
pytest.importorskip("starlette", reason="starlette is not installed (pip install 'certa[serve]')")

import certa as ct  # noqa: E402
from certa.algorithms.programs.library import build  # noqa: E402
from certa.serve import Server  # noqa: E402
from certa.serve.launch import start_background  # noqa: E402

QUESTION = [{"role": "user", "content": "What is 9 * 2?"}]


def respond(req) -> str:
    if "slow" in req.prompt:
        return "thinking slowly " * 3 + "\\boxed{7}"
    if "disagree" in req.prompt:
        return f"so \\boxed{{{(req.seed or 0) % 100_000}}}"
    return "Let me think. The answer is \\boxed{18}."


class Backend(ct.ScriptedBackend):
    """Scripted answers; questions containing "slow" take 5 s per request."""

    def __init__(self) -> None:
        super().__init__(respond, latency=lambda req: 5.0 if "slow" in req.prompt else 0.01)


@pytest.fixture(scope="module")
def backend():
    return Backend()


@pytest.fixture(scope="module")
def served(backend):
    sc = build("sc", branches_per_round=4, cap=16, max_tokens=64, policy=ct.Threshold(0.55, detect_at=4, every=4))
    server = Server({"sc": sc, "cot": "cot"}, backend,
                    max_knob=16, max_token_budget=4096)
    with start_background(server) as bg:
        yield bg, server


@pytest.fixture(scope="module")
def client(served):
    bg, _ = served
    with openai.OpenAI(base_url=bg.base_url, api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def wait_no_live_rids(backend, timeout: float = 5.0) -> set[str]:
    deadline = time.monotonic() + timeout
    while backend.live_rids() and time.monotonic() < deadline:
        time.sleep(0.01)
    return backend.live_rids()


def test_chat_completion(client):
    raw = client.chat.completions.with_raw_response.create(model="sc", messages=QUESTION,
                                                           extra_headers={"X-Request-Id": "client-req-7"})
    assert raw.headers["x-request-id"] == "client-req-7"
    r = raw.parse()
    assert r.id == "chatcmpl-client-req-7" and r.object == "chat.completion" and r.model == "sc"
    assert r.choices[0].message.content == "\\boxed{18}" and r.choices[0].finish_reason == "stop"
    per_request = len(respond(ct.GenRequest(prompt="")).split())
    assert r.usage.completion_tokens == 4 * per_request and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.model_extra["certa"] == {"main": 4 * per_request, "probe": 0, "score": 0, "requests": 4,
                                            "knob_used": 4, "knob_cap": 16, "exit_reason": "certaindex",
                                            "tokens_saved": r.model_extra["certa"]["tokens_saved"], "certaindex": 1.0}
    certa = r.model_extra["certa"]
    assert certa["exit_reason"] == "certaindex" and certa["knob_used"] == 4 and certa["tokens_saved"] > 0
    assert [p["value"] for p in certa["certaindex"]][-1] == 1.0 and certa["request_id"] == "client-req-7"


def test_streaming_chat_progress_then_answer(client):
    chunks = list(client.chat.completions.create(model="sc", messages=QUESTION, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    progress = [c.model_extra["certa"] for c in chunks if (c.model_extra or {}).get("certa", {}).get("event") == "certaindex"]
    assert [p["knob"] for p in progress] == [1, 2, 3, 4] and progress[-1]["value"] == 1.0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "\\boxed{18}"
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == "stop"
    assert finish[0].model_extra["certa"]["exit_reason"] == "certaindex"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1


def test_text_completions_plain_and_streaming(client):
    r = client.completions.create(model="sc", prompt="What is 9 * 2?", extra_body={"certa": {"answer_format": "plain"}})
    assert r.object == "text_completion" and r.choices[0].text == "18" and r.usage.completion_tokens > 0
    chunks = list(client.completions.create(model="sc", prompt="What is 9 * 2?", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "\\boxed{18}"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_per_request_overrides_in_extra_body(client):
    q = [{"role": "user", "content": "we disagree: what is it?"}]
    capped = client.chat.completions.create(model="sc", messages=q, extra_body={"certa": {"knob_cap": 8}})
    assert capped.model_extra["certa"]["exit_reason"] == "cap" and capped.model_extra["certa"]["knob_used"] == 8
    even = client.chat.completions.create(model="sc", messages=q,
                                          extra_body={"certa": {"policy": ct.Even(5).to_dict()}})
    assert (even.model_extra["certa"]["exit_reason"], even.model_extra["certa"]["knob_used"]) == ("budget", 5)
    lenient = client.chat.completions.create(
        model="sc", messages=q, extra_body={"certa": {"policy": {"kind": "threshold", "tau": 0.0, "detect_at": 2}}})
    assert lenient.model_extra["certa"]["knob_used"] < 8
    short = client.chat.completions.create(model="sc", messages=q, max_tokens=5)
    assert short.choices[0].finish_reason == "length" and short.model_extra["certa"]["exit_reason"] == "length"


@pytest.mark.parametrize("kwargs, status, message", [
    ({"model": "gpt-4"}, 404, "model 'gpt-4' is not served here (hint: models: sc, cot)"),
    ({"extra_body": {"certa": {"knob_cap": 64}}}, 400, "certa.knob_cap=64 is over this server's limit of 16"),
    ({"max_tokens": 10_000}, 400, "max_tokens=10000 is over this server's limit of 4096"),
    ({"extra_body": {"certa": {"knobcap": 8}}}, 400, "certa.knobcap: unknown field"),
    ({"extra_body": {"certa": {"policy": {"kind": "sometimes"}}}}, 400, "unknown policy kind 'sometimes'"),
    ({"extra_body": {"certa": {"preset": "mid"}}}, 400, "program 'sc' has no presets"),
    ({"n": 2}, 400, "n: only 1 is supported"),
])
def test_bad_requests_are_4xx_in_openai_shape(client, kwargs, status, message):
    kwargs = {"model": "sc", **kwargs}
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(messages=QUESTION, **kwargs)
    err = info.value
    assert err.status_code == status
    assert message in err.body["message"] and err.body["code"].startswith("CT")
    assert err.body["type"] == "invalid_request_error"


def test_malformed_json_unknown_field_and_oversized_body(served):
    bg, server = served
    before = server.metrics()["requests_rejected"].get("bad_request", 0)
    r = httpx.post(bg.base_url + "/chat/completions", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "CT410"
    r = httpx.post(bg.base_url + "/chat/completions", json={"model": "sc", "messages": QUESTION, "tools": []})
    assert r.status_code == 400 and "tools: unsupported field" in r.json()["error"]["message"]
    r = httpx.post(bg.base_url + "/completions", content=b"x" * (5 << 20))
    assert r.status_code == 400 and "over the limit" in r.json()["error"]["message"]
    assert server.metrics()["requests_rejected"]["bad_request"] == before + 3


def test_client_disconnect_aborts_every_backend_request(served, client, backend):
    _, server = served
    slow = [{"role": "user", "content": "slow: what is it?"}]
    stream = client.chat.completions.create(model="sc", messages=slow, stream=True)
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    deadline = time.monotonic() + 5
    while len(backend.live_rids()) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(backend.live_rids()) == 4
    stream.close()  # the client hangs up mid-stream
    assert wait_no_live_rids(backend) == set()
    impatient = client.with_options(timeout=0.5)
    with pytest.raises(openai.APITimeoutError):  # a plain request whose client gives up
        impatient.chat.completions.create(model="sc", messages=slow)
    assert wait_no_live_rids(backend) == set()
    assert server.running == 0 and server.metrics()["programs_finished"]["cancelled"] >= 2


def test_too_many_concurrent_programs_get_429_with_retry_after():
    backend = Backend()
    server = Server({"sc": build("sc", branches_per_round=2, cap=2, max_tokens=16)}, backend, max_concurrent=1)
    with start_background(server) as bg, httpx.Client(base_url=bg.base_url, timeout=30) as http:
        with http.stream("POST", "/chat/completions", json={
                "model": "sc", "stream": True, "messages": [{"role": "user", "content": "slow one"}]}) as held:
            lines = held.iter_lines()  # keep a reference: a collected iterator closes the stream
            next(lines)  # the program is admitted
            c = openai.OpenAI(base_url=bg.base_url, api_key="unused", max_retries=0)
            with pytest.raises(openai.RateLimitError) as info:
                c.chat.completions.create(model="sc", messages=QUESTION)
            assert info.value.status_code == 429 and int(info.value.response.headers["retry-after"]) >= 1
            assert "--max-concurrent" in info.value.body["message"]
        assert wait_no_live_rids(backend) == set()


def test_program_error_mid_stream_reaches_the_client():
    backend = ct.ScriptedBackend(responses={"never matches": "x"})  # every request fails: CT203
    with start_background(Server("sc", backend)) as bg:
        c = openai.OpenAI(base_url=bg.base_url, api_key="unused", max_retries=0)
        with pytest.raises(openai.APIError, match="CT203|no response"):
            list(c.chat.completions.create(model="sc", messages=QUESTION, stream=True))
        with pytest.raises(openai.APIStatusError) as info:
            c.chat.completions.create(model="sc", messages=QUESTION)
        assert info.value.status_code == 502 and info.value.body["code"] == "CT203"


def test_health_models_and_metrics(served, client):
    bg, _ = served
    assert [m.id for m in client.models.list()] == ["sc", "cot"]
    assert client.models.retrieve("cot").owned_by == "certa"
    health = httpx.get(bg.url + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert len(health.headers["x-request-id"]) == 32  # none given: one is made up
    client.chat.completions.create(model="sc", messages=QUESTION, extra_body={"certa": {"deadline_s": 60}})
    m = httpx.get(bg.url + "/metrics", headers={"X-Request-Id": "bad id; with spaces " + "x" * 200})
    assert m.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert len(m.headers["x-request-id"]) == 32  # not echoed: only [A-Za-z0-9._:-]{1,128} is
    text = m.text
    for needle in ("certa_programs_running 0", 'certa_programs_finished_total{exit_reason="certaindex"}',
                   'certa_tokens_total{kind="probe"}', "certa_tokens_saved_total", "certa_slo_attainment 1",
                   "certa_queue_depth 0", 'certa_request_latency_seconds_bucket{le="+Inf"}'):
        assert needle in text


def test_graceful_shutdown_finishes_fast_programs_and_aborts_slow_ones_with_503():
    backend = Backend()
    server = Server({"sc": build("sc", branches_per_round=2, cap=2, max_tokens=16)}, backend)
    bg = start_background(server, shutdown_timeout=0.3)
    c = openai.OpenAI(base_url=bg.base_url, api_key="unused", max_retries=0, timeout=30)
    outcome: dict[str, object] = {}

    def ask(key: str, question: str) -> None:
        try:
            outcome[key] = c.chat.completions.create(model="sc", messages=[{"role": "user", "content": question}])
        except openai.APIStatusError as exc:
            outcome[key] = exc

    threads = [threading.Thread(target=ask, args=("slow", "slow one")),
               threading.Thread(target=ask, args=("fast", "What is 9 * 2?"))]
    threads[0].start()
    deadline = time.monotonic() + 5
    while len(backend.live_rids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    threads[1].start()
    while server.stats.started < 2 and time.monotonic() < deadline + 5:  # both admitted
        time.sleep(0.005)
    bg.stop()  # what SIGTERM does: drain for shutdown_timeout, abort the rest, close
    for t in threads:
        t.join(10)
    assert outcome["fast"].choices[0].message.content == "\\boxed{18}"
    slow = outcome["slow"]
    assert isinstance(slow, openai.APIStatusError) and slow.status_code == 503 and slow.body["code"] == "CT413"
    assert backend.live_rids() == set() and server.running == 0

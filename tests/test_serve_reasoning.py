"""``certa serve`` puts certaindex progress where OpenAI-compatible clients keep reasoning
(issue 21, streaming): ``reasoning_content`` deltas in streamed chat chunks and
``message.reasoning_content`` in a plain response, beside the ``certa`` extension, and the
run's figures in ``usage.certa``. Driven over real HTTP (uvicorn on loopback) with httpx and
the official ``openai`` client; LangChain's ChatDeepSeek and litellm when installed."""

from __future__ import annotations

import json
import re

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")
pytest.importorskip("starlette", reason="starlette is not installed (pip install 'certa[serve]')")

import certa as ct  # noqa: E402
from certa.algorithms.programs.library import build  # noqa: E402
from certa.serve import Server  # noqa: E402
from certa.serve.launch import start_background  # noqa: E402

QUESTION = [{"role": "user", "content": "What is 9 * 2?"}]
LINE = "certaindex {:.3f} at knob {} ({} tokens)\n"


@pytest.fixture(scope="module")
def served():
    sc = build("sc", branches_per_round=4, cap=16, max_tokens=64, policy=ct.Threshold(0.55, detect_at=4, every=4))
    backend = ct.ScriptedBackend(responses=["Let me think. The answer is \\boxed{18}."], latency=0.01)
    with start_background(Server({"sc": sc}, backend, max_knob=16)) as bg:
        yield bg


def sse_chunks(bg, path: str, body: dict) -> list[dict]:
    """POST with ``stream: true`` and parse the server-sent events (up to ``[DONE]``)."""
    chunks: list[dict] = []
    with httpx.Client(base_url=bg.url, timeout=30) as client:
        with client.stream("POST", path, json={**body, "stream": True}) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[len("data: "):]
                if payload == "[DONE]":
                    return chunks
                chunks.append(json.loads(payload))
    raise AssertionError("the stream ended without [DONE]")


def test_streamed_chat_carries_progress_as_reasoning_content_beside_the_certa_field(served):
    chunks = sse_chunks(served, "/v1/chat/completions", {"model": "sc", "messages": QUESTION,
                                                         "stream_options": {"include_usage": True}})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    progress = [c for c in chunks if c.get("certa", {}).get("event") == "certaindex"]
    assert [p["certa"]["knob"] for p in progress] == [1, 2, 3, 4]
    for p in progress:  # each progress chunk: the reasoning line and the structured figures agree
        delta, fig = p["choices"][0]["delta"], p["certa"]
        assert delta["content"] == ""  # as before: clients that only read content see nothing new
        assert delta["reasoning_content"] == LINE.format(fig["value"], fig["knob"], fig["tokens"])
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    assert reasoning.endswith("exit certaindex at knob 4 of 16 (" + str(progress[-1]["certa"]["tokens"]) + " tokens, ~"
                              + str(chunks[-2]["certa"]["tokens_saved"]) + " saved)\n")
    assert reasoning.count("\n") == 5  # four certaindex lines and the exit line
    assert "".join(d.get("content") or "" for d in deltas) == "\\boxed{18}"  # the answer alone in content
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] > 0
    assert usage["certa"]["exit_reason"] == "certaindex" and usage["certa"]["knob_used"] == 4
    assert usage["certa"]["knob_cap"] == 16 and usage["certa"]["certaindex"] == 1.0
    assert usage["certa"]["tokens_saved"] == chunks[-2]["certa"]["tokens_saved"] > 0
    assert usage["certa"]["main"] + usage["certa"]["probe"] + usage["certa"]["score"] == usage["completion_tokens"]


def test_plain_chat_message_has_reasoning_content_and_usage_certa(served):
    with httpx.Client(base_url=served.url, timeout=30) as client:
        r = client.post("/v1/chat/completions", json={"model": "sc", "messages": QUESTION})
    assert r.status_code == 200
    body = r.json()
    message, certa = body["choices"][0]["message"], body["certa"]
    assert message["content"] == "\\boxed{18}"
    lines = message["reasoning_content"].splitlines()
    assert lines[:-1] == [LINE.format(p["value"], p["knob"], p["tokens"]).rstrip("\n") for p in certa["certaindex"]]
    assert lines[-1].startswith("exit certaindex at knob 4 of 16")
    assert {k: body["usage"]["certa"][k] for k in ("exit_reason", "knob_used", "knob_cap", "tokens_saved")} == \
        {k: certa[k] for k in ("exit_reason", "knob_used", "knob_cap", "tokens_saved")}


def test_streamed_text_completion_has_no_reasoning_field(served):
    chunks = sse_chunks(served, "/v1/completions", {"model": "sc", "prompt": "What is 9 * 2?"})
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "\\boxed{18}"
    assert not any("reasoning_content" in c["choices"][0] for c in chunks if c["choices"])
    assert any(c.get("certa", {}).get("event") == "certaindex" for c in chunks)


def test_the_official_client_keeps_reasoning_content_on_the_delta(served):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=30) as client:
        chunks = list(client.chat.completions.create(model="sc", messages=QUESTION, stream=True,
                                                     stream_options={"include_usage": True}))
        plain = client.chat.completions.create(model="sc", messages=QUESTION)
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks
                        if c.choices)
    assert reasoning.startswith("certaindex 0.") and "exit certaindex" in reasoning
    assert chunks[-1].usage.model_extra["certa"]["exit_reason"] == "certaindex"
    # same lines either way; the token figures at each point depend on which branches finished first
    assert _without_counts(plain.choices[0].message.model_extra["reasoning_content"]) == _without_counts(reasoning)


def _without_counts(reasoning: str) -> str:
    return re.sub(r"\d+ tokens|~\d+ saved", "#", reasoning)


def test_langchain_message_chunks_concatenate_the_reasoning():
    """What a reasoning-aware LangChain adapter (ChatDeepSeek) builds from our deltas: one
    ``AIMessageChunk`` per chunk with ``additional_kwargs["reasoning_content"]``; langchain-core
    merges them into the whole reasoning text and the answer."""
    messages = pytest.importorskip("langchain_core.messages")
    from certa.serve.completion import Completion, Progress
    from certa.serve.format import Formatter
    from certa.runtime.result import Result
    from certa.runtime.types import CertaindexPoint, TokenUsage

    points = [CertaindexPoint(k, k / 4, {}, 40 * k) for k in range(1, 5)]
    result = Result("sc-0", "sc", "18", None, certaindex=points, tokens=TokenUsage(main=160, requests=4),
                    knob_used=4, knob_cap=16, exit_reason="certaindex", tokens_saved=480)
    done = Completion.from_result(result, request_id="r", model="sc", answer_format="boxed", latency_s=0.1)
    fmt = Formatter("chat", request_id="r", model="sc", created=0)
    wire = [fmt.start()] + [fmt.progress(Progress("sc-0", p.knob, p.value, p.tokens)) for p in points] + \
        fmt.final(done, include_usage=False)
    total = None
    for chunk in wire:
        delta = chunk["choices"][0]["delta"]
        kwargs = {"reasoning_content": delta["reasoning_content"]} if delta.get("reasoning_content") else {}
        piece = messages.AIMessageChunk(content=delta.get("content") or "", additional_kwargs=kwargs)
        total = piece if total is None else total + piece
    assert total.content == "\\boxed{18}"
    assert total.additional_kwargs["reasoning_content"] == done.reasoning()


def test_langchain_chat_deepseek_surfaces_reasoning_and_usage_certa(served):
    lc = pytest.importorskip("langchain_deepseek", reason="langchain-deepseek is not installed")
    model = lc.ChatDeepSeek(model="sc", api_key="unused", api_base=served.base_url, max_retries=0)
    chunks = list(model.stream("What is 9 * 2?"))
    reasoning = "".join(c.additional_kwargs.get("reasoning_content", "") for c in chunks)
    assert "certaindex" in reasoning and "".join(c.content for c in chunks) == "\\boxed{18}"
    msg = model.invoke("What is 9 * 2?")
    assert msg.response_metadata["token_usage"]["certa"]["exit_reason"] == "certaindex"


def test_litellm_surfaces_reasoning_content(served):
    litellm = pytest.importorskip("litellm", reason="litellm is not installed")
    chunks = list(litellm.completion(model="openai/sc", api_base=served.base_url, api_key="unused",
                                     messages=QUESTION, stream=True))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    assert "certaindex" in reasoning

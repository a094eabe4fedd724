"""Request validation of ``certa serve`` (issue 20, item 7): strict JSON types (no string-to-int
or "yes"-to-true coercion), a lone surrogate is a 400 (not a 500), and untrusted strings
cannot forge log lines."""

from __future__ import annotations

import json
import logging
import re

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette", reason="starlette is not installed (pip install 'certa[serve]')")

import certa as ct  # noqa: E402
from certa.serve import BadRequestError, Server, create_app  # noqa: E402
from certa.serve.schemas import ChatRequest, CompletionRequest, parse_request  # noqa: E402

Q = [{"role": "user", "content": "q"}]


@pytest.mark.parametrize("extra, where", [
    ({"max_tokens": "100"}, "max_tokens"), ({"stream": "yes"}, "stream"), ({"stream": 1}, "stream"),
    ({"seed": "7"}, "seed"), ({"seed": 7.0}, "seed"), ({"max_completion_tokens": "9"}, "max_completion_tokens"),
    ({"certa": {"knob_cap": "8"}}, "certa.knob_cap"), ({"certa": {"progress": "false"}}, "certa.progress"),
    ({"certa": {"deadline_s": "2"}}, "certa.deadline_s"), ({"temperature": "0.5"}, "temperature"),
    ({"stream_options": {"include_usage": "true"}}, "stream_options.include_usage"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
])
def test_wrong_json_types_are_refused_not_coerced(extra, where):
    with pytest.raises(BadRequestError) as info:
        parse_request(ChatRequest, {"model": "sc", "messages": Q, **extra})
    assert info.value.param.startswith(where), info.value.message


def test_right_types_still_pass():
    req = parse_request(ChatRequest, {"model": "sc", "messages": Q, "max_tokens": 100, "stream": True, "seed": 3,
                                      "temperature": 1, "certa": {"knob_cap": 8, "deadline_s": 2, "progress": False}})
    assert (req.max_tokens, req.stream, req.seed, req.certa.deadline_s, req.certa.progress) == (100, True, 3, 2.0, False)
    assert parse_request(CompletionRequest, {"model": "sc", "prompt": "q", "top_p": 0.9}).question() == "q"


def app_client(**kw):
    server = Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."]), max_knob=8)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(server, **kw)), base_url="http://t")


async def test_lone_surrogate_is_a_400():
    async with app_client() as c:
        for body in (b'{"model": "sc", "messages": [{"role": "user", "content": "what is \\ud800?"}]}',
                     b'{"model": "sc\\udfff", "messages": [{"role": "user", "content": "q"}]}',
                     b'{"model": "sc", "prompt": "\\udc00"}'):
            path = "/v1/completions" if b"prompt" in body else "/v1/chat/completions"
            r = await c.post(path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "CT410" and "surrogate" in r.json()["error"]["message"]


async def test_untrusted_strings_cannot_forge_log_lines(caplog):
    forged = "x\nINFO certa.serve: request_id=forged status=200 ok"
    caplog.set_level(logging.INFO, logger="certa.serve")
    async with app_client() as c:
        r = await c.post("/v1/chat/completions", json={"model": "sc", "messages": Q, "certa": {forged: 1}})
        assert r.status_code == 400
        r = await c.post("/v1/chat/completions", json={"model": "sc\r\nINFO forged", "messages": Q})
        assert r.status_code == 404
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "certa.serve"]
    assert len(lines) == 2, lines
    for line in lines:
        assert "\n" not in line and "\r" not in line, line
    assert "\\n" in lines[0] and re.search(r"request_id=[0-9a-f]{32} status=400", lines[0])


async def test_the_http_layer_validates_certa_options_once(monkeypatch):
    """The server takes the CertaOptions the HTTP layer parsed (issue 39: not parsed twice)."""
    def again(*a, **kw):
        raise AssertionError("CertaOptions parsed a second time")
    monkeypatch.setattr("certa.serve.server.parse_request", again)
    async with app_client() as c:
        r = await c.post("/v1/chat/completions", json={"model": "sc", "messages": Q,
                                                       "certa": {"knob_cap": 4, "answer_format": "plain"}})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "18" and r.json()["certa"]["knob_cap"] == 4


async def test_certa_options_and_their_fields_as_keywords_are_not_mixed():
    from certa.serve.schemas import CertaOptions
    server = Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."]))
    with pytest.raises(ct.CertaError, match="certa= takes a CertaOptions"):
        await server.complete("q", certa=CertaOptions(knob_cap=4), knob_cap=8)
    assert (await server.complete("q", certa=CertaOptions(knob_cap=4))).knob_cap == 4

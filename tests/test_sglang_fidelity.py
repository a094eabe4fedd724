"""SGLang fidelity (issue 22): what the pinned sglang==0.5.23 does that certa must match.

Against the contract fake (tests/fakes/sglang_fake.py): rids are prefix-free on the wire
(SGLang's scheduler aborts by prefix), seeds count only with deterministic inference, the
admin key opens /abort_request and a refused abort is reported and counted, Engine logprobs
carry token ids only, the ``sglang`` extra needs Python >= 3.11, and the HTTP backends share
their constructor names. Every test here failed before the matching fix.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from certa.runtime.errors import ConfigError
from certa.runtime.types import GenRequest, ScoreRequest

from .fakes.sglang_fake import FakeSGLangConfig
from .fakes.sglang_fake_http import FakeEngine
from .test_sglang_contract import FAST, W, _running_pair, _server, _until

pytest.importorskip("httpx", reason="the HTTP backends need httpx (pip install 'certa[http]')")
from certa.runtime.backends.http_common import wire_rid  # noqa: E402
from certa.runtime.backends.sglang.engine import SGLangEngineBackend  # noqa: E402
from certa.runtime.backends.sglang.http import SGLangHTTPBackend  # noqa: E402


# ---- rids are prefix-free on the wire (SGLang's scheduler aborts by prefix) -------------------
def test_wire_rids_are_prefix_free():
    rids = ["X-s1", "X-s10", "X-s1.c1", "X-s1.c10", "a#", "a", "a%23", "a%", "", "#", "%"]
    wired = [wire_rid(r) for r in rids]
    assert len(set(wired)) == len(rids)  # one-to-one
    assert not [(a, b) for a in wired for b in wired if a != b and b.startswith(a)]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab%#2-.~", max_size=8), st.text(alphabet="ab%#2-.~", max_size=8))
def test_no_wire_rid_is_a_prefix_of_another(a, b):
    if a != b:
        assert not wire_rid(b).startswith(wire_rid(a)) and wire_rid(a) != wire_rid(b)


async def test_aborting_a_rid_spares_rids_it_is_a_prefix_of():
    srv = await _server()
    b = SGLangHTTPBackend(srv.url)
    short, long = await _running_pair(srv, b, "X-s1", "X-s10")
    assert await b.abort("X-s1") is True
    assert (await short).finish_reason == "abort"
    await asyncio.sleep(0.05)
    assert not long.done() and len(srv.core.running) == 1  # the scheduler's startswith spared it
    await b.abort("X-s10")
    assert (await long).finish_reason == "abort"
    await b.close()
    await srv.close()


async def test_engine_abort_spares_rids_it_is_a_prefix_of():
    eng = FakeEngine(FakeSGLangConfig(**FAST))
    b = SGLangEngineBackend(engine=eng)
    seq = await b.open_sequence(GenRequest(prompt="x", max_tokens=10_000, rid="P-s1"))
    other = asyncio.ensure_future(b.generate(GenRequest(prompt="y", max_tokens=10_000, rid="P-s1.c0x")))
    chunk = asyncio.ensure_future(seq.extend(10_000))  # rid P-s1.c0: a prefix of the other one
    await _until(lambda: len(eng.core.running) == 2)
    assert await b.abort("P-s1.c0") is True
    await chunk
    await asyncio.sleep(0.05)
    assert not other.done()
    await b.abort("P-s1.c0x")
    await other
    await b.close()


# ---- seeds -----------------------------------------------------------------------------------------
async def test_seeds_are_honoured_only_with_deterministic_inference():
    sampled = dict(prompt="q", max_tokens=4, temperature=0.8, seed=7, program_id="p")
    plain, det = await _server(), await _server(enable_deterministic_inference=True)
    b = SGLangHTTPBackend(plain.url)
    with pytest.warns(RuntimeWarning, match="--enable-deterministic-inference") as rec:
        outs = [await b.generate(GenRequest(rid=f"s{i}", **sampled)) for i in range(3)]
    assert len(rec) == 1  # warned once, not per request
    assert len({o.text for o in outs}) > 1  # the seed did not make them equal
    d = SGLangHTTPBackend(det.url, server_deterministic=True)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = [await d.generate(GenRequest(rid=f"d{i}", **sampled)) for i in range(2)]
    assert outs[0].text == outs[1].text
    for x in (b, d, plain, det):
        await x.close()


async def test_engine_sets_deterministic_inference_for_seeded_runs(monkeypatch):
    import sys
    import types

    built: list[FakeEngine] = []
    fake = types.ModuleType("sglang")
    fake.Engine = lambda **kw: built.append(FakeEngine(**kw)) or built[-1]
    monkeypatch.setitem(sys.modules, "sglang", fake)
    b = SGLangEngineBackend(model="m", deterministic=True, step_seconds=0.002)
    assert built[-1].kwargs["enable_deterministic_inference"] is True and built[-1].kwargs["model_path"] == "m"
    a1 = await b.generate(GenRequest(prompt="q", max_tokens=4, temperature=0.8, seed=3, rid="a"))
    a2 = await b.generate(GenRequest(prompt="q", max_tokens=4, temperature=0.8, seed=3, rid="b"))
    assert a1.text == a2.text
    await b.close()
    assert built[-1].shut_down
    plain = SGLangEngineBackend(engine=FakeEngine(FakeSGLangConfig(**FAST)))  # built without the flag
    with pytest.warns(RuntimeWarning, match="deterministic"):
        await plain.generate(GenRequest(prompt="q", max_tokens=2, temperature=0.8, seed=3, rid="c"))


# ---- admin key and abort failures -----------------------------------------------------------------
async def test_abort_uses_the_admin_key_and_failures_are_counted():
    srv = await _server(api_key="k", admin_api_key="adm", disconnect_abort_delay=30.0)
    for kw, fails in (({}, 1), ({"admin_api_key": "adm"}, 0)):
        b = SGLangHTTPBackend(srv.url, api_key="k", **kw)
        task = asyncio.ensure_future(b.generate(GenRequest(prompt="x", max_tokens=10_000, rid="r")))
        await _until(lambda: W("r") in srv.core.states and srv.core.running)
        assert await b.abort("r") is True and (await task).finish_reason == "abort"
        assert b.metrics()["abort_failures"] == fails and b.metrics()["aborts_sent"] == 1
        if fails:  # refused (the gateway-style api key cannot abort): still running on the server
            assert srv.unauthorized == ["/abort_request"] and W("r") in srv.core.states
            srv.core.abort_request(W("r"))
        else:
            assert W("r") not in srv.core.states and srv.unauthorized == ["/abort_request"]
        await b.close()
    assert "adm" not in repr(b)
    await srv.close()


async def test_abort_failures_reach_the_server_metrics():
    pytest.importorskip("starlette", reason="certa serve needs starlette (pip install 'certa[serve]')")
    from certa.serve import Server

    srv = await _server(admin_api_key="adm")
    b = SGLangHTTPBackend(srv.url)
    server = Server("sc", b)
    task = asyncio.ensure_future(b.generate(GenRequest(prompt="x", max_tokens=10_000, rid="m1")))
    await _until(lambda: W("m1") in srv.core.states)
    await b.abort("m1")
    await task
    assert server.metrics()["backend"]["abort_failures"] == 1
    text = server.prometheus()
    assert "certa_backend_abort_failures_total 1.0" in text and "certa_backend_workers_down 0.0" in text
    srv.core.abort_request(abort_all=True)
    await b.close()
    await srv.close()


async def test_abort_failure_is_reported(caplog):
    srv = await _server(admin_api_key="adm")
    b = SGLangHTTPBackend(srv.url)
    task = asyncio.ensure_future(b.generate(GenRequest(prompt="x", max_tokens=10_000, rid="r2")))
    await _until(lambda: W("r2") in srv.core.states)
    with caplog.at_level("WARNING", logger="certa.runtime.backends"):
        await b.abort("r2")
    await task
    assert "HTTP 401" in caplog.text and "admin_api_key" in caplog.text
    await b.close()
    await srv.close()


# ---- engine logprobs carry ids, not text ------------------------------------------------------
async def test_engine_top_logprobs_are_decoded_from_ids():
    eng = FakeEngine(FakeSGLangConfig(**FAST))
    b = SGLangEngineBackend(engine=eng)
    s = await b.score(ScoreRequest(prompt="Yes or No", rid="s"))
    assert "return_text_in_logprobs" not in eng.core.received[-1]
    assert s.probs == pytest.approx({"Yes": 0.8, "No": 0.2})  # only through tokenizer.decode(id)
    await b.close()


# ---- packaging and constructor names -------------------------------------------------------------
def test_sglang_extra_needs_python_311():
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extra = meta["project"]["optional-dependencies"]["sglang"]
    assert 'sglang==0.5.23; python_version >= "3.11"' in extra


def test_constructor_names_are_the_same_across_http_backends():
    from certa.runtime.backends.openai_http import OpenAIBackend
    from certa.runtime.backends.registry import make_backend

    one, many = "http://127.0.0.1:1", ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    for cls in (OpenAIBackend, SGLangHTTPBackend):
        assert cls(base_url=one, model="m").workers == [one] and cls(one).model is None
        assert cls(urls=many, model="m").workers == many
        assert cls(urls=one).workers == [one] and cls(many).workers == many  # kept: the docs showed both
        with pytest.raises(ConfigError, match="base_url.*urls"):
            cls(base_url=one, urls=many)
        with pytest.raises(ConfigError, match="base_url.*urls"):
            cls()
    assert make_backend("sglang-http", base_url=one).workers == [one]
    assert make_backend("openai", urls=many).workers == many
    eng = FakeEngine(FakeSGLangConfig(**FAST))
    assert SGLangEngineBackend(engine=eng).engine is eng
    with pytest.raises(ConfigError, match="model"):
        SGLangEngineBackend(model="a", model_path="b")

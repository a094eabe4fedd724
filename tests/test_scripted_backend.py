"""The scripted fake backend passes the shared conformance suite, plus its own behaviour."""

from __future__ import annotations

import asyncio

import pytest

from certa.runtime import GenRequest, ScriptedBackend
from certa.runtime.errors import BackendError
from certa.runtime.backends.testing.scripted import words

from .conformance import BackendConformance

COUNTING = " ".join(f"n{i}," for i in range(1, 500))


def counting_probe(text: str, suffix: str) -> str:
    return f"{len(words(text))}}} done"


class TestScriptedChunked(BackendConformance):
    backend_name = "scripted"
    long_tokens = 400

    @pytest.fixture
    async def backend(self):
        b = ScriptedBackend(responses=lambda r: COUNTING, token_latency=0.0005)
        yield b
        await b.close()


class TestScriptedNative(BackendConformance):
    backend_name = "scripted"
    @pytest.fixture
    async def backend(self):
        b = ScriptedBackend(responses=lambda r: COUNTING, token_latency=0.0005, probe=counting_probe,
                            scores=lambda r: {"Yes": 0.75, "No": 0.25})
        yield b
        await b.close()


async def test_responses_list_cycles_and_mapping_cycles():
    b = ScriptedBackend(responses=["a", "b"])
    texts = [(await b.generate(GenRequest(prompt="x", rid=str(i)))).text for i in range(3)]
    assert texts == ["a", "b", "a"]
    m = ScriptedBackend(responses={"hello": ["1", "2"]})
    assert (await m.generate(GenRequest(prompt="say hello", rid="a"))).text == "1"
    assert (await m.generate(GenRequest(prompt="say hello", rid="b"))).text == "2"


async def test_unmatched_prompt_is_a_backend_error():
    b = ScriptedBackend(responses={"hello": "hi"})
    with pytest.raises(BackendError) as e:
        await b.generate(GenRequest(prompt="nothing", rid="a", program_id="p", step="s"))
    assert e.value.code == "CT203" and "program=p" in str(e.value)


async def test_latency_is_applied():
    b = ScriptedBackend(responses=["x"], latency=0.05)
    t = asyncio.get_running_loop().time()
    await b.generate(GenRequest(prompt="p", rid="a"))
    assert asyncio.get_running_loop().time() - t >= 0.045


async def test_the_records_are_bounded_so_a_long_serve_does_not_grow():
    """issue 40 item 14: ``certa serve --backend scripted`` kept every request forever. The
    backend made by name (what the server uses) keeps the newest 10,000; ``served`` counts all."""
    from certa.runtime.backends.registry import make_backend
    from certa.runtime.errors import ConfigError

    b = make_backend("scripted", responses=["ok"])
    n = 12_600   # past 10,000 + 10,000 // 4: one trim happened
    for i in range(n):
        await b.generate(GenRequest(prompt=f"q{i}", rid=f"r{i}"))
    assert b.served == n and len(b.requests) <= 12_500 and b.requests[-1].rid == f"r{n - 1}"
    assert [r.rid for r in b.requests] == [f"r{i}" for i in range(n - len(b.requests), n)]   # the newest, in order
    small = ScriptedBackend(responses=["ok"], keep=4)
    for i in range(50):
        await small.generate(GenRequest(prompt="q", rid=f"s{i}"))
        await small.abort(f"s{i}")
    assert [r.rid for r in small.requests][-4:] == ["s46", "s47", "s48", "s49"] and len(small.requests) <= 5
    assert small.abort_calls[-1] == "s49" and len(small.abort_calls) <= 5 and small.served == 50
    everything = ScriptedBackend(responses=["ok"], keep=None)
    for i in range(30):
        await everything.generate(GenRequest(prompt="q", rid=f"e{i}"))
    assert len(everything.requests) == 30
    with pytest.raises(ConfigError, match="keep"):
        ScriptedBackend(keep=0)

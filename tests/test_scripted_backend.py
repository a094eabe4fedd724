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
    long_tokens = 400

    @pytest.fixture
    async def backend(self):
        b = ScriptedBackend(responses=lambda r: COUNTING, token_latency=0.0005)
        yield b
        await b.close()


class TestScriptedNative(BackendConformance):
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

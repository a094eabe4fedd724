"""The conformance suite on a REAL embedded SGLang engine. GPU only; skipped elsewhere.

Needs ``pip install 'certa[sglang]'``, a CUDA GPU and a local model:
``CERTA_SGLANG_MODEL=/path/to/Qwen2.5-0.5B-Instruct`` (a directory the engine can load
without network). Extra engine kwargs as JSON in ``CERTA_SGLANG_ARGS``, e.g.
``{"mem_fraction_static": 0.5}``. Without all of these the module is skipped with the
reason; it never passes by default on a machine without a GPU.
"""

from __future__ import annotations

import json
import os

import pytest

sglang = pytest.importorskip("sglang", reason="sglang is not installed (pip install 'certa[sglang]', needs CUDA)")
torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the real SGLang engine test needs a GPU", allow_module_level=True)
MODEL = os.environ.get("CERTA_SGLANG_MODEL")
if not MODEL:
    pytest.skip("set CERTA_SGLANG_MODEL to a local model directory to run the SGLang GPU test",
                allow_module_level=True)

import pytest_asyncio  # noqa: E402

from certa.runtime.backends.sglang.engine import SGLangEngineBackend  # noqa: E402
from certa.runtime.types import GenRequest  # noqa: E402

from .conformance import BackendConformance  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def engine():
    """One engine for the module, built outside any running event loop."""
    kwargs = {"enable_priority_scheduling": True, "schedule_policy": "fcfs",
              "priority_scheduling_preemption_threshold": 2**30, "mem_fraction_static": 0.5}
    kwargs.update(json.loads(os.environ.get("CERTA_SGLANG_ARGS", "{}")))
    eng = sglang.Engine(model_path=MODEL, **kwargs)
    yield eng
    eng.shutdown()


class TestSGLangEngineGPU(BackendConformance):
    backend_name = "sglang"
    long_tokens = 2000

    @pytest_asyncio.fixture(loop_scope="module")
    async def backend(self, engine):
        b = SGLangEngineBackend(engine=engine)
        yield b
        await b.close()

    async def test_priority_and_rid_reach_the_engine(self, backend):
        out = await backend.generate(GenRequest(prompt="1, 2, 3,", max_tokens=4, rid="gpu-prio", priority=2.0))
        assert out.tokens > 0 and out.rid == "gpu-prio" and backend.live_rids() == set()

    async def test_abort_spares_the_rids_it_is_a_prefix_of(self, backend):
        """SGLang's scheduler aborts by rid PREFIX; certa's wire rids are prefix-free."""
        import asyncio

        short = asyncio.ensure_future(backend.generate(GenRequest(prompt="1, 2, 3,", max_tokens=2000, rid="gpu-s1")))
        long = asyncio.ensure_future(backend.generate(GenRequest(prompt="a, b, c,", max_tokens=300, rid="gpu-s10")))
        await asyncio.sleep(0.5)
        assert await backend.abort("gpu-s1") is True
        assert (await short).finish_reason == "abort"
        out = await long
        assert out.finish_reason != "abort" and out.tokens > 0

    async def test_top_logprobs_are_decoded_from_token_ids(self, backend):
        from certa.runtime.types import ScoreRequest

        s = await backend.score(ScoreRequest(prompt="Is 2+2=4? Answer Yes or No:", rid="gpu-score"))
        assert abs(sum(s.probs.values()) - 1.0) < 1e-6 and s.probs["Yes"] > 0.5  # from logprobs via decode(id)

"""End to end on the real CPU engine: ``certa serve`` over the llama.cpp backend with the small
model (Qwen2.5-Coder-0.5B), driven by the official OpenAI client. Tiny program configs keep
it under a minute on 2 cores. Skips (with the reason) when llama-cpp-python, the backend or
the model is not installed."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.model
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'certa[cpu]')")
openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install 'certa[server-test]')")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")

from certa.runtime import models  # noqa: E402

SMALL = models.KNOWN_MODELS["qwen2.5-coder-0.5b"]


@pytest.fixture(scope="module")
def served():
    if models.locate(SMALL)[0] == "missing":
        pytest.skip(f"the 0.5B model is not installed ({SMALL.pip_hint})")
    try:
        from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    except ImportError as exc:
        pytest.skip(f"the llama.cpp backend is not available: {exc}")
    from certa.algorithms.programs.library import build
    from certa.serve import Server
    from certa.serve.launch import start_background
    # one thread: on a shared 2-core machine two spinning llama.cpp threads can be ~10x slower
    backend = LlamaCppBackend("qwen2.5-coder-0.5b", n_ctx=4096, n_seq=4, n_threads=1, max_batch_tokens=256)
    programs = {"sc": build("sc", branches_per_round=2, cap=2, max_tokens=24),
                "cot": build("cot", preset="high", k=2, interval=16, max_tokens=48, probe_tokens=8),  # probes every chunk
                "long": build("sc", branches_per_round=2, cap=2, max_tokens=512)}
    server = Server(programs, backend)
    try:
        with start_background(server, shutdown_timeout=5) as bg:
            with openai.OpenAI(base_url=bg.base_url, api_key="unused", max_retries=0, timeout=120) as client:
                yield client, backend
    finally:
        backend.shutdown()


def test_chat_completion_counts_real_tokens(served):
    client, backend = served
    r = client.chat.completions.create(model="sc", messages=[{"role": "user", "content": "What is 7 + 5?"}])
    usage, certa = r.usage, r.model_extra["certa"]
    split = usage.model_extra["certa"]
    assert split["main"] > 0 and split["requests"] == 2 and usage.prompt_tokens > 0
    assert usage.completion_tokens == split["main"] + split["probe"] + split["score"]
    assert certa["knob_used"] == 2 and certa["exit_reason"] in ("certaindex", "cap")
    assert isinstance(r.choices[0].message.content, str)  # whatever the model answered, as data
    assert backend.live_rids() == set()


def test_streaming_cot_probes_and_disconnect(served):
    client, backend = served
    chunks = list(client.chat.completions.create(model="cot", messages=[{"role": "user", "content": "What is 7 + 5?"}],
                                                 stream=True, stream_options={"include_usage": True}))
    progress = [c.model_extra["certa"] for c in chunks if (c.model_extra or {}).get("certa", {}).get("event") == "certaindex"]
    assert progress and all(0.0 <= p["value"] <= 1.0 for p in progress)
    usage = chunks[-1].usage
    assert usage.model_extra["certa"]["probe"] > 0  # probe tokens are counted and reported
    assert usage.completion_tokens == sum(usage.model_extra["certa"][k] for k in ("main", "probe", "score"))
    stream = client.chat.completions.create(model="long", messages=[{"role": "user", "content": "Prove that 2+2=4."}],
                                            stream=True)
    next(iter(stream))
    deadline = time.monotonic() + 10
    while not backend.live_rids() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backend.live_rids()
    stream.close()  # hang up while the engine decodes: every rid is aborted
    deadline = time.monotonic() + 10
    while backend.live_rids() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backend.live_rids() == set()

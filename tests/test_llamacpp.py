"""The llama.cpp engine with a real model (Qwen2.5-Coder-0.5B): conformance, prefix sharing,
scheduler-ordered batches, exact probe rollback, abort and cancellation.

Skips (with the reason) when llama-cpp-python or the 0.5B model is not installed.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from certa.runtime.scheduling.scheduler import Scheduler, SchedulingPolicy, Ticket
from certa.runtime.types import GenRequest

from .conformance import BackendConformance

pytestmark = pytest.mark.model
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'certa[cpu]')")

from certa.runtime import models

SMALL = models.KNOWN_MODELS["qwen2.5-coder-0.5b"]
# llama.cpp threads spin-wait for each other: on cores shared with other busy processes one
# thread is far steadier than two (see LlamaEngine's docstring); CERTA_TEST_THREADS overrides.
THREADS = int(os.environ.get("CERTA_TEST_THREADS", "1"))
COUNT = "Count from one to fifty, separated by commas: one, two, three,"


def _small_model_path():
    if models.locate(SMALL)[0] == "missing":
        pytest.skip(f"the 0.5B model is not installed ({SMALL.pip_hint})")
    return models.ensure(SMALL)


@pytest.fixture(scope="module")
def llama():
    from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    b = LlamaCppBackend(_small_model_path(), n_ctx=4096, n_seq=8, n_threads=THREADS, max_batch_tokens=256)
    yield b
    b.shutdown()


@pytest.fixture(scope="module")
def tiny():
    """A second engine with only 2 slots, so that slot contention (ordering, preemption) shows."""
    from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    b = LlamaCppBackend(_small_model_path(), n_ctx=1024, n_seq=2, n_threads=THREADS, max_batch_tokens=128)
    yield b
    b.shutdown()


def rid() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def settle(backend, timeout: float = 10.0) -> None:
    """Wait until the engine thread has applied every posted command (its state is then stable)."""
    assert await asyncio.to_thread(backend.engine.barrier, timeout)


class TestLlamaCpp(BackendConformance):
    backend_name = "llamacpp"
    long_tokens = 400

    @pytest.fixture
    def backend(self, llama):
        llama.attach_scheduler(None)
        yield llama
        assert llama.live_rids() == set()


async def test_capabilities(llama):
    c = llama.capabilities
    assert (c.rollback_probe, c.score, c.logprobs, c.priority, c.name) == (True, True, True, False, "llamacpp")
    assert llama.attach_scheduler  # the engine orders its own batches by certa's scheduler


async def test_fanout_prefills_shared_prompt_once(llama):
    llama.attach_scheduler(None)
    prompt = f"Note {uuid.uuid4().hex[:6]}. {COUNT}"  # a prompt no earlier test cached
    n_prompt = len(llama.encode(prompt))
    before = llama.stats()
    outs = await asyncio.gather(*(llama.generate(GenRequest(prompt=prompt, max_tokens=4, temperature=0.8, seed=i,
                                                            rid=rid())) for i in range(8)))
    after = llama.stats()
    evaluated = after["prompt_tokens"] - before["prompt_tokens"]
    assert evaluated <= n_prompt + 7, f"prompt of {n_prompt} tokens evaluated as {evaluated} tokens"
    assert sorted(o.cached_prompt_tokens for o in outs)[1:] == [n_prompt - 1] * 7
    assert all(o.prompt_tokens == n_prompt and o.tokens > 0 for o in outs)


class Favor(SchedulingPolicy):
    """Runs one program's tickets first (then FCFS)."""

    name = "favor"

    def __init__(self, program_id: str) -> None:
        self.program_id = program_id

    def key(self, ticket: Ticket, now: float) -> tuple:
        return (ticket.program.program_id != self.program_id, ticket.enqueued, ticket.seq)


async def _finish_order(backend, policy) -> list[str]:
    backend.attach_scheduler(Scheduler(policy=policy) if policy else None)
    done: list[str] = []
    tasks = []
    with backend.engine.paused():  # all eight reach the policy in the same iteration
        for prog in ("B", "A"):  # B is submitted first
            for i in range(4):
                r = GenRequest(prompt=f"Program {prog}, request {i}: {COUNT}", max_tokens=5, rid=rid(),
                               program_id=prog)
                t = asyncio.ensure_future(backend.generate(r))
                t.add_done_callback(lambda _t, p=prog: done.append(p))
                tasks.append(t)
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    backend.attach_scheduler(None)
    return done


async def test_batch_order_follows_scheduler_policy(tiny):
    assert await _finish_order(tiny, Favor("A")) == ["A"] * 4 + ["B"] * 4
    assert await _finish_order(tiny, None) == ["B"] * 4 + ["A"] * 4  # FCFS control: B came first


async def test_probes_roll_back_exactly(llama):
    llama.attach_scheduler(None)
    story = "Write a short story about a robot who learns to paint."
    # cache the prompt: both runs then evaluate only its last token (identical prefill numerics)
    await llama.generate(GenRequest(prompt=story, chat=True, max_tokens=1, rid=rid()))
    for temperature, seed in ((0.0, None), (0.9, 7)):
        def request(tag: str, temperature: float = temperature, seed: int | None = seed) -> GenRequest:
            return GenRequest(prompt=story, max_tokens=40, temperature=temperature, seed=seed,
                              rid=f"{tag}-{rid()}", chat=True)
        ref = await llama.open_sequence(request("ref"))
        await ref.extend(40)
        await ref.close()
        seq = await llama.open_sequence(request("probed"))
        answers = []
        while not seq.finished:
            await seq.extend(8)
            answers.append(await seq.probe("\nSo the robot's name is", max_tokens=5))
        await seq.close()
        assert seq._job.out == ref._job.out, f"continuation changed by probes (T={temperature})"
        assert seq.text == ref.text
        assert len(answers) >= 4 and all(0 < a.tokens <= 5 for a in answers)


async def test_probe_stop_string_ends_the_probe(llama):
    seq = await llama.open_sequence(GenRequest(prompt=COUNT, max_tokens=16, rid=rid()))
    await seq.extend(4)
    p = await seq.probe(" In digits: {1, 2, 3", max_tokens=12, stop=("}",))
    assert "}" not in p.text and p.tokens < 12 and p.finish_reason == "stop"
    q = await seq.probe(" In digits: {1, 2, 3", max_tokens=12, close_brace=True)
    assert q.text.endswith("}") and q.text.count("}") == q.text.count("{") + 1 and q.finish_reason == "stop"
    assert len(q.token_logprobs) == q.tokens and all(lp <= 0.0 for lp in q.token_logprobs)
    await seq.close()


async def test_sampled_probes_are_seeded_and_roll_back(llama):
    """A probe sampled at the chain's temperature (the forced probe style): the same seed gives the
    same answer, other seeds may differ, and the continuation is unchanged by either."""
    llama.attach_scheduler(None)
    req = lambda tag: GenRequest(prompt=COUNT, max_tokens=24, temperature=0.8, seed=3, rid=f"{tag}-{rid()}")  # noqa: E731
    ref = await llama.open_sequence(req("ref"))
    await ref.extend(24)
    await ref.close()
    seq = await llama.open_sequence(req("probed"))
    await seq.extend(12)
    suffix = "**Final Answer**\n\n\\[ \\boxed{"
    a = await seq.probe(suffix, max_tokens=8, temperature=0.8, top_p=0.95, seed=11, close_brace=True, stop=("\\]",))
    b = await seq.probe(suffix, max_tokens=8, temperature=0.8, top_p=0.95, seed=11, close_brace=True, stop=("\\]",))
    others = {(await seq.probe(suffix, max_tokens=8, temperature=1.5, seed=s)).text for s in range(6)}
    assert a.text == b.text and a.tokens == b.tokens and len(others) > 1
    await seq.extend(12)
    await seq.close()
    assert seq._job.out == ref._job.out


async def test_cot_program_default_runs_end_to_end_on_the_cpu_model(llama):
    """cot_program() as shipped (the reasoning certaindex, forced probes sampled at the chain's
    temperature) on the real model, then the same probe style probing every chunk: probes are
    taken, counted as their own kind, and answered with the box's content."""
    import certa as ct
    from certa.algorithms.answers.equivalence import grade
    from certa.algorithms.programs.cot_probe import cot_program
    from certa.algorithms.signals.reasoning import ProbeVote
    llama.attach_scheduler(None)
    q = "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts for 13 robes?"
    r = await ct.Runtime(llama).run(cot_program(max_tokens=192, temperature=0.6, top_p=0.95), question=q, seed=1)
    assert r.error is None and r.exit_reason in ("certaindex", "done", "cap") and 0 < r.tokens.main <= 192
    assert r.answer is None or isinstance(grade(str(r.answer), "39"), bool)
    probing = cot_program(max_tokens=128, temperature=0.6, top_p=0.95, signal=ProbeVote(span=128, share=1.0, every=64))
    r = await ct.Runtime(llama).run(probing, question=q, seed=2)
    ats = [o.at for o in r.state.probes]
    assert ats and ats == list(range(64, 64 * len(ats) + 1, 64)), ats  # a forced probe after every chunk
    assert 0 < r.tokens.probe <= 32 * len(ats) and all("\\]" not in o.text for o in r.state.probes)


def test_close_brace_stops_after_the_brace_that_closes_the_suffix():
    from certa.runtime.backends.llamacpp.jobs import TextTail
    t = TextTail(close_brace=True)
    pieces = [b"\\frac{1", b"}{2", b"}} \\]", b" more"]
    stopped = [t.push(p) for p in pieces[:3]]
    assert stopped == [False, False, True] and t.text == "\\frac{1}{2}}"
    esc = TextTail(close_brace=True)
    assert not esc.push(b"\\} 5") and esc.push(b"}") and esc.text == "\\} 5}"


async def test_abort_frees_the_slot_at_once(llama):
    llama.attach_scheduler(None)
    r = GenRequest(prompt=COUNT, max_tokens=400, rid=rid())
    task = asyncio.ensure_future(llama.generate(r))
    job = None
    for _ in range(500):
        await asyncio.sleep(0.02)
        job = next((j for j in llama.engine.batcher.jobs if j.rid == r.rid), None)
        if job is not None and job.out:
            break
    assert job is not None and job.out, "request never started decoding"
    slot = job.slot
    assert await llama.abort(r.rid) is True
    assert r.rid not in llama.live_rids()
    out = await asyncio.wait_for(task, 10)
    assert out.finish_reason == "abort" and out.tokens < 400
    await settle(llama)
    assert job not in llama.engine.batcher.jobs and job.slot is None
    assert slot.owner is None and slot.kv == []  # seq_rm'ed, not kept as a cache
    import llama_cpp as lc
    assert lc.llama_memory_seq_pos_max(llama.engine.kv.mem, slot.id) == -1


async def test_cancelled_task_leaves_no_live_rid(llama):
    llama.attach_scheduler(None)
    r = GenRequest(prompt=COUNT, max_tokens=400, rid=rid())
    task = asyncio.ensure_future(llama.generate(r))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert r.rid not in llama.live_rids()
    await settle(llama)
    assert all(j.rid != r.rid for j in llama.engine.batcher.jobs)


async def test_idle_sequence_is_preempted_and_recomputed(tiny):
    seqs = [await tiny.open_sequence(GenRequest(prompt=f"{i}: {COUNT}", max_tokens=12, rid=rid())) for i in range(2)]
    first = [await s.extend(3) for s in seqs]
    out = await tiny.generate(GenRequest(prompt="Say hi.", max_tokens=3, rid=rid()))  # needs a slot now
    assert out.tokens > 0
    assert tiny.stats()["preemptions"] >= 1
    more = [await s.extend(3) for s in seqs]  # the preempted one recomputes its KV and goes on
    assert all(a.tokens == 3 and b.tokens == 3 for a, b in zip(first, more))
    for s in seqs:
        await s.close()


async def test_chat_template_from_gguf_and_safe_contents(llama):
    m = llama.model
    text = m.render_chat([{"role": "user", "content": "hi"}])
    assert text.rstrip().endswith("<|im_start|>assistant")
    end = m.tokenize("<|im_end|>", parse_special=True)
    assert len(end) == 1
    toks = m.encode_prompt("ignore <|im_end|> this", chat=True, system="Be brief.")
    assert toks.count(end[0]) == 2  # the system and user turns' own ends, not the one in the content
    out = await llama.generate(GenRequest(prompt="What is 2+2? Reply with a number.", chat=True, max_tokens=8,
                                          rid=rid()))
    assert "4" in out.text
    head = m.encode_prompt("hi", chat=True)
    cont = m.encode_prompt("hi", chat=True, assistant_prefix="Sure <|im_end|>")
    assert cont[:len(head)] == head and cont[len(head):] == m.tokenize("Sure <|im_end|>")  # plain text, no turn end
    assert end[0] not in cont[len(head):]


async def test_logprobs_and_score(llama):
    out = await llama.generate(GenRequest(prompt=COUNT, max_tokens=5, logprobs=1, rid=rid()))
    assert out.token_logprobs is not None and len(out.token_logprobs) == out.tokens
    assert all(lp <= 0.0 for lp in out.token_logprobs)
    from certa.runtime.types import ScoreRequest
    s = await llama.score(ScoreRequest(prompt="Question: is the sky blue on a clear day? Answer Yes or No.\nAnswer:",
                                       rid=rid()))
    assert s.probs["Yes"] > s.probs["No"]


async def test_runtime_attaches_scheduler_and_counts_tokens(llama):
    from certa.runtime import Knob, Program, Runtime

    class Echo(Program):
        knob = Knob("iterations", cap=1)

        def __init__(self, q):
            super().__init__()
            self.state = {"q": q, "answer": None}

        async def execute(self, ctx):
            self.state["answer"] = (await ctx.gen(self.state["q"], max_tokens=4)).text
            self.knob_used += 1
            return False

    rt = Runtime(backend=llama)
    assert llama.engine.scheduler is rt.scheduler
    res = await rt.run(Echo, q=COUNT)
    assert res.error is None and 0 < res.tokens.main <= 4
    llama.attach_scheduler(None)


async def test_iteration_records(llama, tmp_path):
    await llama.generate(GenRequest(prompt=COUNT, max_tokens=3, rid=rid()))
    from certa.runtime.sim.cost_model import load_records
    recs = llama.engine.iterations
    assert recs and all(r.seconds > 0 and r.n_tokens > 0 for r in recs)
    # the whole iteration (batch formation + decode + sampling) is timed too, back to back
    assert all(r.wall_seconds >= r.seconds and r.started > 0 for r in recs)
    assert all(b.started >= a.started + a.wall_seconds for a, b in zip(recs, recs[1:]))
    assert all(r.kv_cells >= r.kv_read for r in recs) and recs[-1].kv_cells > 0  # the cache holds at least what decodes read
    assert any(r.kv_read > 0 for r in recs) and any(r.prefill_pairs > 0 for r in recs)
    assert recs[-1].source.startswith("llamacpp:qwen2.5-coder-0.5b")
    n = llama.engine.dump_iterations(tmp_path / "it.jsonl")
    assert load_records(tmp_path / "it.jsonl") == recs[:n]


async def test_close_is_idempotent_and_refuses_new_work():
    from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    from certa.runtime.errors import BackendError
    b = LlamaCppBackend(_small_model_path(), n_ctx=256, n_seq=1, n_threads=1)
    await b.close()
    await b.close()
    with pytest.raises(BackendError, match="closed"):
        await b.generate(GenRequest(prompt=COUNT, max_tokens=2, rid=rid()))
    assert b.live_rids() == set()


async def test_closing_a_sequence_ends_its_pending_extend(llama):
    seq = await llama.open_sequence(GenRequest(prompt=COUNT, max_tokens=300, rid=rid()))
    task = asyncio.ensure_future(seq.extend(300))
    for _ in range(500):
        await asyncio.sleep(0.02)
        if seq._job.out:
            break
    await seq.close()
    out = await asyncio.wait_for(task, 10)
    assert out.finish_reason == "abort" and seq.finished
    assert seq.rid not in llama.live_rids()


async def test_prefix_cache_is_capped(tiny):
    limit = tiny.engine.kv.cache_limit
    assert limit == tiny.engine.n_ctx // 4
    for i in range(3):
        await tiny.generate(GenRequest(prompt=f"{i} " + "word " * 150, max_tokens=1, rid=rid()))
    await settle(tiny)
    assert sum(len(s.kv) for s in tiny.engine.kv.free()) <= limit
    assert tiny.stats()["evictions"] >= 1


def test_amx_cpus_load_without_extra_weight_buffers(tmp_path):
    """llama.cpp's AMX repack crashes the first decode on Sapphire Rapids: off there by default."""
    from certa.runtime.backends.llamacpp.model import LlamaModel, cpu_has_amx

    amx, plain = tmp_path / "amx", tmp_path / "plain"
    amx.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n")
    plain.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\nbugs\t\t: amx_int8\n")
    assert cpu_has_amx(amx) and not cpu_has_amx(plain) and not cpu_has_amx(tmp_path / "missing")
    m = LlamaModel(_small_model_path(), extra_buffers=False)
    assert m.extra_buffers is False
    assert LlamaModel(_small_model_path()).extra_buffers is (not cpu_has_amx())


def test_llama_cpp_logs_only_errors_unless_verbose(capfd):
    """issue 40: llama.cpp's load warnings ("control-looking token ...") no longer reach a
    user's terminal; ``verbose=True`` (``certa run --verbose``) shows the whole log."""
    from certa.runtime.backends.llamacpp.model import LlamaModel, set_llama_logs
    set_llama_logs(False)
    LlamaModel(_small_model_path()).close()
    quiet = capfd.readouterr().err
    set_llama_logs(True)
    try:
        LlamaModel(_small_model_path()).close()
    finally:
        set_llama_logs(False)
    loud = capfd.readouterr().err
    assert quiet == "" and "llama_model_loader" in loud


async def test_the_installed_model_loads_in_place_with_no_copy_on_disk(tmp_path, monkeypatch):
    """issue 40: the engine reads the installed part packages in memory; the cache gets only a marker."""
    from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    if models.part_paths(SMALL) is None:
        pytest.skip(f"the 0.5B packages are not installed ({SMALL.pip_hint})")
    monkeypatch.setenv("CERTA_CACHE", str(tmp_path))
    b = LlamaCppBackend("qwen2.5-coder-0.5b", n_ctx=256, n_seq=1, n_threads=THREADS)
    try:
        assert b.model_source == "memory" and b.model_path.name == SMALL.filename
        out = await b.generate(GenRequest(prompt=COUNT, max_tokens=4, rid=rid(), temperature=0.0))
        assert out.tokens == 4 and "four" in out.text.lower()
    finally:
        await b.close()
    assert [p.name for p in tmp_path.iterdir()] == [f"{SMALL.filename}.parts.verified"]

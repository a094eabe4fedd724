"""The shared backend conformance suite. Every backend's test module subclasses it.

Usage in a backend test module::

    class TestMyBackend(BackendConformance):
        @pytest.fixture
        async def backend(self):
            b = MyBackend(...); yield b; await b.close()

Prompts are generic; assertions are about protocol behaviour (rids, limits, stops, aborts,
cancellation, token counts, sequences, probes), not about what the model says.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from certa.runtime.types import GenRequest, ScoreRequest

PROMPT = "Count from one to fifty, separated by commas: one, two, three,"
_ids = itertools.count()


def req(**kw) -> GenRequest:
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("max_tokens", 8)
    kw.setdefault("rid", f"conf-{next(_ids)}")
    kw.setdefault("program_id", "conformance")
    return GenRequest(**kw)


class BackendConformance:
    """Protocol behaviour every backend must show. ``long_tokens``: a request that takes a while;
    ``backend_name``: the registered name of the backend under test (every registered backend
    has a suite: tests/test_backend_registry.py)."""

    backend_name: str

    long_tokens = 400

    async def abort_and_check(self, backend, r: GenRequest, task: asyncio.Future) -> None:
        """Abort the live request ``r`` (its ``task``): the abort succeeds, the request ends
        aborted (or short of its budget, or cancelled) and its rid is freed."""
        assert await backend.abort(r.rid) is True
        try:
            out = await asyncio.wait_for(task, 30)
            assert out.finish_reason == "abort" or out.tokens < self.long_tokens
        except asyncio.CancelledError:
            pass
        assert r.rid not in backend.live_rids()

    async def test_generate_basic(self, backend):
        r = req(max_tokens=8)
        out = await backend.generate(r)
        assert isinstance(out.text, str)
        assert 0 < out.tokens <= 8
        assert out.finish_reason in ("stop", "length")
        assert out.prompt_tokens > 0
        assert backend.live_rids() == set()

    async def test_max_tokens_respected(self, backend):
        out = await backend.generate(req(max_tokens=3))
        assert out.tokens <= 3
        if out.tokens == 3:
            assert out.finish_reason == "length"

    async def test_greedy_is_deterministic(self, backend):
        a = await backend.generate(req(max_tokens=12, temperature=0.0))
        b = await backend.generate(req(max_tokens=12, temperature=0.0))
        assert a.text == b.text and a.tokens == b.tokens

    async def test_stop_string_not_in_output(self, backend):
        full = await backend.generate(req(max_tokens=16))
        pieces = [w for w in full.text.split() if w]
        if len(pieces) < 3:
            pytest.skip("output too short to pick a stop string")
        stop = pieces[2]
        out = await backend.generate(req(max_tokens=16, stop=(stop,)))
        assert stop not in out.text
        assert out.tokens <= full.tokens

    async def test_concurrent_requests_complete(self, backend):
        outs = await asyncio.gather(*(backend.generate(req(max_tokens=6, seed=i, temperature=0.7)) for i in range(4)))
        assert all(o.tokens > 0 for o in outs)
        assert len({o.rid for o in outs if o.rid}) in (0, 4)
        assert backend.live_rids() == set()

    async def test_abort_frees_rid(self, backend):
        r = req(max_tokens=self.long_tokens)
        task = asyncio.ensure_future(backend.generate(r))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if r.rid in backend.live_rids():
                break
        assert r.rid in backend.live_rids(), "request never became live"
        await self.abort_and_check(backend, r, task)

    async def test_generate_stream_matches_generate(self, backend):
        pieces: list[str] = []
        out = await backend.generate_stream(req(max_tokens=12, temperature=0.0), pieces.append)
        plain = await backend.generate(req(max_tokens=12, temperature=0.0))
        assert "".join(pieces) == out.text == plain.text, "the streamed pieces join to the result's text"
        assert out.tokens == plain.tokens and out.finish_reason == plain.finish_reason
        if backend.capabilities.streaming and out.tokens > 2:
            assert len(pieces) > 1, "a streaming backend delivers text before the request ends"
        assert backend.live_rids() == set()

    async def test_generate_stream_never_streams_a_stop_string(self, backend):
        full = await backend.generate(req(max_tokens=16))
        pieces_of_full = [w for w in full.text.split() if w]
        if len(pieces_of_full) < 3:
            pytest.skip("output too short to pick a stop string")
        stop = " " + pieces_of_full[2]
        pieces: list[str] = []
        out = await backend.generate_stream(req(max_tokens=16, stop=(stop,)), pieces.append)
        assert stop not in "".join(pieces) and "".join(pieces) == out.text

    async def test_abort_mid_stream_frees_rid(self, backend):
        if not backend.capabilities.streaming:
            pytest.skip("a backend that cannot stream delivers its text when the request is over")
        r = req(max_tokens=self.long_tokens)
        first = asyncio.Event()
        pieces: list[str] = []

        def on_text(piece: str) -> None:
            pieces.append(piece)
            first.set()

        task = asyncio.ensure_future(backend.generate_stream(r, on_text))
        await asyncio.wait_for(first.wait(), 60)
        await self.abort_and_check(backend, r, task)
        n = len(pieces)
        await asyncio.sleep(0.05)
        assert len(pieces) == n, "no text after the abort"

    async def test_abort_unknown_rid_is_ignored(self, backend):
        assert await backend.abort("no-such-rid") is False

    async def test_cancel_awaiting_task_then_abort(self, backend):
        r = req(max_tokens=self.long_tokens)
        task = asyncio.ensure_future(backend.generate(r))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await backend.abort(r.rid)
        await asyncio.sleep(0.05)
        assert r.rid not in backend.live_rids()

    async def test_sequence_extend_and_probe(self, backend):
        seq = await backend.open_sequence(req(max_tokens=24, temperature=0.0))
        try:
            a = await seq.extend(6)
            assert 0 < a.tokens <= 6 and seq.tokens == a.tokens
            text_before = seq.text
            p = await seq.probe(" So the answer is", max_tokens=4)
            assert p.tokens <= 4
            assert seq.text == text_before, "a probe must not change the sequence"
            b = await seq.extend(6)
            assert seq.tokens == a.tokens + b.tokens
        finally:
            await seq.close()
        assert backend.live_rids() == set()

    async def test_probe_does_not_change_continuation(self, backend):
        if not backend.capabilities.rollback_probe:
            pytest.skip("backend has no exact rollback probes")
        ref = await backend.open_sequence(req(max_tokens=20, temperature=0.0, rid="conf-ref"))
        await ref.extend(20)
        await ref.close()
        seq = await backend.open_sequence(req(max_tokens=20, temperature=0.0, rid="conf-probed"))
        for _ in range(4):
            await seq.extend(5)
            await seq.probe(" The answer is", max_tokens=3)
        await seq.close()
        assert seq.text == ref.text

    async def test_score_returns_distribution(self, backend):
        s = await backend.score(ScoreRequest(prompt="Is 2+2=4? Answer Yes or No:", options=("Yes", "No"),
                                             rid=f"conf-{next(_ids)}"))
        assert set(s.probs) == {"Yes", "No"}
        assert all(0.0 <= v <= 1.0 for v in s.probs.values())
        assert abs(sum(s.probs.values()) - 1.0) < 1e-6

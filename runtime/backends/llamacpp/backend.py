"""LlamaCppBackend: certa's embedded CPU engine (llama.cpp continuous batching), the default backend.

One GGUF model, one llama.cpp context with ``n_seq`` sequence slots, one engine thread.
Each iteration certa's scheduling policy picks which sequences decode and which queued
requests prefill (``attach_scheduler``; the Runtime does this for you). Requests with the
same prompt share its KV instead of prefilling it again, sequences keep their KV live
between ``extend`` calls, and probes roll back exactly (the continuation is token-identical
to a run without the probe).

Example:
    >>> import asyncio
    >>> from certa.runtime.types import GenRequest
    >>> async def main():                                                  # doctest: +SKIP
    ...     async with LlamaCppBackend("qwen2.5-coder-0.5b", n_seq=8) as b:
    ...         out = await b.generate(GenRequest(prompt="What is 2+2?", chat=True, rid="r1", max_tokens=16))
    ...         seq = await b.open_sequence(GenRequest(prompt="Count: 1, 2,", rid="s1", max_tokens=64))
    ...         await seq.extend(8)
    ...         answer = await seq.probe(" So the last number is", max_tokens=4)
    ...         await seq.close()
    ...         return out.text, answer.text
    >>> asyncio.run(main())                                                # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import zlib
from collections.abc import Callable
from pathlib import Path

from certa.runtime.errors import BackendError, LimitExceededError
from certa.runtime.model_source import open_model
from certa.runtime.scheduling.scheduler import Scheduler
from certa.runtime.types import Capabilities, GenRequest, GenResult, ScoreRequest, ScoreResult
from certa.runtime.backends.base import Backend, BackendSequence
from certa.runtime.backends.llamacpp.engine import LlamaEngine
from certa.runtime.backends.llamacpp.jobs import Job, Probe, TextTail
from certa.runtime.backends.llamacpp.model import LlamaModel, set_llama_logs


class LlamaCppBackend(Backend):
    """The llama.cpp engine behind certa's Backend protocol.

    Args:
        model: a GGUF path, a known name (``"qwen2.5-coder-0.5b"``, ``"qwen2.5-coder-1.5b"``) or
            None for the default (see :mod:`certa.runtime.models`).
        n_ctx: KV cells shared by all sequences; n_seq: sequence slots (concurrent requests).
        n_threads: CPU threads (default: the cores less one, see
            :func:`~certa.runtime.backends.llamacpp.engine.default_threads`); seed: base seed for
            requests without one.
        max_batch_tokens: tokens evaluated per iteration (prefill chunk + decodes).
        cache_limit: KV tokens of finished requests kept for prefix reuse (default n_ctx/4).
        extra_buffers: llama.cpp's repacked weight layouts; None = on except on AMX CPUs, where
            they crash (:func:`~certa.runtime.backends.llamacpp.model.cpu_has_amx`).
        verbose: let llama.cpp log everything to stderr (default: its errors only).
    """

    def __init__(self, model: str | os.PathLike | None = None, *, n_ctx: int = 8192, n_seq: int = 16,
                 n_threads: int | None = None, seed: int = 0, max_batch_tokens: int = 512, n_gpu_layers: int = 0,
                 record_iterations: bool = True, cache_limit: int | None = None, extra_buffers: bool | None = None,
                 verbose: bool = False) -> None:
        set_llama_logs(verbose)
        with open_model(model) as source:  # an installed model is read in place: no copy on disk
            self.model_path = Path(source.name) if source.in_memory else source.path
            self.model_source = source.where
            self.model = LlamaModel(source.path, n_gpu_layers=n_gpu_layers, extra_buffers=extra_buffers,
                                    mmap=not source.in_memory, name=source.name)
        try:
            self.engine = LlamaEngine(self.model, n_ctx=n_ctx, n_seq=n_seq, n_threads=n_threads,
                                      max_batch_tokens=max_batch_tokens, record_iterations=record_iterations,
                                      cache_limit=cache_limit)
        except BaseException:
            self.model.close()
            raise
        self.seed = seed
        self.capabilities = Capabilities(rollback_probe=True, score=True, logprobs=True, priority=False,
                                         streaming=True, name="llamacpp")

    # ---- scheduler hook -------------------------------------------------------------
    def attach_scheduler(self, scheduler: Scheduler | None) -> None:
        """Order every iteration's batch with ``scheduler.policy`` (None: FCFS)."""
        self.engine.scheduler = scheduler

    # ---- helpers --------------------------------------------------------------------
    def encode(self, prompt: str, *, chat: bool = False, system: str | None = None, where: GenRequest | None = None,
               assistant_prefix: str = "") -> list[int]:
        """Prompt tokens (chat-templated when ``chat``), checked against the context size."""
        if self.engine.closed:
            raise BackendError("the llama.cpp backend is closed", program=(where.program_id or None) if where else None)
        tokens = self.model.encode_prompt(prompt, chat=chat, system=system, assistant_prefix=assistant_prefix)
        if not tokens:
            tokens = self.model.tokenize(" ")
        if len(tokens) >= self.engine.n_ctx:
            raise LimitExceededError(f"prompt of {len(tokens)} tokens does not fit n_ctx={self.engine.n_ctx}",
                                     program=(where.program_id or None) if where else None,
                                     step=(where.step or None) if where else None,
                                     branch=where.branch if where else None)
        return tokens

    def _job(self, req: GenRequest, kind: str, tokens: list[int]) -> Job:
        if not req.rid:
            raise BackendError("request has no rid", program=req.program_id or None, step=req.step or None)
        seed = req.seed if req.seed is not None else zlib.crc32(f"{self.seed}:{req.rid}".encode())
        ticket, owned = self.engine.ticket(req.rid, req.program_id, req.max_tokens, req.prefix_hint)
        return Job(rid=req.rid, kind=kind, prompt=tokens, loop=asyncio.get_running_loop(), ticket=ticket,  # type: ignore[arg-type]
                   owned=owned, program_id=req.program_id, max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p,
                   top_k=req.top_k, seed=seed, stop=tuple(req.stop), logprobs=req.logprobs > 0,
                   token_kind=req.kind)

    async def _await(self, job: Job, rid: str, fut: asyncio.Future):
        """Await ``fut``; a cancelled wait aborts ``rid``, unless a runtime owns the job (it aborts
        its requests itself, once: :meth:`ProgramRun.abort`)."""
        try:
            return await fut
        except asyncio.CancelledError:
            if not job.owned:
                self.engine.abort(rid)
            raise

    # ---- protocol -------------------------------------------------------------------
    async def generate(self, req: GenRequest) -> GenResult:
        return await self._generate(req, None)

    async def generate_stream(self, req: GenRequest, on_text: Callable[[str], None]) -> GenResult:
        """``generate``, handing new text to ``on_text`` as the engine decodes it (held back
        by a stop string's length less one until the request ends, so stops never leak)."""
        return await self._generate(req, on_text)

    async def _generate(self, req: GenRequest, on_text: Callable[[str], None] | None) -> GenResult:
        tokens = self.encode(req.prompt, chat=req.chat, system=req.system, where=req,
                             assistant_prefix=req.assistant_prefix)
        job = self._job(req, "gen", tokens)
        if on_text is not None:
            job.on_text, job.context = on_text, contextvars.copy_context()
        if req.max_tokens <= 0:
            return GenResult("", 0, prompt_tokens=len(tokens), finish_reason="length", rid=req.rid)
        job.budget, job.future = req.max_tokens, job.loop.create_future()
        self.engine.submit(job)
        return await self._await(job, req.rid, job.future)

    async def abort(self, rid: str) -> bool:
        return self.engine.abort(rid)

    def live_rids(self) -> set[str]:
        return self.engine.live_rids()

    async def score(self, req: ScoreRequest) -> ScoreResult:
        """P(option) from the next-token distribution: softmax mass of each option's first token
        (with and without a leading space), renormalised over the options."""
        greq = GenRequest(prompt=req.prompt, max_tokens=1, rid=req.rid, program_id=req.program_id, step=req.step,
                          branch=req.branch, priority=req.priority, kind="score", chat=req.chat)
        job = self._job(greq, "score", self.encode(req.prompt, chat=req.chat, where=greq))
        job.options = []
        for o in req.options:
            firsts = {toks[0] for toks in (self.model.tokenize(o), self.model.tokenize(" " + o)) if toks}
            job.options.append((o, sorted(firsts)))
        job.future = job.loop.create_future()
        self.engine.submit(job)
        return await self._await(job, req.rid, job.future)

    async def open_sequence(self, req: GenRequest) -> LlamaCppSequence:
        """A native sequence: KV stays live between ``extend`` calls; probes roll back exactly."""
        job = self._job(req, "seq", self.encode(req.prompt, chat=req.chat, system=req.system, where=req,
                             assistant_prefix=req.assistant_prefix))
        self.engine.submit(job)  # the prompt prefills while the caller gets ready
        return LlamaCppSequence(self, req, job)

    async def close(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Synchronous :meth:`close`: stop the engine thread and free the context and model."""
        self.engine.close()

    # ---- engine passthroughs --------------------------------------------------------
    def stats(self) -> dict:
        return self.engine.stats()


class LlamaCppSequence(BackendSequence):
    """A live llama.cpp sequence. Cancelling an ``extend`` aborts the sequence; cancelling a
    ``probe`` rolls the probe back and keeps the sequence."""

    def __init__(self, backend: LlamaCppBackend, req: GenRequest, job: Job) -> None:
        super().__init__(req)
        self.backend, self._job = backend, job
        self.prompt_tokens = len(job.prompt)
        self._lock = asyncio.Lock()
        self._probes = itertools.count()
        self._closed = False

    @property
    def token_ids(self) -> list[int]:
        """The token ids this sequence has decoded so far (probes rolled back are not among them)."""
        return list(self._job.out)

    async def extend(self, max_new_tokens: int) -> GenResult:
        n = min(max_new_tokens, self.req.max_tokens - self.tokens)
        if self.finished or self._closed or n <= 0:
            if not self.finished and not self._closed:
                self.finished, self.finish_reason = True, "length"
            return GenResult("", 0, finish_reason=self.finish_reason or "abort", rid=self.rid)  # type: ignore[arg-type]
        async with self._lock:
            fut = asyncio.get_running_loop().create_future()
            self.backend.engine.extend(self._job, n, fut)
            out = await self.backend._await(self._job, self.rid, fut)
        self.text += out.text
        self.tokens += out.tokens
        if self._job.finished or out.finish_reason == "abort":
            self.finished = True
            self.finish_reason = "abort" if out.finish_reason == "abort" else self._job.finish_reason
        return out

    async def probe(self, suffix: str, max_tokens: int = 20, *, rid: str = "", stop: tuple[str, ...] = (),
                    close_brace: bool = False, temperature: float = 0.0, top_p: float = 1.0,
                    seed: int | None = None) -> GenResult:
        """Append ``suffix``, decode (up to ``max_tokens``, EOS, or a ``stop`` string), then roll back.

        Extensions of the protocol: ``stop`` strings, ``close_brace=True`` to stop right after
        the first ``}`` that closes a brace the suffix opened (a probe ending in ``\\boxed{``:
        the answer is complete, nested braces included), and ``temperature``/``top_p``/``seed``
        to sample the probe (default greedy). The result's ``token_logprobs`` are the probe
        tokens' log-probabilities."""
        rid = rid or f"{self.rid}.probe{next(self._probes)}"
        if self._closed or self._job.aborted:
            return GenResult("", 0, finish_reason="abort", rid=rid)
        tokens = self.backend.model.tokenize(suffix)
        if max_tokens <= 0:
            return GenResult("", 0, prompt_tokens=len(tokens), finish_reason="length", rid=rid)
        async with self._lock:
            probe = Probe(rid, tokens, max_tokens, asyncio.get_running_loop().create_future(),
                          text=TextTail(stop, close_brace=close_brace), temperature=temperature, top_p=top_p,
                          seed=0 if seed is None else seed)
            self.backend.engine.probe(self._job, probe)
            return await self.backend._await(self._job, rid, probe.future)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if not self.backend.engine.closed:
                self.backend.engine.close_sequence(self._job)


__all__ = ["LlamaCppBackend", "LlamaCppSequence"]

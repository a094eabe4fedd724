"""One iteration of the llama.cpp engine: order, form the batch, decode, sample, settle.

:class:`Batcher` owns the jobs and runs on the engine thread only. ``step()`` asks the
scheduling policy to order every job with work (the attached certa scheduler's
``policy.order(tickets, now)``; FCFS without one) and walks that order filling one
``llama_batch`` up to ``max_batch_tokens``: a decoding job takes one token, a prefilling job
a chunk of its prompt, a queued job first needs a slot (sharing any prefix already in the
KV). After one ``llama_decode`` it samples each job whose last token produced logits with
that job's own sampler chain, and resolves futures with ``loop.call_soon_threadsafe``.

One :class:`~certa.runtime.sim.cost_model.IterationRecord` per iteration feeds the
simulator's cost model ``t = a + b·N + c·K + d·P``: ``n_tokens`` (N) tokens evaluated,
``kv_read`` (K) the context lengths of the decoded tokens, ``prefill_pairs`` (P) the
query·key pairs of prefill chunks (``n·(p + n/2)``), ``seconds`` the wall time of
``llama_decode``, ``wall_seconds`` the iteration's whole period (batch formation, decode and
sampling, from ``started`` on the ``perf_counter`` clock), ``kv_cells`` the cells the unified
KV cache held in the forward pass (a CPU token's attention spans them; not yet in the cost model);
``n_decode``/``n_prefill`` count requests.

Example:
    >>> IterationRecord(n_tokens=8, kv_read=800, prefill_pairs=0.0, seconds=0.1).kv_read
    800
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import llama_cpp as lc
import numpy as np

from certa.runtime.errors import BackendError
from certa.runtime.scheduling.scheduler import Scheduler, SchedulingPolicy
from certa.runtime.sim.cost_model import IterationRecord, prefill_pairs
from certa.runtime.types import GenResult, ScoreResult
from certa.runtime.backends.llamacpp.jobs import Job, deliver, stream_text
from certa.runtime.backends.llamacpp.kv import KVSlots
from certa.runtime.backends.llamacpp.model import LlamaModel
from certa.runtime.backends.llamacpp.sequences import SequenceOps


class Batcher(SequenceOps):
    """Jobs, batch formation, sampling and settlement (engine thread only); live sequences'
    extend and exact probe rollback come from :class:`SequenceOps`."""

    def __init__(self, model: LlamaModel, ctx, kv: KVSlots, *, n_ctx: int, capacity: int,
                 forget: Callable[[tuple[str, ...]], None], record: bool = True, source: str = "") -> None:
        self.model, self.ctx, self.kv, self.n_ctx = model, ctx, kv, n_ctx
        self.batch = lc.llama_batch_init(capacity, 0, 1)
        self.max_batch_tokens = capacity
        self.forget = forget  # drop rids from the engine's live set (takes the engine lock)
        self.scheduler: Scheduler | None = None
        self.fcfs = SchedulingPolicy()
        self.jobs: list[Job] = []
        self.record, self.source = record, source
        self.iterations: list[IterationRecord] = []
        self.counters: dict[str, float] = {k: 0 for k in ("iterations", "prompt_tokens", "cached_prompt_tokens",
                                                          "decode_tokens", "probe_tokens", "main", "probe", "score")}
        self.counters["decode_seconds"] = 0.0

    def free(self) -> None:
        lc.llama_batch_free(self.batch)

    # ---- one iteration --------------------------------------------------------------
    def step(self, now: float) -> bool:
        """Run one iteration; False when there was nothing to do."""
        t_start = time.perf_counter()
        plan = self.plan(now)
        if not plan:
            return False
        t0 = time.perf_counter()
        idx = self.fill(plan)
        rc = lc.llama_decode(self.ctx, self.batch)
        while rc == 1:  # no room in the KV cache: drop caches, then idle sequences, then requests
            busy = {j.slot.id for j, _ in plan if j.slot is not None}
            if self.kv.evict_one(busy) or self.kv.preempt_idle(self.jobs, busy) is not None:
                pass
            elif len(plan) > 1:
                job, _ = plan.pop()
                self.fail(job, BackendError("KV cache is full", retryable=True, program=job.program_id or None))
                idx = self.fill(plan)
            else:
                break
            rc = lc.llama_decode(self.ctx, self.batch)
        seconds = time.perf_counter() - t0
        if rc != 0:
            for job, _ in plan:
                self.fail(job, BackendError(f"llama_decode failed with code {rc}", program=job.program_id or None))
            return True
        record = self.commit(plan, seconds)
        cells = self.kv.live_tokens() if self.record else 0  # what this forward pass's cache held
        for (job, _), i in zip(plan, idx):
            if i >= 0 and not job.aborted:
                self.after(job, i)
        if self.record:  # the iteration's whole period: batch formation + decode + sampling
            self.iterations.append(replace(record, wall_seconds=time.perf_counter() - t_start, started=t_start,
                                           kv_cells=cells))
        return True

    def plan(self, now: float) -> list[tuple[Job, int]]:
        """Walk the policy's order; returns (job, n tokens) pairs within the token budget."""
        kv, sched = self.kv, self.scheduler
        kv.clock += 1
        cands = [j for j in self.jobs if j.evaluable() > 0]
        if not cands:
            return []
        for j in cands:
            j.ticket.cached = kv.cached_prefix(j) if j.slot is None else j.cached  # for LPM-style policies
        policy = sched.policy if sched is not None else self.fcfs
        by_ticket = {id(j.ticket): j for j in cands}
        budget, plan = self.max_batch_tokens, []
        for t in policy.order([j.ticket for j in cands], now):
            job = by_ticket.get(id(t))
            if job is None or budget <= 0:
                continue
            fresh = job.slot is None
            if fresh:
                busy = {j.slot.id for j, _ in plan if j.slot is not None}
                slot = kv.pick(job) or (kv.preempt_idle(self.jobs, busy) if job.needs_logits else None)
                if slot is None:
                    continue
                slot.owner, job.slot = job, slot
                if job.sampler is None and job.kind != "score":
                    job.sampler = self.model.sampler(job.temperature, job.top_p, job.top_k, job.seed)
            if fresh or job.waiting is not None:  # share a prefix, unless a leader is still computing it
                job.waiting = kv.leader(job, self.jobs)
                if job.waiting is not None:
                    continue
                self.counters["cached_prompt_tokens"] += kv.attach(job)
            room = self.n_ctx - len(job.slot.kv)  # type: ignore[union-attr]
            n = min(job.evaluable(), budget, room)
            if room <= 0:
                self.out_of_context(job)
            elif n > 0:
                plan.append((job, n))
                budget -= n
        return plan

    def fill(self, plan: list[tuple[Job, int]]) -> list[int]:
        """Write ``plan`` into the llama_batch; returns each entry's logits index (-1: none)."""
        b, i, idx = self.batch, 0, []
        for job, n in plan:
            slot = job.slot
            assert slot is not None
            p0 = len(slot.kv)
            for k in range(n):
                b.token[i] = job.pending[k]
                b.pos[i] = p0 + k
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = slot.id
                b.logits[i] = 0
                i += 1
            last = n == len(job.pending) and job.needs_logits
            if last:
                b.logits[i - 1] = 1
            idx.append(i - 1 if last else -1)
        b.n_tokens = i
        return idx

    def commit(self, plan: list[tuple[Job, int]], seconds: float) -> IterationRecord:
        """Move evaluated tokens from ``pending`` into the slots' KV lists; count; the record."""
        c, n_tok, kv_read, pairs, n_dec = self.counters, 0, 0, 0.0, 0
        for job, n in plan:
            slot = job.slot
            assert slot is not None
            p0 = len(slot.kv)
            slot.kv.extend(job.pending[:n])
            del job.pending[:n]
            slot.used = self.kv.clock
            prompt = min(n, job.prompt_left)
            job.prompt_left -= prompt
            c["prompt_tokens"] += prompt
            c["probe_tokens" if job.probe is not None else "decode_tokens"] += n - prompt
            n_tok += n
            if n == 1 and prompt == 0:
                kv_read += p0 + 1
                n_dec += 1
            else:
                pairs += prefill_pairs(n, p0)
        c["iterations"] += 1
        c["decode_seconds"] += seconds
        return IterationRecord(n_tok, kv_read, pairs, seconds, n_dec, len(plan) - n_dec, self.source)

    # ---- per-job outcomes -----------------------------------------------------------
    def logits(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, i), shape=(self.model.n_vocab,))

    @staticmethod
    def log_norm(logits: np.ndarray) -> float:
        m = float(logits.max())
        return m + float(np.log(np.exp(logits - m, dtype=np.float64).sum()))

    def after(self, job: Job, i: int) -> None:
        """Sample (or score) the job whose logits sit at batch index ``i``."""
        model, probe = self.model, job.probe
        if probe is not None:
            tok = lc.llama_sampler_sample(probe.sampler, self.ctx, i)
            logits = self.logits(i)
            probe.logps.append(float(logits[tok]) - self.log_norm(logits))
            probe.out.append(tok)
            self.counters["probe"] += 1
            eog = model.is_eog(tok)
            stopped = not eog and probe.text.push(model.piece(tok))
            if eog or stopped or len(probe.out) >= probe.max_tokens:
                self.end_probe(job)
            else:
                job.pending = [tok]
            return
        if job.kind == "score":
            self.score(job, i)
            return
        tok = lc.llama_sampler_sample(job.sampler, self.ctx, i)
        if job.logprobs:
            logits = self.logits(i)
            job.logps.append(float(logits[tok]) - self.log_norm(logits))
        job.out.append(tok)
        job.budget -= 1
        self.counters[job.token_kind] = self.counters.get(job.token_kind, 0) + 1
        if model.is_eog(tok):
            job.pending = []
            self.finish(job, "stop")
            return
        job.pending = [tok]
        if job.text.push(model.piece(tok)):
            self.finish(job, "stop")
            return
        stream_text(job)
        if len(job.out) >= job.max_tokens:
            self.finish(job, "length")
        elif job.budget <= 0:  # a sequence's extend chunk is complete
            deliver(job.loop, job.future, job.result("length"))
            job.mark_reported()
            job.future = None

    def finish(self, job: Job, reason: str) -> None:
        job.finished, job.finish_reason, job.budget = True, reason, 0
        job.text.flush()
        stream_text(job, final=True)
        result = job.result(reason)
        job.mark_reported()
        if job.kind == "seq":  # stays open (and probe-able) until closed
            deliver(job.loop, job.future, result)
            job.future = None
        else:
            self.complete(job, result)

    def complete(self, job: Job, result: GenResult | ScoreResult) -> None:
        self.forget((job.rid,))
        deliver(job.loop, job.future, result)
        job.future = None
        self.drop(job, keep_cache=True)

    def score(self, job: Job, i: int) -> None:
        logits = self.logits(i)
        norm = self.log_norm(logits)
        probs = {o: float(sum(np.exp(float(logits[t]) - norm) for t in set(toks))) for o, toks in job.options or []}
        total = sum(probs.values())
        probs = {o: (p / total if total > 0 else 1.0 / len(probs)) for o, p in probs.items()}
        self.counters["score"] += 1
        self.complete(job, ScoreResult(probs=probs, prompt_tokens=len(job.prompt), tokens=1, rid=job.rid))

    def out_of_context(self, job: Job) -> None:
        if job.probe is not None:
            self.end_probe(job)
        elif job.kind == "score":
            self.fail(job, BackendError(f"prompt does not fit n_ctx={self.n_ctx}", program=job.program_id or None))
        else:
            self.finish(job, "length")

    def fail(self, job: Job, exc: BaseException) -> None:
        probe = job.probe
        self.forget((job.rid,) + ((probe.rid,) if probe is not None else ()))
        if probe is not None:
            deliver(job.loop, probe.future, exc=exc)
        job.aborted = True
        deliver(job.loop, job.future, exc=exc)
        job.future = None
        self.drop(job, keep_cache=False)

    def drop(self, job: Job, *, keep_cache: bool) -> None:
        """Remove ``job`` and free its slot (KV kept as a prefix cache when ``keep_cache``).
        Whoever still awaits it (an extend or probe cut short by ``close``) gets an abort result."""
        if job.probe is not None:
            self.end_probe(job, deliver_result=False)
        if job.future is not None:
            deliver(job.loop, job.future, job.result("abort"))
            job.future = None
        if job in self.jobs:
            self.jobs.remove(job)
        self.kv.release(job, keep_cache=keep_cache)
        self.model.free_sampler(job.sampler)
        job.sampler = None

    def fail_all(self, exc_factory: Callable[[Job], BaseException]) -> None:
        for job in list(self.jobs):
            self.fail(job, exc_factory(job))


__all__ = ["Batcher"]

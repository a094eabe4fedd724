"""The llama.cpp continuous-batching engine: one model, one context, N sequence slots, one thread.

The engine thread loops: apply the commands posted from event loops (submit, extend,
probe, abort, close), then run one :class:`~.llamacpp_batch.Batcher` iteration (policy
order → one ``llama_batch`` → ``llama_decode`` → per-job sampling). Awaiting asyncio futures
are resolved with ``loop.call_soon_threadsafe``, so any event loop (and several in turn,
as in tests) can use one engine. The context is created with ``n_seq_max=n_seq`` and
``kv_unified=True``: all slots share ``n_ctx`` KV cells, and prompt prefixes are shared
between slots without copying tensors.

Numerics: llama.cpp computes a decode row the same way whatever else is in a small batch,
but large batches (prompt chunks) take other matmul kernels. A request that reuses a cached
prefix evaluates only its last prompt token, so its first logits can differ in the low bits
from a cold prefill of the same prompt (sampling may then diverge). Probes are exact: the
continuation after a probe is token-identical to the same sequence without it.

Example:
    >>> from certa.runtime.backends.llamacpp.backend import LlamaCppBackend   # doctest: +SKIP
    >>> b = LlamaCppBackend("qwen2.5-coder-0.5b", n_seq=8)             # doctest: +SKIP
    >>> b.engine.stats()["iterations"]                                   # doctest: +SKIP
    0
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator

import llama_cpp as lc

from certa.runtime.errors import BackendError, ConfigError
from certa.runtime.scheduling.scheduler import ProgramInfo, Scheduler, Ticket
from certa.runtime.sim.cost_model import IterationRecord, save_records
from certa.runtime.types import GenResult
from certa.runtime.backends.llamacpp.batch import Batcher
from certa.runtime.backends.llamacpp.jobs import Job, Probe, deliver
from certa.runtime.backends.llamacpp.kv import KVSlots
from certa.runtime.backends.llamacpp.model import LlamaModel

log = logging.getLogger("certa.llamacpp")
_ENGINES: weakref.WeakSet[LlamaEngine] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # stop engine threads before ctypes and the model go away
    for engine in list(_ENGINES):
        engine.close()


def default_threads() -> int:
    """llama.cpp threads when none are asked for: the cores this process may use, less one (at least 1).

    All cores are fastest on an idle machine, but llama.cpp's threads meet at spin barriers
    each layer, so when anything else runs a decode step can stall for seconds (below); one
    core left free keeps the machine usable and the engine steady. Pass ``n_threads`` (``certa
    run --threads``) to use them all.

    >>> default_threads() >= 1
    True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


class LlamaEngine:
    """Continuous batching over one llama.cpp context. Public methods are thread-safe.

    Args:
        model: a loaded :class:`LlamaModel` (freed by :meth:`close` when ``owns_model``).
        n_ctx: KV cells shared by all slots; n_seq: sequence slots (concurrent jobs).
        n_threads: CPU threads (default :func:`default_threads`: one core left free);
            max_batch_tokens: tokens per iteration.
        record_iterations: keep per-iteration records for the simulator's cost model.
        cache_limit: tokens of finished requests' KV kept for prefix reuse (default n_ctx/4).

    Threads: llama.cpp's worker threads meet at spin barriers each layer; on a machine whose
    cores are shared with other busy processes, ``n_threads`` = all cores can stall for
    seconds per step (measured: 2 threads on 2 shared cores, 40 ms–2.8 s per decode step;
    1 thread, a steady 30 ms). Use fewer threads than cores there.
    """

    def __init__(self, model: LlamaModel, *, n_ctx: int = 8192, n_seq: int = 16, n_threads: int | None = None,
                 max_batch_tokens: int = 512, record_iterations: bool = True, owns_model: bool = True,
                 cache_limit: int | None = None) -> None:
        if n_seq < 1 or n_ctx < 16 or max_batch_tokens < 1:
            raise ConfigError(f"bad engine sizes n_seq={n_seq} n_ctx={n_ctx} max_batch_tokens={max_batch_tokens}")
        self.model, self._owns_model = model, owns_model
        threads = n_threads or default_threads()
        cp = lc.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, max_batch_tokens, max_batch_tokens
        cp.n_seq_max, cp.kv_unified, cp.no_perf = n_seq, True, True
        cp.n_threads, cp.n_threads_batch = threads, threads
        self.ctx = lc.llama_init_from_model(model.ptr, cp)
        if not self.ctx:
            raise ConfigError(f"llama.cpp could not create a context (n_ctx={n_ctx}, n_seq={n_seq})")
        self.n_ctx, self.n_seq = int(lc.llama_n_ctx(self.ctx)), n_seq
        self.kv = KVSlots(lc.llama_get_memory(self.ctx), n_seq,
                          cache_limit=self.n_ctx // 4 if cache_limit is None else cache_limit)
        self.batcher = Batcher(model, self.ctx, self.kv, n_ctx=self.n_ctx, capacity=max_batch_tokens,
                               forget=self._forget, record=record_iterations,
                               source=f"llamacpp:{model.path.stem}:{threads}t")
        self._seq = itertools.count()
        self._live: dict[str, Job] = {}
        self._probes: dict[str, Probe] = {}  # probe rids → probes, while live
        self._cv = threading.Condition()
        self._cmds: deque[Callable[[], None]] = deque()
        self._stop = self._closed = self._paused = False
        self._thread = threading.Thread(target=self._run, name="certa-llamacpp", daemon=True)
        self._thread.start()
        _ENGINES.add(self)

    # ---- configuration --------------------------------------------------------------
    @property
    def scheduler(self) -> Scheduler | None:
        return self.batcher.scheduler

    @scheduler.setter
    def scheduler(self, scheduler: Scheduler | None) -> None:
        self.batcher.scheduler = scheduler

    @property
    def max_batch_tokens(self) -> int:
        return self.batcher.max_batch_tokens

    @max_batch_tokens.setter
    def max_batch_tokens(self, n: int) -> None:
        self.batcher.max_batch_tokens = max(1, min(int(n), self.batch_capacity))

    @property
    def batch_capacity(self) -> int:
        return int(lc.llama_n_batch(self.ctx)) if self.ctx else 0

    def clock(self) -> float:
        sched = self.scheduler
        return sched.clock() if sched is not None else time.monotonic()

    # ---- public API (any thread) ----------------------------------------------------
    def ticket(self, rid: str, program_id: str, est_tokens: int, prefix_hint: str | None) -> tuple[Ticket, bool]:
        """The scheduling ticket that orders a new job in the batch, and whether a runtime owns it.

        A request the attached scheduler admitted (the Runtime's path) keeps ITS ticket: one
        ticket per request. Otherwise (sequences, probes' parent jobs, standalone use) the
        engine makes one, for the registered program when there is one. A job is runtime-owned
        when its program is registered with the scheduler: the runtime then aborts it itself.
        """
        sched, now = self.scheduler, self.clock()
        if sched is not None:
            t = sched.lookup(rid)
            info = sched.programs.get(program_id)
            if t is None and info is not None:
                t = sched.ticket(rid, info, est_tokens, prefix_hint)
            if t is not None:
                sched.policy.stamp(t)  # the batch orders it from here: the policy notes the program's state
                return t, True
        return Ticket(rid, ProgramInfo(program_id or rid, arrival=now), enqueued=now, est_tokens=est_tokens,
                      prefix_hint=prefix_hint, seq=next(self._seq)), False

    def submit(self, job: Job) -> None:
        """Queue ``job``; its ``future`` is resolved with the result."""
        self._register(job.rid, job)
        self._post(lambda: self.batcher.jobs.append(job))

    def extend(self, job: Job, n: int, future) -> None:
        """Let sequence ``job`` sample ``n`` more tokens; ``future`` gets the chunk."""
        self._post(lambda: self.batcher.start_extend(job, n, future))

    def probe(self, job: Job, probe: Probe) -> None:
        """Run ``probe`` on sequence ``job`` (then roll it back); ``probe.future`` gets the answer."""
        self._register(probe.rid, job)
        with self._cv:
            self._probes[probe.rid] = probe
        self._post(lambda: self.batcher.start_probe(job, probe))

    def abort(self, rid: str) -> bool:
        """Stop ``rid`` now: its future resolves with finish_reason "abort"; its slot is freed
        before the next iteration. Aborting a probe's rid rolls the probe back only."""
        with self._cv:
            job = self._live.pop(rid, None)
            if job is None:
                return False
            probe = self._probes.pop(rid, None) if rid != job.rid else job.probe
            if probe is not None:
                self._live.pop(probe.rid, None)
                self._probes.pop(probe.rid, None)
        if probe is not None:
            probe.aborted = True
            deliver(job.loop, probe.future, GenResult("", len(probe.out), finish_reason="abort", rid=probe.rid))
        if rid != job.rid:  # only the probe: the sequence lives on, rolled back
            self._post(lambda: self.batcher.cancel_probe(job, probe))
            return True
        job.aborted = True
        deliver(job.loop, job.future, job.result("abort"))
        self._post(lambda: self.batcher.drop(job, keep_cache=False))
        return True

    def close_sequence(self, job: Job) -> None:
        """Release a sequence; its KV stays cached for prefix reuse until the slot is needed."""
        self._forget((job.rid,) + ((job.probe.rid,) if job.probe is not None else ()))
        job.aborted = True
        self._post(lambda: self.batcher.drop(job, keep_cache=True))

    def barrier(self, timeout: float | None = None) -> bool:
        """Block until the engine thread has finished its current iteration and applied every
        command posted before this call (engine state is then safe to inspect); False on timeout."""
        if self._closed:
            return True
        done = threading.Event()
        self._post(done.set)
        return done.wait(timeout)

    def clear_cache(self) -> None:
        """Drop the prefix-cache KV of every free slot (e.g. between benchmark runs)."""
        self._post(lambda: [self.kv.truncate(s, 0) for s in self.kv.free()])

    def live_rids(self) -> set[str]:
        with self._cv:
            return set(self._live)

    def pause(self) -> None:
        """Stop forming batches (commands still apply) until :meth:`resume`."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._post(lambda: None)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Submit several requests so that the policy orders them all from the first iteration."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    # ---- stats ----------------------------------------------------------------------
    @property
    def iterations(self) -> list[IterationRecord]:
        """Per-iteration records (n_tokens, kv_read, prefill_pairs, seconds, n_decode, n_prefill)."""
        return self.batcher.iterations

    def stats(self) -> dict:
        """Counters: iterations, prompt_tokens (evaluated), cached_prompt_tokens, decode/probe tokens,
        sampled tokens by kind (main/probe/score), decode_seconds, evictions, preemptions."""
        return dict(self.batcher.counters, evictions=self.kv.evictions, preemptions=self.kv.preemptions,
                    live_jobs=len(self.batcher.jobs), kv_tokens=self.kv.live_tokens())

    def reset_stats(self) -> None:
        c = self.batcher.counters
        for k in c:
            c[k] = 0
        self.batcher.iterations = []

    def dump_iterations(self, path: str | os.PathLike) -> int:
        """Write the per-iteration records as JSONL (``certa.runtime.sim.cost_model.load_records``
        reads them back); returns how many were written."""
        recs = list(self.batcher.iterations)
        save_records(recs, path)
        return len(recs)

    # ---- lifecycle ------------------------------------------------------------------
    def close(self) -> None:
        """Stop the thread, fail what is pending, free the context (and model). Idempotent."""
        with self._cv:
            if self._closed:
                return
            self._closed = self._stop = True
            self._cv.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=120)
        if self._thread.is_alive():  # pragma: no cover - a decode that never returns
            log.warning("llama.cpp engine thread did not stop; leaking its context")
            return
        self.batcher.free()
        lc.llama_free(self.ctx)
        self.ctx = None
        if self._owns_model:
            self.model.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- plumbing -------------------------------------------------------------------
    def _register(self, rid: str, job: Job) -> None:
        with self._cv:
            if self._closed:
                raise BackendError("the llama.cpp engine is closed", program=job.program_id or None)
            if rid in self._live:
                raise BackendError(f"rid {rid!r} is already live", program=job.program_id or None)
            self._live[rid] = job

    def _forget(self, rids: tuple[str, ...]) -> None:
        with self._cv:
            for rid in rids:
                self._live.pop(rid, None)
                self._probes.pop(rid, None)

    def _post(self, cmd: Callable[[], None]) -> None:
        with self._cv:
            self._cmds.append(cmd)
            self._cv.notify()

    def _run(self) -> None:
        busy = False
        try:
            while True:
                with self._cv:
                    while not self._stop and not self._cmds and (self._paused or not busy):
                        self._cv.wait()
                    if self._stop:
                        return
                    cmds, self._cmds = self._cmds, deque()
                for cmd in cmds:
                    try:
                        cmd()
                    except Exception:
                        log.exception("llama.cpp engine command failed")
                try:
                    busy = False if self._paused else self.batcher.step(self.clock())
                except Exception as exc:  # e.g. a policy bug: fail the work, keep serving
                    log.exception("llama.cpp engine iteration failed")
                    why = f"engine iteration failed: {type(exc).__name__}: {exc}"
                    self.batcher.fail_all(lambda j, why=why: BackendError(why, program=j.program_id or None))
                    busy = False
        finally:
            def closed(j: Job) -> BackendError:
                return BackendError("the llama.cpp engine was closed", program=j.program_id or None)

            self.batcher.fail_all(closed)
            with self._cv:  # submitted but never picked up
                stranded, self._live = list(self._live.values()), {}
                probes, self._probes = list(self._probes.values()), {}
            for job in stranded:
                deliver(job.loop, job.future, exc=closed(job))
            for probe in probes:
                deliver(probe.future.get_loop(), probe.future, exc=BackendError("the llama.cpp engine was closed"))


__all__ = ["LlamaEngine", "default_threads"]

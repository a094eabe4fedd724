"""A simulated serving engine (SGLang-like continuous batching) driven by the cost model.

This is a SIMULATOR: no model runs. Each iteration is either a prefill iteration (chunked,
up to ``chunk_tokens`` new tokens; requests whose prefill completes emit their first token)
or a decode iteration (every running request emits one token); with ``mixed=True`` both
share an iteration. Its time is :meth:`CostModel.iteration_time`. KV is a hard pool of
``kv_capacity`` tokens: per-program prefixes (shared by all of a program's requests, kept
while idle and evicted least-recently-used first when room is needed) plus each request's
own tokens. With ``cache_tokens`` set, finished requests' KV also stays idle in their slots
(:class:`~certa.runtime.sim.slot_cache.SlotCache`, as the CPU llama.cpp engine keeps it): it
adds to ``W``, the cells a unified-KV engine's attention spans (``CostModel.e``), not to the
pool. Admission needs room for the uncached prompt plus SGLang-style decode headroom
(:meth:`EngineConfig.reserve`) for every running request; when decoding runs out of KV, the least urgent running
requests (last in the policy's order) are retracted and later recomputed.

The waiting queue and preemption victims are ordered by the SAME ``SchedulingPolicy``
object the runtime uses (engine-level priority), through each request's ``Ticket``.
Consecutive decode iterations with nothing to decide are advanced in closed form.

Example:
    >>> from certa.runtime.sim.cost_model import CostModel
    >>> eng = SimEngine(EngineConfig(kv_capacity=10_000), CostModel(a=0.01, b=0.0, c=0.0, d=0.0))
    >>> eng.add(SimRequest("r1", "p1", prompt=100, output=3))
    >>> now, done = 0.0, []
    >>> while not done:
    ...     now, done = eng.step(now)
    >>> round(now, 3), done[0].generated     # 1 prefill iteration (first token) + 2 decodes
    (0.03, 3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from certa.runtime.errors import ConfigError
from certa.runtime.scheduling.scheduler import ProgramInfo, SchedulingPolicy, Ticket
from certa.runtime.sim.cost_model import CostModel, IterationRecord, prefill_pairs
from certa.runtime.sim.slot_cache import SlotCache


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Engine limits: KV pool, batch size, prefill chunk, admission reservation, mixed batches.

    Admission reserves decode room like SGLang: ``min(max_new - generated, reserve_clip) ×
    reserve_ratio`` per running request (SGLang's adaptive ``new_token_ratio`` decays from
    0.7 towards 0.1 while nothing is retracted; a constant stands in for it here).
    ``cache_tokens``: finished requests' KV kept idle in their slots (0: none; the CPU
    llama.cpp engine keeps ``n_ctx/4``).
    """

    kv_capacity: int
    max_running: int = 256
    chunk_tokens: int = 8192
    reserve_ratio: float = 0.25
    reserve_clip: int = 4096
    mixed: bool = False
    cache_tokens: int = 0

    def __post_init__(self) -> None:
        if (self.kv_capacity < 1 or self.max_running < 1 or self.chunk_tokens < 1 or self.cache_tokens < 0
                or not 0 <= self.reserve_ratio <= 1 or self.reserve_clip < 0):
            raise ConfigError(f"bad engine config {self}")

    def reserve(self, req: "SimRequest") -> float:
        return min(req.max_new - req.generated, self.reserve_clip) * self.reserve_ratio


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request in the simulated engine.

    ``shared``: leading prompt tokens that are the program's cacheable prefix;
    ``extends_prefix``: on completion prompt + output become the program's prefix (a CoT
    chunk continuing a live sequence); otherwise the request's own KV is freed (samples,
    probes rolled back). ``output`` is what it will generate (the engine cannot know it);
    ``max_tokens`` is what it declared (admission reserves from it; default ``output``).
    """

    rid: str
    pid: str
    prompt: int
    output: int
    shared: int = 0
    extends_prefix: bool = False
    ticket: Ticket | None = None
    kind: str = "main"
    generated: int = 0
    prefill_left: int = 0
    cached_at_admit: int = 0
    own: int = 0
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    payload: object = None
    max_tokens: int | None = None

    @property
    def max_new(self) -> int:
        return self.output if self.max_tokens is None else max(self.max_tokens, self.output)

    @property
    def context(self) -> int:
        return self.prompt + self.generated


@dataclass(slots=True)
class EngineStats:
    iterations: int = 0
    prefill_iterations: int = 0
    busy_s: float = 0.0
    preemptions: int = 0
    evictions: int = 0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    decode_tokens: int = 0
    records: list[IterationRecord] = field(default_factory=list)


class SimEngine:
    """The simulated engine. ``policy`` orders its waiting queue and picks preemption victims."""

    def __init__(self, config: EngineConfig, cost: CostModel, policy: SchedulingPolicy | None = None,
                 record: bool = False) -> None:
        self.cfg, self.cost = config, cost
        self.policy = policy or SchedulingPolicy()
        self.record = record
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.prefix: dict[str, int] = {}  # program id -> cached prefix tokens
        self.refs: dict[str, int] = {}
        self.last_use: dict[str, float] = {}
        self.kv_used = 0
        self.slot_cache = SlotCache(config.cache_tokens, config.max_running) if config.cache_tokens else None
        self.stats = EngineStats()
        self._seq = 0

    # ---- requests -------------------------------------------------------------------
    def add(self, req: SimRequest, now: float = 0.0) -> None:
        if req.ticket is None:
            self._seq += 1
            req.ticket = Ticket(req.rid, ProgramInfo(req.pid, arrival=now), now, seq=self._seq)
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """Remove ``req`` at once, freeing its KV."""
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self.running.remove(req)
            self._free(req)

    def drop_program(self, pid: str) -> None:
        """The program ended: free its prefix."""
        self.kv_used -= self.prefix.pop(pid, 0)
        self.refs.pop(pid, None)
        self.last_use.pop(pid, None)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    # ---- KV -------------------------------------------------------------------------
    def _free(self, r: SimRequest) -> None:
        self.kv_used -= r.own
        r.own = 0
        self.refs[r.pid] = self.refs.get(r.pid, 1) - 1

    def _evict(self, need: int, keep: str | None = None) -> None:
        """Evict idle prefixes (LRU) until ``need`` tokens are free or none is left."""
        idle = sorted((self.last_use.get(p, 0.0), p) for p, n in self.prefix.items()
                      if n and self.refs.get(p, 0) == 0 and p != keep)
        for _, p in idle:
            if self.cfg.kv_capacity - self.kv_used >= need:
                return
            self.kv_used -= self.prefix[p]
            self.prefix[p] = 0
            self.stats.evictions += 1

    def _reserved(self) -> float:
        """Decode headroom reserved for the running requests (``EngineConfig.reserve`` of each, summed)."""
        clip, ratio = self.cfg.reserve_clip, self.cfg.reserve_ratio
        return sum(min((r.output if r.max_tokens is None or r.max_tokens < r.output else r.max_tokens) - r.generated,
                       clip) * ratio for r in self.running)

    def _admit(self, now: float) -> None:
        if not self.waiting or len(self.running) >= self.cfg.max_running:
            return
        for r in self.waiting:
            r.ticket.cached = min(self.prefix.get(r.pid, 0), r.shared)  # type: ignore[union-attr]
        ordered = self.policy.order([r.ticket for r in self.waiting], now)  # type: ignore[misc]
        by_ticket = {id(r.ticket): r for r in self.waiting}
        reserved = self._reserved()
        for t in ordered:
            r = by_ticket[id(t)]
            if len(self.running) >= self.cfg.max_running:
                break
            hit = min(self.prefix.get(r.pid, 0), r.shared)
            new = r.context - hit
            need = new + reserved + self.cfg.reserve(r)
            if self.cfg.kv_capacity - self.kv_used < need:
                self._evict(need, keep=r.pid)
            if self.cfg.kv_capacity - self.kv_used < need and self.running:
                break  # head-of-line: wait for room
            grow = max(0, r.shared - self.prefix.get(r.pid, 0))
            self.prefix[r.pid] = max(self.prefix.get(r.pid, 0), r.shared)
            r.own = r.context - max(r.shared, hit)
            self.kv_used += grow + r.own
            r.cached_at_admit, r.prefill_left = hit, new
            r.admitted_at = now if r.admitted_at is None else r.admitted_at
            self.refs[r.pid] = self.refs.get(r.pid, 0) + 1
            self.last_use[r.pid] = now
            self.stats.cached_tokens += hit
            reserved += self.cfg.reserve(r)
            self.waiting.remove(r)
            self.running.append(r)
            if self.slot_cache is not None:
                self.slot_cache.take(r.pid, len(self.running))

    def _preempt_for(self, need: int, now: float) -> None:
        """Free ``need`` tokens for decoding: evict idle prefixes, then retract running requests."""
        self._evict(need)
        if self.cfg.kv_capacity - self.kv_used >= need:
            return
        victims = self.policy.order([r.ticket for r in self.running], now)[::-1]  # type: ignore[misc]
        by_ticket = {id(r.ticket): r for r in self.running}
        for t in victims:
            if self.cfg.kv_capacity - self.kv_used >= need or len(self.running) <= 1:
                return
            r = by_ticket[id(t)]
            self.running.remove(r)
            self._free(r)
            r.preemptions += 1
            self.stats.preemptions += 1
            self.waiting.append(r)
            need -= 1  # one fewer request decodes

    # ---- iterations -----------------------------------------------------------------
    def _cells(self) -> float:
        """``W``: KV cells held, the running requests' computed context plus idle cached KV
        (only when the cost model charges for them)."""
        if not self.cost.e:
            return 0.0
        cached = self.slot_cache.tokens if self.slot_cache is not None else 0
        return float(sum(r.context - r.prefill_left for r in self.running) + cached)

    def _finish(self, r: SimRequest, t: float, done: list[SimRequest]) -> None:
        r.finished_at = t
        self.running.remove(r)
        if self.slot_cache is not None and not r.extends_prefix:
            self.slot_cache.put(r.pid, r.context)
        if r.extends_prefix:  # its KV becomes the program's prefix (a live sequence)
            self.prefix[r.pid] = self.prefix.get(r.pid, 0) + r.own
            r.own = 0
        self._free(r)
        self.last_use[r.pid] = t
        done.append(r)

    def _log(self, n: int, k: float, p: float, dt: float, n_dec: int, n_pre: int, w: float = 0.0) -> None:
        st = self.stats
        st.iterations += 1
        st.busy_s += dt
        if self.record:
            st.records.append(IterationRecord(n, int(k), p, dt, n_dec, n_pre, "simulator", kv_cells=int(w)))

    def step(self, now: float, until: float = math.inf) -> tuple[float, list[SimRequest]]:
        """Run one prefill iteration, or decode iterations until a request finishes, KV runs
        out or the clock passes ``until`` (the next outside event). Returns (time, finished)."""
        self._admit(now)
        done: list[SimRequest] = []
        if not self.running:
            return now, done
        prefilling = [r for r in self.running if r.prefill_left > 0]
        decoding = [r for r in self.running if r.prefill_left == 0]
        if prefilling and self.cfg.mixed and decoding:
            self._ensure_kv(len(decoding), now)
            prefilling = [r for r in self.running if r.prefill_left > 0]
            decoding = [r for r in self.running if r.prefill_left == 0]
        if prefilling:
            return self._prefill_iteration(now, prefilling, decoding if self.cfg.mixed else [], done)
        return self._decode_run(now, until, done)

    def _prefill_iteration(self, now: float, prefilling: list[SimRequest], decoding: list[SimRequest],
                           done: list[SimRequest]) -> tuple[float, list[SimRequest]]:
        budget, n, pairs, completed = self.cfg.chunk_tokens, 0, 0.0, []
        for r in prefilling:
            if budget <= 0:
                break
            chunk = min(budget, r.prefill_left)
            pairs += prefill_pairs(chunk, r.context - r.prefill_left)
            r.prefill_left -= chunk
            budget -= chunk
            n += chunk
            if r.prefill_left == 0:
                completed.append(r)
        k = sum(r.context for r in decoding)
        w = self._cells()
        dt = self.cost.iteration_time(n + len(decoding), k, pairs, w)
        t = now + dt
        self.stats.prefill_iterations += 1
        self.stats.prefill_tokens += n
        self._log(n + len(decoding), k, pairs, dt, len(decoding), len(completed), w)
        for r in completed + decoding:  # the prefill emits each completed request's first token
            r.generated += 1
            r.own += 1
            self.kv_used += 1
            self.stats.decode_tokens += 1
            if r.first_token_at is None:
                r.first_token_at = t
            if r.generated >= r.output:
                self._finish(r, t, done)
        return t, done

    def _ensure_kv(self, need: int, now: float) -> None:
        if self.cfg.kv_capacity - self.kv_used < need:
            self._preempt_for(need, now)

    def _decode_run(self, now: float, until: float, done: list[SimRequest]) -> tuple[float, list[SimRequest]]:
        self._ensure_kv(len(self.running), now)
        R = len(self.running)
        k0 = sum(r.prompt + r.generated for r in self.running)
        m_max = min(r.output - r.generated for r in self.running)
        m_max = max(1, min(m_max, (self.cfg.kv_capacity - self.kv_used) // R))
        w0 = self._cells()
        base = self.cost.iteration_time(R, k0, 0.0, w0)
        slope = (self.cost.c + self.cost.e * R) * R  # each iteration reads R more KV tokens and holds R more cells

        def elapsed(m: int) -> float:
            return m * base + slope * m * (m - 1) / 2.0

        m = m_max
        if until < math.inf and elapsed(m_max) > until - now:
            gap = max(0.0, until - now)  # smallest m with elapsed(m) >= gap
            if slope > 0:
                qa, qb = slope / 2.0, base - slope / 2.0
                m = math.ceil((-qb + math.sqrt(qb * qb + 4 * qa * gap)) / (2 * qa))
            else:
                m = math.ceil(gap / base) if base > 0 else 1
            m = min(m_max, max(1, m))
            while m > 1 and elapsed(m - 1) >= gap:
                m -= 1
            while m < m_max and elapsed(m) < gap:
                m += 1
        if self.record:
            for i in range(m):
                w = w0 + i * R if w0 else 0.0
                self._log(R, k0 + i * R, 0.0, self.cost.iteration_time(R, k0 + i * R, 0.0, w), R, 0, w)
        else:
            self.stats.iterations += m
            self.stats.busy_s += elapsed(m)
        t = now + elapsed(m)
        self.kv_used += m * R
        self.stats.decode_tokens += m * R
        for r in list(self.running):
            r.generated += m
            r.own += m
            if r.first_token_at is None:
                r.first_token_at = t
            if r.generated >= r.output:
                self._finish(r, t, done)
        return t, done


__all__ = ["EngineConfig", "EngineStats", "SimEngine", "SimRequest"]

"""KV slots of the llama.cpp engine: admission, prefix sharing, truncation, eviction, preemption.

The context is created with ``kv_unified=True``, so ``llama_memory_seq_cp`` does not copy
tensors: it tags the prompt's KV cells with one more sequence id. A new job therefore gets
the longest prompt prefix any slot already holds (a live branch, or the cached KV a finished
request left behind) for free, and evaluates only the rest. Requests that arrive together
with the same prompt wait one step for the first of them to compute it (the *leader*), then
copy. Finished jobs leave their KV cached in their slot until the slot is needed again, up
to ``cache_limit`` tokens (least recently used first out): with a unified KV every decode
attends over the whole occupied cell range, so cached cells are not free (measured on the
0.5B: ~30 ms → ~45 ms per decode step with 5,400 cached tokens).

Example:
    >>> common_prefix_len([1, 2, 3, 4], [1, 2, 9], cap=10)
    2
"""

from __future__ import annotations

import llama_cpp as lc

from certa.runtime.backends.llamacpp.jobs import Job, Slot

#: prefixes at least this long (or the whole prompt) are worth waiting one step for
MIN_WAIT_SHARE = 16


def common_prefix_len(a: list[int], b: list[int], cap: int) -> int:
    """Length of the common prefix of ``a`` and ``b`` (at most ``cap``), by binary search on slices."""
    n = min(len(a), len(b), cap)
    if n <= 0:
        return 0
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n - 1  # a[:lo] == b[:lo] holds, a[:hi+1] != b[:hi+1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class KVSlots:
    """The engine's sequence slots over one llama.cpp memory (all methods: engine thread only)."""

    def __init__(self, mem, n_seq: int, cache_limit: int | None = None) -> None:
        self.mem = mem
        self.slots = [Slot(i) for i in range(n_seq)]
        self.cache_limit = cache_limit  # max tokens kept as prefix cache in free slots (None: no cap)
        self.clock = 0  # bumped by the engine each iteration (LRU)
        self.evictions = 0
        self.preemptions = 0

    # ---- low-level ------------------------------------------------------------------
    def truncate(self, slot: Slot, keep: int) -> None:
        """Drop the KV of ``slot`` from position ``keep`` on (``keep=0``: all of it)."""
        if keep < len(slot.kv):
            lc.llama_memory_seq_rm(self.mem, slot.id, keep if keep > 0 else -1, -1)
            del slot.kv[keep:]

    def free(self) -> list[Slot]:
        return [s for s in self.slots if s.owner is None]

    def live_tokens(self) -> int:
        return sum(len(s.kv) for s in self.slots)

    # ---- admission ------------------------------------------------------------------
    def cached_prefix(self, job: Job) -> int:
        """The longest prefix of ``job``'s pending tokens that some slot's KV already holds."""
        want, cap = job.pending, len(job.pending) - 1
        return max((common_prefix_len(s.kv, want, cap) for s in self.slots), default=0)

    def leader(self, job: Job, jobs: list[Job]) -> Job | None:
        """A job still prefilling a longer shared prefix of ``job``'s prompt than any slot holds."""
        want, cap = job.pending, len(job.pending) - 1
        have = self.cached_prefix(job)
        for other in jobs:
            if (other is job or other.slot is None or other.aborted or other.prompt_left == 0
                    or other.waiting is not None):
                continue
            goal = other.slot.kv + other.pending[:min(other.prompt_left, other.evaluable())]
            k = common_prefix_len(goal, want, cap)
            if k > have and k > len(other.slot.kv) and (k >= MIN_WAIT_SHARE or k == cap):
                return other
        return None

    def pick(self, job: Job) -> Slot | None:
        """A free slot for ``job``: the best in-place prefix match, else an empty one, else LRU."""
        free = self.free()
        if not free:
            return None
        want, cap = job.pending, len(job.pending) - 1
        best = max(free, key=lambda s: (common_prefix_len(s.kv, want, cap), not s.kv, -s.used))
        return best

    def preempt_idle(self, jobs: list[Job], busy: set[int]) -> Slot | None:
        """Take the slot of the least recently used idle sequence whose slot is not in ``busy``
        (the slots of this iteration's batch); it recomputes its KV when it next has work."""
        idle = [j for j in jobs if j.slot is not None and j.idle and j.slot.id not in busy]
        if not idle:
            return None
        victim = min(idle, key=lambda j: j.slot.used)  # type: ignore[union-attr]
        slot = victim.slot
        assert slot is not None
        victim.pending = slot.kv + victim.pending
        victim.prompt_left = len(victim.pending)
        victim.slot, slot.owner = None, None
        self.preemptions += 1
        return slot

    def attach(self, job: Job) -> int:
        """Give ``job`` (which owns ``job.slot``) the longest prefix any slot holds; returns its length."""
        own = job.slot
        assert own is not None
        want, cap = job.pending, len(job.pending) - 1
        src, m = own, common_prefix_len(own.kv, want, cap)
        for s in self.slots:
            if s is not own:
                k = common_prefix_len(s.kv, want, cap)
                if k > m:
                    src, m = s, k
        if src is own:
            self.truncate(own, m)
        else:
            self.truncate(own, 0)
            lc.llama_memory_seq_cp(self.mem, src.id, own.id, 0, m)
            own.kv = src.kv[:m]
        job.pending = want[m:]
        job.prompt_left = max(0, job.prompt_left - m)
        if not job.reported_prompt:
            job.cached = m
        own.used = self.clock
        return m

    def release(self, job: Job, *, keep_cache: bool) -> None:
        """Free ``job``'s slot; its KV stays as a prefix cache unless ``keep_cache`` is False."""
        slot = job.slot
        if slot is None:
            return
        job.slot, slot.owner, slot.used = None, None, self.clock
        if not keep_cache:
            self.truncate(slot, 0)
        elif self.cache_limit is not None:  # cached cells widen every decode's attention span: cap them
            while sum(len(s.kv) for s in self.free()) > self.cache_limit and self.evict_one(set()):
                pass

    def evict_one(self, busy: set[int]) -> bool:
        """Drop the least recently used cached KV of a free slot not in ``busy``; False if none."""
        cached = [s for s in self.free() if s.kv and s.id not in busy]
        if not cached:
            return False
        self.truncate(min(cached, key=lambda s: s.used), 0)
        self.evictions += 1
        return True


__all__ = ["MIN_WAIT_SHARE", "KVSlots", "common_prefix_len"]

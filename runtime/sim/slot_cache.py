"""The KV a finished request leaves cached in its sequence slot (the CPU llama.cpp engine).

certa's llama.cpp engine keeps a finished request's KV in its slot as a prefix cache, up to
``cache_limit`` tokens (least recently used out first), and a new request takes the free
slot whose KV shares its longest prompt prefix. Every chat prompt shares the template's
opening tokens, so a new request takes a cached slot whenever there is one (its own
program's first, else the least recently used) and keeps only the shared prefix. Those idle
cells still widen every decode's attention span (``CostModel.e``), which is why the
simulator tracks them: :class:`SlotCache` holds the cached entries and their tokens.

This is a SIMULATOR component: it models where idle KV sits, not what it contains (a hit
on a program's own cached sample is modelled by the program's shared prefix, as before).

Example:
    >>> c = SlotCache(limit=1000, slots=4)
    >>> c.put("p1", 600); c.put("p2", 300); c.tokens
    900
    >>> c.put("p3", 300); c.tokens            # over the limit: p1's entry goes (LRU)
    600
    >>> c.take("p3", running=1); c.tokens     # a request of p3 takes p3's slot
    300
"""

from __future__ import annotations

from collections import deque


class SlotCache:
    """Idle cached KV entries in free slots: ``limit`` tokens and ``slots`` slots at most."""

    def __init__(self, limit: int, slots: int) -> None:
        self.limit, self.slots = limit, slots
        self.entries: deque[tuple[str, int]] = deque()  # (program id, tokens), oldest first
        self.tokens = 0

    def put(self, pid: str, tokens: int) -> None:
        """A request of ``pid`` finished: its slot keeps ``tokens`` of KV cached."""
        if tokens <= 0 or self.limit <= 0:
            return
        self.entries.append((pid, tokens))
        self.tokens += tokens
        while self.tokens > self.limit and self.entries:
            self.tokens -= self.entries.popleft()[1]

    def take(self, pid: str, running: int) -> None:
        """A request of ``pid`` was admitted (``running`` requests now hold slots): it takes one
        cached slot, its program's own if any, else the least recently used one."""
        if not self.entries:
            return
        for i, (p, n) in enumerate(self.entries):
            if p == pid:
                del self.entries[i]
                self.tokens -= n
                break
        else:
            self.tokens -= self.entries.popleft()[1]
        while self.entries and len(self.entries) + running > self.slots:  # more caches than free slots
            self.tokens -= self.entries.popleft()[1]


__all__ = ["SlotCache"]

"""FaultyBackend: wrap any backend and inject failures from a deterministic, seeded fault plan.

For reliability tests. Whether a request is faulted, and how, is a pure function of
``(seed, rid)``, so a plan does not depend on the order requests arrive in, and a retried
request (the runtime gives it a new rid ``...~rN``) draws again, like a transient fault.

Fault kinds (``kinds`` picks some, or weighs them with a ``{kind: weight}`` mapping):

==============  ===========================================================================
``error_before`` the request fails before reaching the engine (HTTP 503): retryable.
``fatal``        the request is refused before reaching the engine (HTTP 400, engine crash):
                 NOT retryable, so its program fails.
``error_mid``    the engine fails part-way through generating (OOM): it drops the request
                 itself; retryable.
``disconnect``   the connection drops part-way through the stream; the engine does not
                 notice and keeps the rid live until someone aborts it; retryable.
``timeout``      no answer within ``timeout_s``; the engine keeps working on the rid
                 (only an abort frees it); retryable.
``slow``         the answer arrives ``slow_s`` late; no error.
``abort_race``   an engine-side abort crosses the request ``race_s`` after it started: if
                 the request finished first it is returned as is, otherwise the engine
                 reports ``finish_reason="abort"`` with no text (the runtime retries it).
==============  ===========================================================================

Counters: ``injected`` and ``survived`` (by kind). A fault *survives* when the same logical
request (its rid without the ``~rN`` retry tag) later completes; ``stats()`` sums them up.
Sequences (``open_sequence``) and everything else pass through to the inner backend.

Example:
    >>> import asyncio
    >>> from certa.runtime.backends.testing.scripted import ScriptedBackend
    >>> from certa.runtime.types import GenRequest
    >>> fb = FaultyBackend(ScriptedBackend(responses=["ok"]), rate=1.0, kinds=["slow"], slow_s=0.0)
    >>> asyncio.run(fb.generate(GenRequest(prompt="hi", rid="r1"))).text
    'ok'
    >>> fb.stats()["injected"], fb.stats()["survived"]
    (1, 1)
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from certa.runtime.errors import BackendError, ConfigError
from certa.runtime.types import Capabilities, GenRequest, GenResult, ScoreRequest, ScoreResult
from certa.runtime.backends.base import Backend, BackendSequence

FAULT_KINDS = ("error_before", "fatal", "error_mid", "disconnect", "timeout", "slow", "abort_race")
"""Every fault kind :class:`FaultyBackend` can inject."""

_RETRY_TAG = re.compile(r"~r\d+$")


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault: which request, which kind, and how far into it (0..1)."""

    rid: str
    kind: str
    frac: float
    program_id: str = ""
    step: str = ""
    branch: int = 0


class FaultyBackend(Backend):
    """Wrap ``inner`` and fault a fraction ``rate`` of its requests (see the module docstring).

    Args:
        inner: the backend doing the real work.
        rate: probability that a request is faulted, in [0, 1].
        kinds: fault kinds to draw from (uniformly), or a ``{kind: weight}`` mapping.
        seed: seeds the plan; the same seed and rids give the same faults.
        timeout_s: how long a ``timeout`` fault waits before failing.
        slow_s: extra latency of a ``slow`` fault.
        mid_s: how far (at most) into the request ``error_mid``/``disconnect`` strike.
        race_s: how far (at most) into the request an ``abort_race`` abort arrives.
    """

    def __init__(self, inner: Backend, rate: float = 0.1, kinds: Iterable[str] | Mapping[str, float] = FAULT_KINDS,
                 *, seed: int = 0, timeout_s: float = 0.05, slow_s: float = 0.02, mid_s: float = 0.01,
                 race_s: float = 0.01) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ConfigError(f"fault rate must be in [0, 1], got {rate}")
        weights = dict(kinds) if isinstance(kinds, Mapping) else {k: 1.0 for k in kinds}
        unknown = sorted(set(weights) - set(FAULT_KINDS))
        if unknown or not weights or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
            raise ConfigError(f"bad fault kinds {kinds!r}", hint=f"choose from {', '.join(FAULT_KINDS)}")
        total = sum(weights.values())
        self._cumulative: list[tuple[float, str]] = []
        acc = 0.0
        for kind, w in weights.items():
            acc += w / total
            self._cumulative.append((acc, kind))
        self.inner = inner
        self.rate = rate
        self.seed = seed
        self.timeout_s, self.slow_s, self.mid_s, self.race_s = timeout_s, slow_s, mid_s, race_s
        self.capabilities = Capabilities(**{**_caps_dict(inner.capabilities),
                                            "name": f"faulty({inner.capabilities.name})"})
        self.injected: Counter[str] = Counter()
        self.survived: Counter[str] = Counter()
        self.log: list[Fault] = []
        self.calls = 0  # requests seen (generate + score)
        self._pending: dict[str, list[str]] = {}  # logical rid -> kinds of its faults not yet survived
        self._orphans: dict[str, asyncio.Task] = {}  # engine work left running after the client gave up

    # ---- the plan ---------------------------------------------------------------------
    def plan(self, rid: str) -> tuple[str, float] | None:
        """``(kind, frac)`` if the request with this rid is faulted, else None (pure function)."""
        digest = hashlib.sha256(f"{self.seed}|{rid}".encode()).digest()
        u_fault = int.from_bytes(digest[0:8], "big") / 2 ** 64
        if u_fault >= self.rate:
            return None
        u_kind = int.from_bytes(digest[8:16], "big") / 2 ** 64
        frac = int.from_bytes(digest[16:24], "big") / 2 ** 64
        kind = next((k for edge, k in self._cumulative if u_kind < edge), self._cumulative[-1][1])
        return kind, frac

    def stats(self) -> dict[str, Any]:
        """Totals and per-kind counts of faults injected and survived, plus request count."""
        return {"requests": self.calls, "injected": sum(self.injected.values()),
                "survived": sum(self.survived.values()), "injected_by_kind": dict(self.injected),
                "survived_by_kind": dict(self.survived), "orphans": len(self._orphans)}

    def unsurvived(self) -> dict[str, list[str]]:
        """Logical rids whose faults were never followed by a completion (their program failed,
        or the request was cancelled, e.g. by an early exit), with the kinds of those faults."""
        return {rid: list(kinds) for rid, kinds in self._pending.items()}

    def _inject(self, rid: str, kind: str, frac: float, req: GenRequest | ScoreRequest) -> None:
        self.injected[kind] += 1
        self.log.append(Fault(rid, kind, frac, req.program_id, req.step, req.branch))
        self._pending.setdefault(_RETRY_TAG.sub("", rid), []).append(kind)

    def _completed(self, rid: str) -> None:
        for kind in self._pending.pop(_RETRY_TAG.sub("", rid), ()):
            self.survived[kind] += 1

    @staticmethod
    def _error(req: GenRequest | ScoreRequest, message: str, retryable: bool) -> BackendError:
        return BackendError(f"injected fault: {message}", retryable=retryable, program=req.program_id or None,
                            step=req.step or None, branch=req.branch)

    def _orphan(self, rid: str, task: asyncio.Task) -> None:
        """Leave ``task`` running on the engine (the client gave up on it) until it ends or is aborted."""
        self._orphans[rid] = task
        task.add_done_callback(lambda t, rid=rid: self._orphans.pop(rid, None) if self._orphans.get(rid) is t else None)
        task.add_done_callback(_consume)

    # ---- protocol ---------------------------------------------------------------------
    async def generate(self, req: GenRequest) -> GenResult:
        return await self._generate(req, None)

    async def generate_stream(self, req: GenRequest, on_text: Callable[[str], None]) -> GenResult:
        """``generate`` streaming through the inner backend: a mid-stream fault has already
        handed out some text when it strikes (the retry streams again from its start)."""
        return await self._generate(req, on_text)

    def _inner_generate(self, req: GenRequest, on_text: Callable[[str], None] | None) -> Any:
        return self.inner.generate(req) if on_text is None else self.inner.generate_stream(req, on_text)

    async def _generate(self, req: GenRequest, on_text: Callable[[str], None] | None) -> GenResult:
        self.calls += 1
        drawn = self.plan(req.rid)
        if drawn is None:
            out = await self._inner_generate(req, on_text)
            if out.finish_reason != "abort":
                self._completed(req.rid)
            return out
        kind, frac = drawn
        self._inject(req.rid, kind, frac, req)
        if kind == "error_before":
            raise self._error(req, "service unavailable (503) before the request reached the engine", True)
        if kind == "fatal":
            raise self._error(req, "request refused by the engine (400)", False)
        if kind == "slow":
            await asyncio.sleep(self.slow_s * (0.5 + frac))
            out = await self._inner_generate(req, on_text)
            if out.finish_reason != "abort":
                self._completed(req.rid)
            return out
        task = asyncio.ensure_future(self._inner_generate(req, on_text))
        try:
            if kind == "timeout":
                done, _ = await asyncio.wait({task}, timeout=self.timeout_s)
                self._orphan(req.rid, task)  # finished or not, the answer never reaches us
                raise self._error(req, f"no response within {self.timeout_s}s", True)
            if kind in ("error_mid", "disconnect"):
                await asyncio.wait({task}, timeout=self.mid_s * frac)
                if kind == "error_mid":  # the engine itself fails and drops the request
                    await self.inner.abort(req.rid)
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    raise self._error(req, "engine error part-way through generation", True)
                self._orphan(req.rid, task)  # the engine never hears of the dropped connection
                raise self._error(req, "connection reset part-way through the stream", True)
            # abort_race: an engine-side abort crosses the request
            done, _ = await asyncio.wait({task}, timeout=self.race_s * frac)
            if not done:
                await self.inner.abort(req.rid)
                await asyncio.gather(task, return_exceptions=True)
            if task.cancelled():  # the abort won: the engine reports an aborted request
                return GenResult(text="", tokens=0, finish_reason="abort", rid=req.rid)
            out = task.result()  # the request won (or failed on its own: re-raised here)
            if out.finish_reason != "abort":
                self._completed(req.rid)
            return out
        except asyncio.CancelledError:  # our caller gave up: stop the engine work too
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            raise

    async def score(self, req: ScoreRequest) -> ScoreResult:
        self.calls += 1
        drawn = self.plan(req.rid)
        if drawn is not None:
            kind, frac = drawn
            self._inject(req.rid, kind, frac, req)
            if kind == "fatal":
                raise self._error(req, "score request refused by the engine (400)", False)
            if kind == "slow":
                await asyncio.sleep(self.slow_s * (0.5 + frac))
            else:
                raise self._error(req, f"score request failed ({kind})", True)
        out = await self.inner.score(req)
        self._completed(req.rid)
        return out

    async def abort(self, rid: str) -> bool:
        live = await self.inner.abort(rid)
        task = self._orphans.pop(rid, None)
        if task is not None and not task.done():
            task.cancel()
            live = True
        return live

    def live_rids(self) -> set[str]:
        return self.inner.live_rids()

    async def open_sequence(self, req: GenRequest) -> BackendSequence:
        return await self.inner.open_sequence(req)

    async def close(self) -> None:
        orphans = list(self._orphans.values())
        for task in orphans:
            task.cancel()
        if orphans:
            await asyncio.gather(*orphans, return_exceptions=True)
        self._orphans.clear()
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:  # attach_scheduler, requests of a scripted inner, ...
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _caps_dict(caps: Capabilities) -> dict[str, Any]:
    return {f.name: getattr(caps, f.name) for f in dataclasses.fields(caps)}


def _consume(task: asyncio.Task) -> None:
    """Retrieve an orphan's outcome so asyncio never logs 'exception was never retrieved'."""
    if not task.cancelled():
        task.exception()


__all__ = ["FAULT_KINDS", "Fault", "FaultyBackend"]

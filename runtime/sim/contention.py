"""ContentionBackend: the simulated engine played in real (or accelerated) time, for live load tests.

A fixed-latency fake backend has no contention: requests never slow each other down, so a
load test on it measures the server's overhead, not scheduling. This backend serves every
request on a :class:`~.engine.SimEngine` — the cost model ``t = a + b·N + c·K + d·P``, a hard
KV pool with prefix caching and preemption, continuous batching up to ``max_running`` — on an
ordinary asyncio event loop, with engine time running ``speed`` times faster than the wall
clock. It is :class:`~.backend.SimBackend` (the same engine the simulator uses) with the clock
mapped: nothing is duplicated. The Runtime's scheduler drives it (``attach_scheduler``: the
same policy orders the engine's queue and preemptions), so ``certa serve --backend sim`` and
``benchmarks/serve_load.py`` measure what the scheduling policy does under contention.

What a request says (text, token counts) comes from a content backend (default: the
scripted fake); how long it takes from the engine. ``output_tokens`` (a number or
``callable(request, result) -> int``) sets the simulated decode length of each request —
reasoning-length chains while the text stays short.

Timing. The engine keeps its own clock (seconds of simulated engine time); an iteration that
starts at engine time ``s`` and lasts ``dt`` (the cost model's) ends at wall time
``t0 + (s + dt) / speed``. The next step starts where the last one ended, so engine time
follows the cost model exactly even when the event loop runs late (a late loop catches up);
after an idle gap the engine clock jumps to the wall clock's. One step runs decode
iterations in closed form for up to ``quantum_s`` of wall time (or until a request finishes,
or KV runs out), so a request that arrives mid-step joins the batch at most ``quantum_s``
late. ``timeline`` (with ``record=True``) holds one :class:`Step` per engine step.

These are SIMULATED costs: presets are estimates from public specs (see :mod:`.presets`).

Example:
    >>> import asyncio
    >>> from certa.runtime.sim.cost_model import CostModel
    >>> b = ContentionBackend(cost=CostModel(0.01, 0.0, 0.0, 0.0), kv_capacity=10_000, speed=100.0)
    >>> from certa.runtime.types import GenRequest
    >>> res = asyncio.run(b.generate(GenRequest(prompt="2+2?", rid="r1", max_tokens=16)))
    >>> res.tokens, round(b.engine.stats.busy_s, 3)   # the scripted text's 10 tokens: 10 iterations of 10 ms
    (10, 0.1)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from certa.runtime.backends.base import Backend
from certa.runtime.errors import ConfigError
from certa.runtime.sim.backend import SimBackend
from certa.runtime.sim.cost_model import CostModel
from certa.runtime.sim.engine import EngineConfig, SimRequest
from certa.runtime.sim.presets import Preset, get_preset
from certa.runtime.types import GenRequest, GenResult

__all__ = ["ContentionBackend", "Step"]

DEFAULT_PRESET = "h200-r1-distill-qwen-7b"


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step: engine-time start/end, its iterations, and when (loop time) it was due and ran."""

    start: float
    end: float
    iterations: int
    due: float
    fired: float = 0.0


class ContentionBackend(SimBackend):
    """A simulated engine in real time (see the module docstring).

    Args:
        preset: a :class:`~.presets.Preset` or its name (cost model and KV pool); ``cost`` and
            ``kv_capacity`` override its parts.
        speed: engine seconds per wall second (10 = ten times faster than the GPU it models).
        content: what requests return (default: the scripted fake backend's answers).
        output_tokens: simulated decode tokens of a request (a number, or
            ``callable(request, content_result) -> int``); default: the content's own count.
        prompt_tokens: the simulated prompt length (a number or ``callable(request) -> int``);
            default: the content's own count (200 when it reports none).
        max_running, chunk_tokens: the engine's batch cap and prefill chunk.
        quantum_s: wall seconds one step may run (a bound on how late an arrival joins).
        record: keep ``engine.stats.records`` (one per iteration) and ``timeline`` (one per step).
    """

    def __init__(self, preset: Preset | str = DEFAULT_PRESET, *, speed: float = 1.0, content: Backend | None = None,
                 output_tokens: int | Callable[[GenRequest, GenResult], int] | None = None,
                 prompt_tokens: int | Callable[[GenRequest], int] | None = None, cost: CostModel | None = None,
                 kv_capacity: int | None = None, max_running: int = 256, chunk_tokens: int = 8192,
                 quantum_s: float = 0.01, record: bool = False) -> None:
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0 < speed < float("inf"):
            raise ConfigError(f"speed must be a positive number (engine seconds per wall second), not {speed!r}")
        if isinstance(quantum_s, bool) or not isinstance(quantum_s, (int, float)) or quantum_s < 0:
            raise ConfigError(f"quantum_s must be >= 0 seconds, not {quantum_s!r}")
        if output_tokens is not None and not callable(output_tokens) and (
                isinstance(output_tokens, bool) or not isinstance(output_tokens, int) or output_tokens < 1):
            raise ConfigError(f"output_tokens must be a positive integer or a callable, not {output_tokens!r}")
        pre = get_preset(preset) if isinstance(preset, str) else preset
        if content is None:
            from certa.runtime.backends.testing.scripted import ScriptedBackend
            content = ScriptedBackend()
        engine = EngineConfig(kv_capacity or pre.kv_capacity, max_running=max_running, chunk_tokens=chunk_tokens)
        super().__init__(content, engine, cost or pre.cost, prompt_tokens=200 if prompt_tokens is None else prompt_tokens,
                         record=record)
        self.fixed_prompt = prompt_tokens is not None  # the simulated prompt length, whatever the content counts
        self.preset, self.speed, self.quantum_s = pre, float(speed), float(quantum_s)
        self.output_tokens = output_tokens
        self.capabilities.name = "sim"
        self.engine_clock = 0.0  # engine seconds: where the last step ended
        self.timeline: list[Step] = []
        self._t0: float | None = None  # loop time at engine time 0
        self._continuing = False  # the engine had work when its last step ended
        self._iterations = 0

    # ---- the clock mapping ----------------------------------------------------------
    def _wall(self, loop: asyncio.AbstractEventLoop) -> float:
        """The wall clock in engine seconds."""
        if self._t0 is None:
            self._t0 = loop.time()
        return (loop.time() - self._t0) * self.speed

    def engine_time(self, loop: asyncio.AbstractEventLoop) -> float:
        if self._busy or (self._continuing and not self.engine.idle):
            return self.engine_clock  # mid-step arrivals queue for the next step; work continues where it ended
        return max(self.engine_clock, self._wall(loop))  # after an idle gap: the wall clock's time

    def horizon(self, loop: asyncio.AbstractEventLoop, now: float) -> float:
        return now + self.quantum_s * self.speed

    def schedule_end(self, loop: asyncio.AbstractEventLoop, start: float, end: float, done: list[SimRequest]) -> None:
        self._wall(loop)  # fixes t0 if this is the first step
        self.engine_clock, self._continuing = end, False
        due = self._t0 + end / self.speed  # type: ignore[operator]
        if not self.engine.record:
            loop.call_at(due, self._complete, loop, done)
            return
        index, iterations = len(self.timeline), self.engine.stats.iterations - self._iterations
        self._iterations = self.engine.stats.iterations
        self.timeline.append(Step(start, end, iterations, due))

        def fire() -> None:
            st = self.timeline[index]
            self.timeline[index] = Step(st.start, st.end, st.iterations, st.due, loop.time())
            self._complete(loop, done)

        loop.call_at(due, fire)

    def _complete(self, loop: asyncio.AbstractEventLoop, done: list[SimRequest]) -> None:
        self._continuing = not self.engine.idle
        super()._complete(loop, done)

    # ---- content --------------------------------------------------------------------
    async def generate(self, req: GenRequest) -> GenResult:
        if self.output_tokens is None and not self.fixed_prompt:
            return await super().generate(req)
        res = await self.content.generate(req)
        if self.output_tokens is None:
            out = res.tokens
        else:
            out = self.output_tokens(req, res) if callable(self.output_tokens) else self.output_tokens
        out = max(1, int(out))
        prompt = self.prompt_of(req) if self.fixed_prompt else (res.prompt_tokens or self.prompt_of(req))
        r = await self.run(req, req.rid, prompt=prompt, output=out, shared=prompt,
                           max_tokens=max(req.max_tokens or 0, out))
        res.prompt_tokens, res.cached_prompt_tokens, res.tokens = prompt, r.cached_at_admit, r.generated
        return res


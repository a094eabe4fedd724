"""The contention backend (``--backend sim``): the simulated engine in real (accelerated) time.

Its iterations must take what the cost model says for the batch they run (checked on a tiny
case against durations computed here from the batch), wall time must follow engine time /
speed, requests in one batch must slow each other down, and the Runtime's scheduler drives it.
"""

from __future__ import annotations

import asyncio

import pytest

import certa as ct
from certa.runtime.backends.registry import BACKENDS, make_backend
from certa.runtime.errors import ConfigError
from certa.runtime.scheduling.policies import make_policy
from certa.runtime.sim.contention import ContentionBackend
from certa.runtime.sim.cost_model import CostModel, prefill_pairs
from certa.runtime.types import GenRequest

COST = CostModel(a=0.02, b=1e-4, c=1e-5, d=1e-7)
SPEED = 4.0


def backend(**kw) -> ContentionBackend:
    opts = dict(cost=COST, kv_capacity=10_000, speed=SPEED, prompt_tokens=100, record=True, quantum_s=0.0)
    return ContentionBackend(**{**opts, **kw})


def req(rid: str, program: str = "p") -> GenRequest:
    return GenRequest(prompt=f"question {rid}", rid=rid, program_id=program, max_tokens=64)


def expected_alone(prompt: int, output: int) -> list[float]:
    """One request on an idle engine: a prefill iteration (its first token), then one decode per token."""
    times = [COST.iteration_time(prompt, 0, prefill_pairs(prompt, 0))]
    times += [COST.iteration_time(1, prompt + g, 0.0) for g in range(1, output)]
    return times


async def test_iteration_times_follow_the_cost_model_in_wall_time():
    b = backend(output_tokens=5)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    res = await b.generate(req("r1"))
    wall = loop.time() - t0
    want = expected_alone(100, 5)
    assert res.tokens == 5 and res.prompt_tokens == 100
    assert [r.seconds for r in b.engine.stats.records] == pytest.approx(want, rel=1e-12)
    assert [(s.end - s.start) for s in b.timeline] == pytest.approx(want, rel=1e-12)  # quantum 0: a step each
    assert all(later.start == pytest.approx(earlier.end) for earlier, later in zip(b.timeline, b.timeline[1:]))
    assert all(s.fired >= s.due - 1e-3 for s in b.timeline)  # no iteration ends before its cost-model time
    assert sum(want) / SPEED - 2e-3 <= wall <= sum(want) / SPEED + 0.5  # ~63 ms of engine time at 4x


async def test_requests_in_one_batch_slow_each_other_down():
    b = backend(output_tokens=5)
    await asyncio.gather(b.generate(req("r1", "p1")), b.generate(req("r2", "p2")))
    recs = b.engine.stats.records
    assert (recs[0].n_tokens, recs[0].prefill_pairs) == (200, 2 * prefill_pairs(100, 0))  # one prefill for both
    decodes = recs[1:]
    assert [r.n_decode for r in decodes] == [2] * 4 and [r.kv_read for r in decodes] == [202, 204, 206, 208]
    want = [COST.iteration_time(200, 0, 2 * prefill_pairs(100, 0))] + \
        [COST.iteration_time(2, 2 * (100 + g), 0.0) for g in range(1, 5)]
    assert [r.seconds for r in recs] == pytest.approx(want, rel=1e-12)
    assert sum(want) > sum(expected_alone(100, 5))  # each waits for the batch's longer iterations
    assert b.engine_clock - b.timeline[0].start == pytest.approx(sum(want))


async def test_a_quantum_runs_several_decode_iterations_per_step_in_closed_form():
    b = backend(output_tokens=40, quantum_s=0.05)  # 0.05 s wall = 0.2 s engine: ~9 decodes of ~21 ms
    await b.generate(req("r1"))
    assert len(b.timeline) < len(b.engine.stats.records) == 40
    assert sum(s.end - s.start for s in b.timeline) == pytest.approx(sum(expected_alone(100, 40)), rel=1e-12)


async def test_the_runtime_scheduler_drives_it():
    b = backend(output_tokens=3)
    sched = ct.Scheduler(make_policy("certa"), ct.AdmissionLimits(max_requests=1))
    rt = ct.Runtime(b, scheduler=sched)
    assert b.scheduler is sched and b.engine.policy is sched.policy

    class Two(ct.Program):
        knob = ct.Knob("iterations", cap=1)

        async def execute(self, ctx):
            outs = await asyncio.gather(ctx.gen("a", max_tokens=8), ctx.gen("b", max_tokens=8))
            self.state = [o.tokens for o in outs]
            self.knob_used += 1
            return False

    res = await rt.run(Two)
    assert res.state == [3, 3] and res.tokens.main == 6
    assert max(r.n_decode for r in b.engine.stats.records) == 1  # max_requests=1: never batched together
    assert sched.inflight == 0 and b.live_rids() == set()


def test_registered_as_sim_with_preset_and_speed():
    assert "sim" in BACKENDS.names()
    b = make_backend("sim", preset="h100-llama-3.1-8b", speed=10)
    assert isinstance(b, ContentionBackend) and b.speed == 10.0 and b.engine.cfg.kv_capacity == 380_000
    assert b.capabilities.name == "sim"
    with pytest.raises(ConfigError, match="unknown simulator preset"):
        make_backend("sim", preset="nope")
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ConfigError, match="speed"):
            ContentionBackend(speed=bad)
    with pytest.raises(ConfigError, match="output_tokens"):
        ContentionBackend(output_tokens=0)


async def test_certa_serve_on_the_sim_backend_answers_under_contention():
    from certa.serve import Server

    async with Server("sc", "sim", scheduler="certa", max_inflight=8, preset="h100-llama-3.1-8b", speed=200.0,
                      output_tokens=300) as server:
        done = await asyncio.gather(*(server.complete(f"What is {i} + {i}?", knob_cap=8) for i in range(6)))
        backend = server.runtime.backend
    assert all(c.content.startswith("\\boxed{") for c in done)
    assert backend.engine.stats.decode_tokens >= 6 * 4 * 300  # every branch decoded its 300 simulated tokens
    assert backend.engine.stats.records == []  # record is off by default
    assert backend.live_rids() == set()

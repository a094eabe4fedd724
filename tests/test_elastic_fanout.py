"""Elastic fan-outs: SC's lanes widen into idle capacity (policies that ``widen``) and shrink back."""

from __future__ import annotations

import asyncio

import pytest

from certa.algorithms.programs.self_consistency import sc_program
from certa.dsl import Graph, State
from certa.dsl.errors import InvalidGraphError
from certa.runtime import Runtime, ScriptedBackend
from certa.runtime.scheduling.admission import AdmissionLimits, Ledger
from certa.runtime.scheduling.policies import make_policy
from certa.runtime.scheduling.policies import CertaSJF
from certa.runtime.scheduling.scheduler import ProgramInfo, Scheduler, SchedulingPolicy, Ticket
from certa.runtime.sim.clock import run_virtual

from .test_schedulers import Fan


class Counting(ScriptedBackend):
    """A scripted backend that logs (loop time, +1/-1, rid) as requests start and end."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.log: list[tuple[float, int, str]] = []
        self.now = self.peak = 0

    async def generate(self, req):
        t = asyncio.get_running_loop().time
        self.now += 1
        self.peak = max(self.peak, self.now)
        self.log.append((t(), 1, req.rid))
        try:
            return await super().generate(req)
        finally:
            self.now -= 1
            self.log.append((t(), -1, req.rid))


def disagreeing() -> Counting:
    """Every branch answers its own seed: no vote ever settles, SC runs to its cap."""
    return Counting(responses=lambda r: f"so \\boxed{{{r.seed}}}", latency=lambda r: 1.0)


class Widening(SchedulingPolicy):
    """FCFS that widens, expecting every program to run to its cap (the DSL side, without calibration)."""

    widen = True

    def wanted_requests(self, info: ProgramInfo) -> int:
        return (info.knob_cap or 0) - info.knob_used


def policy(name: str) -> SchedulingPolicy:
    return Widening() if name == "widening" else make_policy(name)


def run_sc(name: str, limits: AdmissionLimits | None, cap: int = 8) -> tuple[Counting, object]:
    backend = disagreeing()
    rt = Runtime(backend, scheduler=Scheduler(policy=policy(name), limits=limits))
    result = run_virtual(rt.run(sc_program(branches_per_round=2, cap=cap), question="q?"))
    return backend, result


def test_a_widening_policy_widens_sc_lanes_into_idle_slots_and_keeps_the_cap():
    backend, result = run_sc("widening", AdmissionLimits(max_requests=8))
    assert result.ok and result.knob_used == 8 and len(backend.requests) == 8  # no branch past the cap
    assert backend.peak > 2  # more lanes than the declared fan-out ran at once
    assert backend.peak <= 8


@pytest.mark.parametrize("name,limits", [("fcfs", AdmissionLimits(max_requests=8)),
                                         ("app-fifo", AdmissionLimits(max_requests=8)),
                                         ("certa", AdmissionLimits(max_requests=8)),  # nothing calibrated yet
                                         ("widening", None)])
def test_no_widening_without_a_widening_policy_calibration_or_limits(name, limits):
    backend, result = run_sc(name, limits)
    assert result.ok and len(backend.requests) == 8
    assert backend.peak == 2  # the declared fan-out


def test_added_lanes_end_once_another_program_waits():
    """Slots 4, SC with 2 lanes widens to 4; a 2-request program arrives at t=1.5 and waits; at
    t=2 the added lanes end instead of continuing, so it starts then, not a round later."""
    backend = disagreeing()
    rt = Runtime(backend, scheduler=Scheduler(policy=Widening(), limits=AdmissionLimits(max_requests=4)))

    async def go():
        async def later():
            await asyncio.sleep(1.5)
            return await rt.run(Fan("pair", 1))  # one step of two requests at once
        return await asyncio.gather(rt.run(sc_program(branches_per_round=2, cap=12), question="q?"), later())

    sc, pair = run_virtual(go())
    assert sc.ok and pair.ok and sc.knob_used == 12
    starts = [(round(t, 3), rid) for t, d, rid in backend.log if d == 1]
    t0 = min(t for t, _ in starts)
    pair_starts = [t - t0 for t, rid in starts if rid.startswith(pair.program_id)]
    assert pair_starts == [2.0, 2.0]
    during = [t - t0 for t, rid in starts if not rid.startswith(pair.program_id) and 1.5 <= t - t0 <= 2.5]
    assert len(during) == 2  # at t=2 only the two declared lanes continued beside the waiting pair
    assert backend.peak == 4


def test_elastic_needs_a_looped_fanout():
    class S(State):
        x: int = 0

    g = Graph(S, name="bad")

    @g.step(fanout=2, elastic=True)
    def once(s: S) -> dict:
        return {}

    with pytest.raises(InvalidGraphError, match="does not loop") as info:
        g.compile()
    assert info.value.code == "CT107" and info.value.step == "once"


def _ticket(rid: str, kv: int) -> Ticket:
    return Ticket(rid, ProgramInfo("p", 0.0), 0.0, est_tokens=kv)


def test_ledger_room_counts_slots_and_budgets_in_mean_requests():
    led = Ledger(AdmissionLimits(max_requests=10, kv_tokens=1_000))
    assert led.room() == 10
    led.take(_ticket("a", 100), now=0.0)
    led.take(_ticket("b", 300), now=0.0)
    assert led.room() == 3  # 600 KV tokens free at a mean of 200 per request (the slots would allow 8)
    assert Ledger(AdmissionLimits()).room() == 0


def test_spare_is_zero_while_anything_waits_and_bounded_by_room_keep_and_wanted_work():
    s = Scheduler(policy=Widening(), limits=AdmissionLimits(max_requests=4), clock=lambda: 0.0)
    p = ProgramInfo("p", 0.0, knob_cap=16)
    s.register(p)
    assert s.spare(p) == 4 and s.spare(p, keep=1) == 3
    ts = [s.ticket(f"p-{i}", p) for i in range(5)]
    for t in ts:
        s.submit(t)
    assert len(s.admit()) == 4 and s.spare(p) == 0  # p-4 waits
    s.release(ts[0])
    s.admit()
    s.release(ts[1])
    assert s.spare(p) == 1
    p.knob_used = 14  # 3 in flight and 2 units left to run: nothing more is worth starting
    assert s.spare(p) == 0
    assert Scheduler(limits=AdmissionLimits(max_requests=2)).spare(p) == 0  # FCFS never widens


def test_certa_widens_only_for_work_a_program_likely_still_does():
    """``wanted_requests``: the knob units a program runs with probability >= 1/2, from the stop
    calibration: none before its bin is calibrated; to the next check for a program whose bin
    stops there; check after check while its bin keeps going."""
    pol = CertaSJF(aging=0.0, min_history=2)
    cal = pol.calibration
    for i, (c, stops) in enumerate([(0.9, True), (0.9, True), (0.4, False), (0.4, False)]):
        p = ProgramInfo(f"p{i}", 0.0, knob_cap=16, knob_used=4, certaindex=c)
        cal.point(p)
        if stops:
            cal.finished(p)  # stopped at 4 (below the cap): 4 is a check
        else:
            cal.request(p)  # asked for more past 4
    cal.checks.add(8)
    assert cal.checks == {4, 8} and cal.bins == {9: [2, 0], 4: [0, 2]}
    sure = ProgramInfo("sure", 0.0, knob_cap=16, knob_used=1, certaindex=0.9)
    hover = ProgramInfo("hover", 0.0, knob_cap=16, knob_used=5, certaindex=0.4)
    new = ProgramInfo("new", 0.0, knob_cap=16, knob_used=1, certaindex=0.6)
    assert pol.wanted_requests(sure) == 3  # to the check at 4, where its bin stops
    assert pol.wanted_requests(hover) == 11  # its bin never stops: past 8, to the cap
    assert pol.wanted_requests(new) == 0  # bin 6 not calibrated: no widening
    assert make_policy("certa-nocd").wanted_requests(hover) == 0

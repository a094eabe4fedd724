"""Bounds on work (issue 20): admission order under the heap, sub-program depth, steps, request timeouts."""

from __future__ import annotations

import random

import pytest

from certa.runtime import AdmissionLimits, Scheduler
from certa.runtime.scheduling.policies import make_policy
from certa.runtime.scheduling.queue import key_mode
from certa.runtime.scheduling.scheduler import ProgramInfo, SchedulingPolicy


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def mixed_workload(policy: SchedulingPolicy, seed: int) -> list[str]:
    """A seeded mix of arrivals, fan-outs, releases, cancels, estimate updates and finishes;
    returns every admission (rid) in order."""
    rng, clock = random.Random(seed), Clock()
    s = Scheduler(policy, AdmissionLimits(max_requests=6, max_tokens=900), clock=clock)
    infos: dict[str, ProgramInfo] = {}
    waiting, running, trace = [], [], []
    for tick in range(400):
        clock.t = tick * 0.25
        op = rng.random()
        if op < 0.3 or not infos:
            pid = f"p{tick}"
            infos[pid] = info = ProgramInfo(pid, clock.t, knob_cap=rng.choice([4, 8, None]))
            s.register(info)
            for i in range(rng.randint(1, 5)):  # a fan-out: several tickets at once
                t = s.ticket(f"{pid}-{i}", info, est_tokens=rng.choice([50, 100, 400]))
                s.submit(t)
                waiting.append(t)
        elif op < 0.45:
            info = infos[rng.choice(sorted(infos))]  # a certaindex point moved its estimate
            info.knob_used += 1
            info.certaindex = rng.random()
            info.tokens_per_step = rng.choice([50.0, 200.0])
            info.est_remaining_tokens = rng.choice([0.0, 100.0, 2000.0])
            s.rekey(info)
        elif op < 0.55 and waiting:
            t = waiting.pop(rng.randrange(len(waiting)))  # a cancelled request
            s.discard(t)
        elif op < 0.65:
            pid = rng.choice(sorted(infos))  # a program finishes
            info = infos.pop(pid)
            info.tokens, info.knob_used = rng.randint(100, 3000), max(1, info.knob_used)
            for t in [t for t in waiting if t.program is info]:
                waiting.remove(t)
                s.discard(t)
            s.unregister(pid)
        elif running:
            s.release(running.pop(rng.randrange(len(running))))
        got = s.admit()
        for t in got:
            waiting.remove(t)
        running += got
        trace += [t.rid for t in got]
    return trace


@pytest.mark.parametrize("name", ["fcfs", "app-fifo", "certa", "certa-nocd", "lpm"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_heap_admission_keeps_the_policys_order(name, seed):
    fast, reference = make_policy(name), make_policy(name)
    reference.key_stability = "dynamic"  # the old path: sort every waiting ticket by the policy's key
    assert key_mode(reference) == "dynamic"
    assert key_mode(fast) == {"lpm": "dynamic", "certa": "program", "certa-nocd": "program"}.get(name, "ticket")
    got, want = mixed_workload(fast, seed), mixed_workload(reference, seed)
    assert len(want) > 100 and got == want


def test_a_subclass_that_overrides_key_is_sorted_not_heaped():
    class Newest(SchedulingPolicy):
        def key(self, ticket, now):
            return (-ticket.enqueued, ticket.seq)

    assert key_mode(Newest()) == "dynamic" and key_mode(SchedulingPolicy()) == "ticket"
    clock = Clock()
    s = Scheduler(Newest(), AdmissionLimits(max_requests=1), clock=clock)
    info = ProgramInfo("p", 0.0)
    s.register(info)
    for i in range(3):
        clock.t = float(i)
        s.submit(s.ticket(f"r{i}", info))
    assert [t.rid for t in s.admit()] == ["r2"]

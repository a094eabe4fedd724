"""Scheduler policies: gang, SJF, aging, admission limits, abort, determinism, Runtime integration."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from certa.runtime import AdmissionLimits, Knob, Program, Runtime, ScriptedBackend, Scheduler, Threshold
from certa.runtime.errors import ConfigError
from certa.runtime.scheduling.calibration import SPECULATIVE
from certa.runtime.scheduling.policies import POLICIES, CertaSJF, make_policy, remaining_steps
from certa.runtime.scheduling.scheduler import ProgramInfo, SchedulingPolicy, Ticket


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def sched(policy: str | SchedulingPolicy, clock: Clock | None = None, **limits) -> Scheduler:
    pol = make_policy(policy) if isinstance(policy, str) else policy
    return Scheduler(pol, AdmissionLimits(**limits), clock=clock or Clock())


def submit(s: Scheduler, info: ProgramInfo, n: int, est: int = 0) -> list[Ticket]:
    ts = [s.ticket(f"{info.program_id}-{i}", info, est_tokens=est) for i in range(n)]
    for t in ts:
        s.submit(t)
    return ts


def rids(ts) -> list[str]:
    return [t.rid for t in ts]


def test_make_policy_names_and_errors():
    assert set(POLICIES) == {"fcfs", "lpm", "app-fifo", "certa", "certa-nocd"}
    for name in POLICIES:
        assert make_policy(name).name == name
    with pytest.raises(ConfigError):
        make_policy("sjf")
    with pytest.raises(ConfigError):
        make_policy("certa", bogus=1)


@pytest.mark.parametrize("policy", ["app-fifo", "certa", "certa-nocd"])
def test_gang_admits_a_programs_requests_together(policy):
    s = sched(policy, max_requests=3)
    a, b = ProgramInfo("a", 0.0, knob_cap=2), ProgramInfo("b", 1.0, knob_cap=4)
    for i in range(3):  # interleaved arrival: a0 b0 a1 b1 a2 b2
        for p in (a, b):
            s.submit(s.ticket(f"{p.program_id}{i}", p))
    first = s.admit()
    assert rids(first) == ["a0", "a1", "a2"]
    for t in first:
        s.release(t)
    assert rids(s.admit()) == ["b0", "b1", "b2"]


def test_fcfs_interleaves_where_gang_does_not():
    s = sched("fcfs", max_requests=3)
    a, b = ProgramInfo("a", 0.0), ProgramInfo("b", 0.0)
    for i in range(3):
        for p in (a, b):
            s.submit(s.ticket(f"{p.program_id}{i}", p))
    assert rids(s.admit()) == ["a0", "b0", "a1"]


def test_gang_larger_than_limits_is_admitted_in_part_and_keeps_its_place():
    s = sched("certa", max_requests=2)
    big = ProgramInfo("big", 0.0, est_remaining_tokens=10.0)
    other = ProgramInfo("other", 0.0, est_remaining_tokens=1000.0)
    submit(s, other, 1)
    ts = submit(s, big, 4)
    got = s.admit()
    assert rids(got) == ["big-0", "big-1"]
    s.release(got[0])
    assert rids(s.admit()) == ["big-2"]  # its gang is running: the rest joins before "other"
    assert s.queue_depth == 2 and ts[3] in s.pending("big")


def test_sjf_orders_programs_by_estimated_remaining_work():
    pol = make_policy("certa", aging=0.0)
    infos = [ProgramInfo(n, 0.0, est_remaining_tokens=r) for n, r in (("p500", 500.0), ("p50", 50.0), ("p5k", 5e3))]
    ts = [Ticket(f"{p.program_id}-t", p, 0.0, seq=i) for i, p in enumerate(infos)]
    assert rids(pol.order(ts, 0.0)) == ["p50-t", "p500-t", "p5k-t"]


def test_sjf_estimate_before_any_certaindex_uses_cap_times_history():
    pol = CertaSJF(aging=0.0, prior_tokens_per_step=100.0)
    short, long = ProgramInfo("s", 0.0, knob_cap=2), ProgramInfo("l", 0.0, knob_cap=8)
    assert pol.remaining(short) == 200.0 and pol.remaining(long) == 800.0
    pol.observe_finish(ProgramInfo("done", 0.0, tokens=3000, knob_used=6))
    assert pol.remaining(short) == 1000.0  # history: 500 tokens per step


def test_nocd_ignores_certaindex_estimates():
    nocd, certa = make_policy("certa-nocd", aging=0.0), make_policy("certa", aging=0.0)
    sure = ProgramInfo("sure", 0.0, knob_used=4, knob_cap=16, tokens_per_step=100.0, certaindex=1.0,
                       est_remaining_tokens=0.0)
    unsure = ProgramInfo("unsure", 0.0, knob_used=8, knob_cap=16, tokens_per_step=100.0, certaindex=0.1,
                         est_remaining_tokens=800.0)
    ts = [Ticket("sure-0", sure, 0.0, seq=0), Ticket("unsure-0", unsure, 0.0, seq=1)]
    assert rids(certa.order(ts, 0.0)) == ["sure-0", "unsure-0"]
    assert rids(nocd.order(ts, 0.0)) == ["unsure-0", "sure-0"]  # by progress only: 8 left vs 12 left


def test_remaining_steps_follows_certaindex_and_threshold():
    class P(Program):
        knob = Knob("branches", cap=16)

        async def execute(self, ctx):  # pragma: no cover
            return False

    p, pol = P(), Threshold(0.6, detect_at=4, every=4)
    assert remaining_steps(pol, p) == 16  # no certaindex yet: until the cap
    p.knob_used = 2
    p.trajectory.append(type("Pt", (), {"value": 0.9})())
    assert remaining_steps(pol, p) == 2  # passes already: stops at the detection step
    assert pol.expected_remaining(p) == 2  # the math is Threshold's own: a policy wrapping one gets it too
    p.trajectory[-1].value = 0.0
    assert remaining_steps(pol, p) == 14  # hopeless so far: 2 to the check + all 12 after
    assert remaining_steps(None, p) == 14


def run_stream(aging: float, horizon: int = 60, *, aging_pace: float = 0.25, short_tokens: int = 0) -> int | None:
    """A long program queued behind a never-ending stream of short ones, one slot.

    ``short_tokens``: each short program decodes that many tokens and finishes (the policy sees
    the work served; 0: it never reports any). Returns the tick at which the long program got
    the slot (None = starved)."""
    clock = Clock()
    s = sched(make_policy("certa", aging=aging, aging_pace=aging_pace), clock, max_requests=1)
    long = ProgramInfo("long", 0.0, est_remaining_tokens=5000.0)
    s.register(long)
    submit(s, long, 1)
    running: Ticket | None = None
    for tick in range(horizon):
        clock.t = float(tick)
        short = ProgramInfo(f"s{tick}", clock.t, est_remaining_tokens=100.0)
        s.register(short)
        submit(s, short, 1)
        if running is not None:
            s.release(running)
            if short_tokens:
                running.program.tokens = short_tokens
                s.unregister(running.program.program_id)
        got = s.admit()
        running = got[0] if got else running
        if running is not None and running.program is long:
            return tick
    return None


def test_aging_lets_a_long_program_finish_under_a_stream_of_short_ones():
    assert run_stream(aging=0.0) is None  # pure SJF starves it
    tick = run_stream(aging=200.0)
    assert tick is not None and tick <= 30  # 4900 tokens of head start / 200 per second ≈ 25 s


def test_paced_aging_credits_the_fair_share_served_while_a_program_waited():
    assert run_stream(0.0, 300, aging_pace=0.0, short_tokens=300) is None  # no credit at all: pure SJF starves it
    # three programs in the system (the long one, the short one running, the next): each finished
    # short program moves the virtual clock 300 / 3 tokens, so short program k's key is
    # 100 + pace * 100 * k and passes the long program's 5000 once pace * k > 49
    assert 49 <= run_stream(0.0, aging_pace=1.0, short_tokens=300) <= 51
    assert 195 <= run_stream(0.0, 300, aging_pace=0.25, short_tokens=300) <= 198
    pol = make_policy("certa", aging=0.0)  # aging_pace 0.25 by default
    early, other = ProgramInfo("early", 0.0, est_remaining_tokens=1000.0), ProgramInfo("other", 0.0)
    pol.observe_request(early)
    pol.observe_request(other)
    early.tokens = 400  # decoded with two programs in the system: the virtual clock moves 400 / 2
    pol.observe_progress(early)
    late = ProgramInfo("late", 1.0, est_remaining_tokens=500.0)
    pol.observe_request(late)
    assert pol.fair_share == pytest.approx(200.0)
    assert pol.program_key(late) - pol.program_key(early) == pytest.approx(500 - 1000 + 0.25 * 200)
    pol.observe_finish(early)  # finished programs leave the clock's divisor
    other.tokens = 300
    pol.observe_progress(other)
    assert pol.fair_share == pytest.approx(200.0 + 300 / 2)  # other and late remain


def run_stream_with_backfill(aging: float, reserve_after: float, horizon: int = 120) -> tuple[int | None, int]:
    """A long 2-request gang (500 tokens each) under ``inflight_tokens=1000`` while a short program
    (one 300-token request, running 3 ticks) arrives every tick: the long gang's second request
    never finds 500 free unless later ones stop being backfilled into what frees up.

    Returns (tick at which the whole long gang was admitted or None, short requests admitted
    past it while it waited: backfill)."""
    clock = Clock()
    s = Scheduler(make_policy("certa", aging=aging), AdmissionLimits(inflight_tokens=1000), clock=clock,
                  reserve_after=reserve_after)
    long = ProgramInfo("long", 0.0, est_remaining_tokens=5000.0)
    s.register(long)
    hog = ProgramInfo("hog", 0.0, est_remaining_tokens=1.0)  # holds the whole budget for the first 3 ticks
    s.register(hog)
    running: list[Ticket] = submit(s, hog, 1, est=1000)
    assert s.admit() == running
    ends: dict[str, int] = {running[0].rid: 3}
    submit(s, long, 2, est=500)
    backfilled = 0
    for tick in range(horizon):
        clock.t = float(tick)
        short = ProgramInfo(f"s{tick}", clock.t, est_remaining_tokens=100.0)
        s.register(short)
        submit(s, short, 1, est=300)
        for done in [t for t in running if ends[t.rid] <= tick] + [None]:
            if done is not None:  # each release admits at once, as the async path does
                running.remove(done)
                s.release(done)
            got = s.admit()
            if s.pending("long"):  # shorts that arrived after 24.5 s queue behind it (key 100 + 200·arrival)
                backfilled += sum(1 for t in got if t.program.arrival > 24.5)
            for t in got:
                ends[t.rid] = tick + 3
            running += got
            assert sum(t.est_tokens for t in running) <= 1000
        if not s.pending("long"):
            return tick, backfilled
    return None, backfilled


def test_aging_bound_holds_with_backfill():
    assert run_stream_with_backfill(aging=0.0, reserve_after=5.0)[0] is None  # pure SJF starves it
    unbounded, _ = run_stream_with_backfill(aging=200.0, reserve_after=math.inf)
    assert unbounded is None  # unbounded backfill starves it too, although it is the head from 25 s on
    tick, backfilled = run_stream_with_backfill(aging=200.0, reserve_after=5.0)
    assert tick is not None and tick <= 25 + 5 + 3 + 1  # aging + reserve_after + one request's run + a tick
    assert backfilled > 0  # short requests used the room the long gang could not, until its reservation
    strict, none = run_stream_with_backfill(aging=200.0, reserve_after=0.0)  # head-of-line: no backfill at all
    assert strict is not None and strict <= tick and none == 0


def test_a_gang_that_does_not_fit_whole_starts_in_the_free_slots():
    s = sched("certa", max_requests=4)
    busy, head = ProgramInfo("busy", 0.0, est_remaining_tokens=9e3), ProgramInfo("head", 0.0, est_remaining_tokens=10.0)
    first = submit(s, busy, 2)
    assert rids(s.admit()) == rids(first)
    submit(s, head, 4)
    assert rids(s.admit()) == ["head-0", "head-1"]  # head-of-line admitted none: 2 slots sat idle
    s.release(first[0])
    assert rids(s.admit()) == ["head-2"]


def test_backfill_fills_what_the_head_cannot_use_until_its_reservation():
    clock = Clock()
    s = sched("certa", clock, inflight_tokens=1000)
    hog = ProgramInfo("hog", 0.0, est_remaining_tokens=1.0)
    head = ProgramInfo("head", 0.0, est_remaining_tokens=10.0)
    small = [ProgramInfo(f"small{i}", 0.0, est_remaining_tokens=500.0) for i in range(3)]
    (hold,) = submit(s, hog, 1, est=700)
    assert rids(s.admit()) == ["hog-0"]
    submit(s, head, 1, est=400)
    submit(s, small[0], 1, est=200)
    assert rids(s.admit()) == ["small0-0"]  # the head needs 400 of the 300 free: the 200 behind it go
    clock.t = 6.0  # the head has been blocked past reserve_after (5 s): its room is reserved
    s.release(hold)
    submit(s, small[1], 1, est=100)
    assert rids(s.admit()) == ["head-0", "small1-0"]
    submit(s, small[2], 1, est=500)
    assert rids(s.admit()) == []


def makespan(reserve_after: float, seed: int = 5) -> int:
    """Ticks to serve a fixed set of gangs of mixed sizes under a token cap (each request: 4 ticks)."""
    rng, clock = random.Random(seed), Clock()
    s = Scheduler(make_policy("certa", aging=50.0), AdmissionLimits(inflight_tokens=1200), clock=clock,
                  reserve_after=reserve_after)
    for i in range(40):
        p = ProgramInfo(f"p{i}", 0.0, est_remaining_tokens=float(rng.randint(1, 50) * 100))
        s.register(p)
        submit(s, p, rng.choice([1, 2, 4]), est=rng.choice([100, 300, 500]))
    running: dict[str, tuple[Ticket, int]] = {}
    tick = 0
    while s.queue_depth or running:
        clock.t = float(tick)
        for rid, (t, end) in list(running.items()):
            if end <= tick:
                del running[rid]
                s.release(t)
        for t in s.admit():
            running[t.rid] = (t, tick + 4)
        tick += 1
    return tick


def test_backfill_uses_idle_capacity():
    assert makespan(reserve_after=5.0) < makespan(reserve_after=0.0)  # work-conserving beats head-of-line


def test_admission_limits_are_never_exceeded():
    rng = random.Random(7)
    lim = dict(max_requests=5, inflight_tokens=400, kv_tokens=900)
    s = sched("certa", **lim)
    infos = [ProgramInfo(f"p{i}", float(i), prefix_tokens=rng.choice([0, 50]), est_remaining_tokens=rng.random() * 1e3)
             for i in range(12)]
    for p in infos:
        s.register(p)
    running: list[Ticket] = []
    for step in range(300):
        if rng.random() < 0.6:
            p = rng.choice(infos)
            s.submit(s.ticket(f"r{step}", p, est_tokens=rng.randint(10, 120)))
        if running and rng.random() < 0.5:
            s.release(running.pop(rng.randrange(len(running))))
        running += s.admit()
        assert s.inflight == len(running) <= lim["max_requests"]
        assert len(running) <= 1 or sum(t.est_tokens for t in running) <= lim["inflight_tokens"]
        assert len(running) <= 1 or s.kv_in_use <= lim["kv_tokens"]


def test_kv_budget_evicts_idle_programs_prefixes_first():
    evicted: list[str] = []
    s = Scheduler(make_policy("fcfs"), AdmissionLimits(kv_tokens=1000), clock=Clock(), on_evict=evicted.append)
    idle, busy, new = (ProgramInfo(n, 0.0, prefix_tokens=300) for n in ("idle", "busy", "new"))
    for p in (idle, busy, new):
        s.register(p)
    t_idle = submit(s, idle, 1, est=100)[0]
    submit(s, busy, 1, est=100)
    assert len(s.admit()) == 2 and s.kv_in_use == 800
    s.release(t_idle)  # "idle" keeps its prefix resident while it thinks
    assert s.kv_in_use == 700
    submit(s, new, 1, est=100)
    assert rids(s.admit()) == ["new-0"]  # needs 400: the idle prefix goes, the busy one stays
    assert evicted == ["idle"] and not idle.prefix_resident and busy.prefix_resident


def test_lpm_prefers_cached_prefixes_and_falls_back_to_fcfs():
    pol = make_policy("lpm")
    a, b = ProgramInfo("a", 0.0), ProgramInfo("b", 0.0)
    ts = [Ticket("a0", a, 0.0, seq=0, cached=0), Ticket("b0", b, 1.0, seq=1, cached=500)]
    assert rids(pol.order(ts, 2.0)) == ["b0", "a0"]
    many = [Ticket(f"x{i}", a, float(i), seq=i, cached=i) for i in range(200)]
    assert pol.order(many, 0.0)[0].rid == "x0"  # > 128 waiting: FCFS, as SGLang does


def test_priority_and_sglang_style_ranks():
    pol = make_policy("certa", aging=0.0)
    a = ProgramInfo("a", 0.0, est_remaining_tokens=10.0)
    b = ProgramInfo("b", 0.0, est_remaining_tokens=900.0)
    ts = [Ticket("a0", a, 0.0, seq=0), Ticket("a1", a, 0.0, seq=1), Ticket("b0", b, 0.0, seq=2)]
    assert pol.rank(ts, 0.0) == {"a0": 1, "a1": 1, "b0": 0}  # SGLang default: higher runs first; gang = one rank
    assert pol.rank(ts, 0.0, low_first=True) == {"a0": 0, "a1": 0, "b0": 1}
    assert pol.priority(ts[0], 0.0) < pol.priority(ts[2], 0.0)  # certa's convention: lower = sooner


def test_admission_is_deterministic():
    def trace() -> list[str]:
        rng = random.Random(3)
        s = sched("certa", max_requests=3)
        infos = [ProgramInfo(f"p{i}", float(i), est_remaining_tokens=float(rng.randint(1, 9) * 100)) for i in range(6)]
        out, running = [], []
        for step in range(60):
            s.submit(s.ticket(f"r{step}", rng.choice(infos)))
            if running and step % 2:
                s.release(running.pop(0))
            got = s.admit()
            running += got
            out += rids(got)
        return out

    assert trace() == trace()


async def test_abort_frees_capacity_at_once():
    s = Scheduler(make_policy("certa"), AdmissionLimits(max_requests=1))
    a, b = ProgramInfo("a", 0.0), ProgramInfo("b", 0.0)
    hold = asyncio.Event()
    order: list[str] = []

    async def use(info: ProgramInfo, rid: str) -> None:
        t = s.ticket(rid, info)
        await s.acquire(t)
        order.append(rid)
        try:
            await hold.wait()
        finally:
            s.release(t)

    ta = asyncio.ensure_future(use(a, "a0"))
    await asyncio.sleep(0.01)
    tb = asyncio.ensure_future(use(b, "b0"))
    await asyncio.sleep(0.01)
    assert order == ["a0"] and s.queue_depth == 1
    ta.cancel()  # early exit: the runtime cancels the program's in-flight request
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["a0", "b0"] and s.inflight == 1
    waiting = asyncio.ensure_future(use(a, "a1"))
    await asyncio.sleep(0.01)
    waiting.cancel()  # cancelled while queued: it leaves the queue
    await asyncio.sleep(0)
    assert s.queue_depth == 0
    hold.set()
    await tb
    assert s.inflight == 0


class Fan(Program):
    """``fan`` parallel requests per step, ``knob.cap`` steps."""

    def __init__(self, tag: str, steps: int, fan: int = 2) -> None:
        super().__init__()
        self.knob = Knob("iterations", cap=steps)
        self.tag, self.fan = tag, fan
        self.state = {"answer": None}

    async def execute(self, ctx) -> bool:
        await asyncio.gather(*[ctx.gen(f"{self.tag} s{self.knob_used} b{i}", max_tokens=8) for i in range(self.fan)])
        self.knob_used += 1
        return True


async def run_three(policy: str) -> list[str]:
    """A 'hog' holds both slots while 'long' (4 steps) and then 'short' (1 step) queue up."""
    backend = ScriptedBackend(responses=lambda r: "a b c", latency=lambda r: 0.3 if "hog" in r.prompt else 0.002)
    rt = Runtime(backend, scheduler=Scheduler(policy=make_policy(policy), limits=AdmissionLimits(max_requests=2)))

    async def later(prog: Program, delay: float):
        await asyncio.sleep(delay)
        return await rt.run(prog)

    results = await asyncio.gather(rt.run(Fan("hog", 1)), later(Fan("long", 4), 0.05), later(Fan("short", 1), 0.1))
    assert all(r.ok for r in results)
    assert rt.scheduler.inflight == 0 and rt.scheduler.queue_depth == 0
    return [r.prompt.split()[0] for r in backend.requests]


async def test_runtime_programs_under_certa_scheduler():
    order = await run_three("certa")
    assert order[:2] == ["hog", "hog"]
    assert order[2:4] == ["short", "short"]  # SJF: the 1-step program overtakes the 4-step one
    assert order[4:] == ["long"] * 8  # gang: a program's requests go together
    assert (await run_three("fcfs"))[2:4] == ["long", "long"]  # FCFS keeps arrival order


class Parent(Program):
    """One step that runs two Fan sub-programs through ctx.call."""

    def __init__(self) -> None:
        super().__init__()
        self.knob = Knob("iterations", cap=1)
        self.state = {"answer": None}

    async def execute(self, ctx) -> bool:
        await asyncio.gather(ctx.call(Fan("child-a", 1)), ctx.call(Fan("child-b", 1)))
        self.knob_used += 1
        return False


async def test_sub_programs_schedule_in_their_root_programs_gang():
    seen: list[str] = []

    class Spy(CertaSJF):
        def key(self, ticket, now):
            seen.append(ticket.program.program_id)
            return super().key(ticket, now)

    backend = ScriptedBackend(responses=lambda r: "a b", latency=0.002)
    rt = Runtime(backend, scheduler=Scheduler(policy=Spy(), limits=AdmissionLimits(max_requests=1)))
    result = await rt.run(Parent())
    assert result.ok and result.tokens.main == 8  # 2 children x 2 branches x 2 tokens, merged into the root
    assert seen and set(seen) == {result.program_id}  # every ticket is the root program's gang
    assert rt.scheduler.programs == {} and rt.scheduler.inflight == 0


async def test_the_runtime_reports_a_programs_prompt_as_its_resident_prefix():
    seen: list[tuple[int, bool]] = []

    class Spy(CertaSJF):
        def key(self, ticket, now):
            seen.append((ticket.program.prefix_tokens, ticket.program.prefix_resident))
            return super().key(ticket, now)

    backend = ScriptedBackend(responses=lambda r: "a b", latency=0.002)
    rt = Runtime(backend, scheduler=Scheduler(policy=Spy(), limits=AdmissionLimits(kv_tokens=10_000)))
    result = await rt.run(Fan("some question words", 3))
    assert result.ok and seen[0] == (0, False)  # unknown before the first result
    assert any(n > 0 and resident for n, resident in seen[2:])  # later tickets know the prompt, resident in KV
    assert rt.scheduler.ledger.prefix_kv == 0  # dropped when the program ended


class SortedLPM(SchedulingPolicy):
    """LPM as it was before its fallback had a heap: every admission sorts every waiting ticket."""

    name = "lpm-sorted"

    def key(self, ticket, now):
        return (-ticket.cached, ticket.enqueued, ticket.seq)

    def order(self, tickets, now):
        tickets = list(tickets)
        if len(tickets) > 128:
            return sorted(tickets, key=lambda t: (t.enqueued, t.seq))
        return sorted(tickets, key=lambda t: self.key(t, now))


def lpm_trace(policy: SchedulingPolicy, seed: int) -> tuple[list[str], int]:
    """Bursts of fan-outs (the queue passes 128 and drains below it again) from programs whose
    prefixes become resident and are evicted under a KV budget; returns (admissions, most waiting)."""
    rng, clock = random.Random(seed), Clock()
    s = Scheduler(policy, AdmissionLimits(max_requests=8, kv_tokens=3000), clock=clock)
    infos = [ProgramInfo(f"p{i}", 0.0, prefix_tokens=rng.choice([0, 200, 400, 800])) for i in range(30)]
    for p in infos:
        s.register(p)
    running: list[Ticket] = []
    trace, most = [], 0
    for tick in range(600):
        clock.t = tick * 0.1
        if (tick // 100) % 2 == 0 and rng.random() < 0.7:  # bursts on, then off
            p = rng.choice(infos)
            for _ in range(rng.randint(1, 6)):
                s.submit(s.ticket(f"r{tick}-{len(trace)}-{rng.random():.6f}", p, est_tokens=rng.choice([50, 100]),
                                  kv_tokens=rng.choice([50, 150])))
        if running and rng.random() < 0.8:
            s.release(running.pop(rng.randrange(len(running))))
        got = s.admit()
        running += got
        trace += [t.rid for t in got]
        most = max(most, s.queue_depth)
    return trace, most


@pytest.mark.parametrize("seed", [0, 1])
def test_lpm_fallback_heap_keeps_the_sorted_order(seed):
    from certa.runtime.scheduling.policies import LPM

    sorted_sizes: list[int] = []

    class Spy(LPM):
        def order(self, tickets, now):
            tickets = list(tickets)
            sorted_sizes.append(len(tickets))
            return super().order(tickets, now)

    got, most = lpm_trace(Spy(), seed)
    want, _ = lpm_trace(SortedLPM(), seed)
    assert most > 128 and len(want) > 300 and got == want  # the fallback was used, and drained back to LPM
    assert sorted_sizes and max(sorted_sizes) <= 128  # past 128 waiting: FCFS from a heap, no sort


def test_stop_calibration_learns_that_programs_hovering_below_the_threshold_continue():
    pol = CertaSJF(aging=0.0, min_history=3)
    s = Scheduler(pol, AdmissionLimits(max_requests=1), clock=Clock())

    def point(p: ProgramInfo, knob: int, c: float) -> None:
        p.knob_used, p.certaindex, p.tokens_per_step, p.est_remaining_tokens = knob, c, 100.0, 470.0
        s.rekey(p)  # the Runtime does this after each certaindex point

    for i in range(3):  # three programs stop at knob 4 with certaindex 0.9: 4 is a check position
        p = ProgramInfo(f"e{i}", 0.0, knob_cap=16)
        s.register(p)
        point(p, 3, 0.9)
        s.ticket(f"e{i}-3", p)  # knob 3 is no check (no program stopped there): nothing learned
        point(p, 4, 0.9)
        p.tokens = 400
        s.unregister(f"e{i}")
    for i in range(3):  # three hover at 0.5 at the check and run on to the cap
        p = ProgramInfo(f"h{i}", 0.0, knob_cap=16)
        s.register(p)
        point(p, 4, 0.5)
        s.ticket(f"h{i}-next", p)  # it asked for more: continued past the check
        point(p, 16, 0.5)
        p.tokens = 1600
        s.unregister(f"h{i}")
    assert pol.calibration.checks == {4} and pol.calibration.bins == {9: [3, 0], 5: [0, 3]}
    hover = ProgramInfo("hover", 0.0, knob_cap=16, knob_used=4, certaindex=0.5, tokens_per_step=100.0,
                        est_remaining_tokens=470.0)  # the threshold's own estimate: ~4.7 steps left
    assert pol.remaining(hover) == 100.0 * 12  # calibrated: no check ahead, it continues: to the cap
    fresh = ProgramInfo("fresh", 0.0, knob_cap=16)  # no point yet: the finished programs' mean steps (10)
    assert pol.remaining(fresh) == 100.0 * 10
    ts = [Ticket("hover-0", hover, 0.0, seq=0), Ticket("fresh-0", fresh, 0.0, seq=1)]
    assert rids(pol.order(ts, 0.0)) == ["fresh-0", "hover-0"]  # uncalibrated, 470 < 1000 put hover first


def _calibrated_to_stop_at_4(s: Scheduler) -> ProgramInfo:
    """Three programs stop at knob 4 with certaindex 1.0 (calibration: 4 is a check where that bin
    stops); returns a fourth, ``sure``, registered and not started."""
    for i in range(3):
        p = ProgramInfo(f"e{i}", 0.0, knob_cap=16)
        s.register(p)
        p.knob_used, p.certaindex, p.tokens_per_step, p.est_remaining_tokens = 4, 1.0, 100.0, 0.0
        s.rekey(p)
        s.unregister(f"e{i}")  # stopped at 4
    sure = ProgramInfo("sure", 0.0, knob_cap=16)
    s.register(sure)
    return sure


def test_requests_past_a_likely_stop_wait_behind_other_work():
    """An SC lane starting branch 5 while branches 2-4 run, in a program that will stop at 4,
    is probably wasted: with ``speculative=True`` it waits until nothing else does (then it may run)."""
    pol = CertaSJF(aging=0.0, min_history=3, speculative=True)
    s = Scheduler(pol, AdmissionLimits(max_requests=4), clock=Clock())
    sure = _calibrated_to_stop_at_4(s)
    running = submit(s, sure, 3)
    assert s.admit() == running
    sure.knob_used, sure.certaindex, sure.tokens_per_step, sure.est_remaining_tokens = 1, 1.0, 100.0, 0.0
    s.rekey(sure)
    lane = submit(s, sure, 1)  # knob 1 + 3 in flight reach the check at 4: this one is speculative
    other = ProgramInfo("other", 1.0, knob_cap=16)
    s.register(other)
    submit(s, other, 2)
    assert rids(s.admit()) == ["other-0"]  # one free slot: the other program's work first
    # the mark is for requests waiting for admission only: an engine ordering the ones it was
    # handed (its own queue, preemption victims) keys sure's branches, which decide its stop, as usual
    assert pol.key(lane[0], 0.0)[0] is True and pol.key(running[0], 0.0)[0] is False
    assert rids(pol.order(running + [s.lookup("other-0")], 0.0))[-1] == "other-0"
    # a backend priority (SGLang) is computed once, as a request is submitted: it carries the mark
    assert pol.priority(Ticket("sure-new", sure, 0.0), 0.0) >= SPECULATIVE
    s.release(running[0])
    sure.knob_used = 2
    s.rekey(sure)
    assert rids(s.admit()) == ["other-1"]
    s.release(running[1])
    assert rids(s.admit()) == [lane[0].rid]  # nothing else waits: it may run
    assert CertaSJF().speculative and not CertaSJF(use_certaindex=False).speculative  # certa's default


def test_an_engine_queues_a_request_past_a_likely_stop_behind_other_work_until_the_check():
    """Engines that order their own queue with the policy (the simulator's, the contention backend)
    stamp each request as it arrives (``SchedulingPolicy.stamp``): one that was past a likely stop
    then waits behind other programs' requests until its program reaches that check; the branches
    that decide the stop, stamped before, never are."""
    pol = CertaSJF(aging=0.0, min_history=3, speculative=True)
    s = Scheduler(pol, AdmissionLimits(max_requests=8), clock=Clock())
    sure = _calibrated_to_stop_at_4(s)
    deciding = [Ticket(f"sure-eng-{i}", sure, 0.0, seq=i) for i in range(3)]
    for t in deciding:
        pol.stamp(t)  # no point yet: needed
    submit(s, sure, 3)
    assert len(s.admit()) == 3
    sure.knob_used, sure.certaindex, sure.tokens_per_step, sure.est_remaining_tokens = 1, 1.0, 100.0, 0.0
    s.rekey(sure)  # knob 1 with 3 in flight: they reach the check at 4
    lane = Ticket("sure-eng-3", sure, 0.0, seq=3)
    pol.stamp(lane)
    other = ProgramInfo("other", 5.0, knob_cap=16, tokens_per_step=100.0, est_remaining_tokens=5000.0)
    s.register(other)
    late = Ticket("other-eng-0", other, 5.0, seq=4)
    pol.stamp(late)
    assert lane.past_check == 4 and all(t.past_check is None for t in deciding + [late])
    assert rids(pol.order([lane, late, *deciding], 0.0)) == [*rids(deciding), "other-eng-0", "sure-eng-3"]
    sure.knob_used = 4  # it reached the check and goes on: the lane is needed now
    s.rekey(sure)
    assert rids(pol.order([lane, late], 0.0)) == ["sure-eng-3", "other-eng-0"]
    fcfs = SchedulingPolicy()
    plain = Ticket("x", sure, 0.0)
    fcfs.stamp(plain)
    assert plain.past_check is None and not CertaSJF(speculative=False).key(lane, 0.0)[0]


def test_limits_are_immutable_and_replacing_them_switches_admission():
    # the ledger reads `unlimited` once per limits object (not per request): limits cannot be
    # edited in place, and assigning new ones takes effect on the next ticket
    import dataclasses
    s = Scheduler(clock=lambda: 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.limits.max_requests = 1  # type: ignore[misc]
    info = ProgramInfo("p", 0.0)
    s.register(info)
    first = s.ticket("p:0", info)
    assert s.unlimited and s.admit_now(first)
    s.limits = AdmissionLimits(max_requests=1)
    assert not s.unlimited and not s.admit_now(s.ticket("p:1", info))
    s.limits = AdmissionLimits()
    assert s.admit_now(s.ticket("p:2", info))

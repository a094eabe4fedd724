"""Scheduler cost per request: N Self-Consistency programs behind ``max_requests`` on the scripted backend.

Each program fans out 4 branches a round (cap 8, Threshold(0.9) at 4); the scripted backend
answers at once, so nearly every request waits in the scheduler's queue and the time measured
is admission's own. Scheduler time is the wall time spent inside the Scheduler's methods
(``admit``, ``release``, ``ticket``, ``discard``, ``rekey``, ``register``, ``unregister``;
outermost calls only), divided by the requests the backend saw. Issue 20 measured 1.74 ms per
request at 1,000 programs (fcfs) when admission re-sorted every waiting ticket per request;
the heap (``certa.runtime.scheduling.queue``) keeps it flat in N. LPM sorted every waiting
ticket on every admission until issue 19 gave its FCFS fallback (> 128 waiting) a heap of its
own: 1.14-1.22 ms per request at 1,000 programs before, 0.030-0.038 ms after (0.07-0.09 and
0.04-0.05 ms at 125; shared 2-core box, two runs each, ``--max-requests 64``).

    python benchmarks/admission.py --json out/admission.json [--programs 125,1000] [--policies fcfs,certa]

Writes ``{"config", "results": [{policy, programs, requests, wall_s, scheduler_s,
scheduler_ms_per_request}]}``. Not a timed test (tests/test_load.py holds the < 0.2 ms bound).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from collections import Counter

import certa as ct
from certa.runtime.scheduling.policies import make_policy

METHODS = ("admit", "release", "ticket", "discard", "rekey", "register", "unregister")


class SC(ct.State):
    question: str
    answers: ct.Appended[list[str]] = []


def sc_program() -> ct.CompiledGraph:
    g = ct.Graph(SC, knob=ct.Knob("branches", cap=8), name="sc")

    @g.step(fanout=4)
    async def sample(s: SC, ctx: ct.Context):
        out = await ctx.gen(s.question, temperature=0.7, max_tokens=64)
        return {"answers": [out.text.split()[-1]]}

    @g.certaindex
    def agreement(s: SC) -> float:
        return Counter(s.answers).most_common(1)[0][1] / len(s.answers) if s.answers else 0.0

    g.answer(lambda s: Counter(s.answers).most_common(1)[0][0] if s.answers else None)
    g.loop("sample")
    return g.compile(policy=ct.Threshold(0.9, detect_at=4))


class TimedScheduler(ct.Scheduler):
    """Sums the wall time spent inside the scheduler's own methods (outermost calls only)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.spent, self._depth = 0.0, 0
        for name in METHODS:
            setattr(self, name, self._timed(getattr(self, name)))

    def _timed(self, method):
        def wrapper(*a, **kw):
            self._depth += 1
            t0 = time.perf_counter() if self._depth == 1 else None
            try:
                return method(*a, **kw)
            finally:
                self._depth -= 1
                if t0 is not None:
                    self.spent += time.perf_counter() - t0
        return wrapper


def respond(req) -> str:
    i = int(req.prompt[1:])  # every 5th program agrees and exits early; the rest run to the cap
    return f"so the answer is {i if i % 5 == 0 else i + req.branch % 3}"


async def measure(policy: str, n: int, max_requests: int) -> dict:
    sched = TimedScheduler(make_policy(policy), ct.AdmissionLimits(max_requests=max_requests))
    backend = ct.ScriptedBackend(responses=respond)
    rt = ct.Runtime(backend, scheduler=sched)
    program = sc_program()
    t0 = time.perf_counter()
    results = await rt.run_many([(program, {"question": f"q{i}"}) for i in range(n)])
    wall = time.perf_counter() - t0
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:2]
    requests = backend.served  # backend.requests keeps only the newest 10,000
    return {"policy": policy, "programs": n, "requests": requests, "wall_s": round(wall, 3),
            "scheduler_s": round(sched.spent, 4), "scheduler_ms_per_request": round(sched.spent / requests * 1e3, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="admission.json")
    ap.add_argument("--programs", default="125,250,500,1000")
    ap.add_argument("--policies", default="fcfs,app-fifo,certa,certa-nocd,lpm")
    ap.add_argument("--max-requests", type=int, default=64)
    args = ap.parse_args()
    rows = []
    for policy in args.policies.split(","):
        for n in map(int, args.programs.split(",")):
            rows.append(asyncio.run(measure(policy, n, args.max_requests)))
            print(json.dumps(rows[-1]))
    out = {"config": {"max_requests": args.max_requests, "backend": "scripted (instant)", "fanout": 4, "cap": 8,
                      "python": platform.python_version()}, "results": rows}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

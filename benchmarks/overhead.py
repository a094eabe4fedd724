"""Runtime overhead per step: certa vs LangGraph on the same 20-branch SC graph, same run.

Both call an instant fake LLM (no sleeping, no tokenising), so the time measured is the
framework's own: scheduling a branch, the request path, merging the update, routing. Time
is the process's CPU time (``time.process_time``), which other load on the machine
disturbs less than wall time but does not remove (on a shared 2-core machine the same code
measured 15-27 us per step depending on the load); the two are interleaved and medians
reported, with each one's spread and the load average before and after. State updates are
validated (``dsl/state.py``) as in every run. To compare two versions of certa in one run,
see ``benchmarks/overhead_compare.py``.

    python benchmarks/overhead.py --json out.json [--runs 300] [--repeats 3]

Writes {"certa_us_per_step", "langgraph_us_per_step", "ratio", ...}. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import platform
import statistics
import time
import warnings
from typing import Annotated, TypedDict

import certa as ct
from certa.dsl.errors import CompileWarning
from certa.runtime.backends.base import Backend
from certa.runtime.types import Capabilities, GenRequest, GenResult

BRANCHES = 20


class LGState(TypedDict):
    question: str
    answers: Annotated[list[str], operator.add]


class InstantBackend(Backend):
    """Answers every request at once with a fixed text (measures framework overhead only)."""

    capabilities = Capabilities(name="instant")

    async def generate(self, req: GenRequest) -> GenResult:
        return GenResult(text="42", tokens=1, prompt_tokens=1, rid=req.rid)

    async def abort(self, rid: str) -> bool:
        return False

    def live_rids(self) -> set[str]:
        return set()


class SC(ct.State):
    question: str
    answers: ct.Appended[list[str]] = []


def certa_graph() -> ct.CompiledGraph:
    g = ct.Graph(SC, knob=ct.Knob("branches", cap=BRANCHES), name="sc")

    @g.step(fanout=BRANCHES)
    async def sample(s: SC, ctx: ct.Context):
        out = await ctx.gen(s.question, temperature=0.7)
        return {"answers": [out.text]}

    @g.certaindex
    def agreement(s: SC) -> float:
        return 1.0 if s.answers.count(s.answers[0]) == len(s.answers) else 0.0

    with warnings.catch_warnings():  # CT111 (no @answer): this graph's answer is not needed
        warnings.simplefilter("ignore", CompileWarning)
        return g.compile()


async def time_certa(runs: int) -> float:
    rt = ct.Runtime(InstantBackend())
    program = certa_graph()
    for _ in range(10):  # warm up
        await rt.run(program, question="q")
    t0 = time.process_time()
    for _ in range(runs):
        r = await rt.run(program, question="q")
        assert r.knob_used == BRANCHES and r.ok
    return (time.process_time() - t0) / (runs * BRANCHES) * 1e6


async def time_langgraph(runs: int) -> float:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    async def llm(prompt: str) -> str:
        return "42"

    async def sample(state: dict) -> dict:
        return {"answers": [await llm(state["question"])]}

    def fan_out(state: dict) -> list:
        return [Send("sample", {"question": state["question"]}) for _ in range(BRANCHES)]

    b = StateGraph(LGState)
    b.add_node("sample", sample)
    b.add_conditional_edges(START, fan_out, ["sample"])
    b.add_edge("sample", END)
    graph = b.compile()
    for _ in range(10):
        await graph.ainvoke({"question": "q", "answers": []})
    t0 = time.process_time()
    for _ in range(runs):
        out = await graph.ainvoke({"question": "q", "answers": []})
        assert len(out["answers"]) == BRANCHES
    return (time.process_time() - t0) / (runs * BRANCHES) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="overhead.json")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3, help="alternate the two this many times; report medians")
    args = ap.parse_args()
    c_runs, l_runs = [], []
    load_before = os.getloadavg()
    for _ in range(args.repeats):  # interleave so machine noise hits both alike
        c_runs.append(asyncio.run(time_certa(args.runs)))
        l_runs.append(asyncio.run(time_langgraph(args.runs)))
    load_after = os.getloadavg()
    c, lg = statistics.median(c_runs), statistics.median(l_runs)
    from importlib.metadata import version
    out = {"certa_us_per_step": round(c, 2), "clock": "process_time", "langgraph_us_per_step": round(lg, 2),
           "ratio": round(c / lg, 4), "ratios": [round(a / b, 4) for a, b in zip(c_runs, l_runs)],
           "certa_min_max_us": [round(min(c_runs), 2), round(max(c_runs), 2)],
           "langgraph_min_max_us": [round(min(l_runs), 2), round(max(l_runs), 2)],
           "branches": BRANCHES, "runs": args.runs, "repeats": args.repeats,
           "certa_samples_us": [round(x, 2) for x in c_runs], "langgraph_samples_us": [round(x, 2) for x in l_runs],
           "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
           "cpus": os.cpu_count(), "langgraph_version": version("langgraph"), "python": platform.python_version()}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

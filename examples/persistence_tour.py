"""The persistence tour (LangGraph's, in certa): checkpoints, streaming, human-in-the-loop
edits, an in-step interrupt, a crash and its resume, state history — with early exit on top.

    python examples/persistence_tour.py

The program plans, asks a human to approve the plan (``ctx.interrupt``), then samples answers
in three looping lanes until they agree (``ct.Watch``: certaindex checked after every sample),
which cancels the samples still running. Every completed step is a checkpoint in SQLite; the
run pauses twice for a human and crashes once, and finishes without sending a completed
step's request again. The scripted backend is a fake (no model): its "model" answers 408.
``examples/06_persistence.ipynb`` walks through the same tour cell by cell.
"""

import asyncio
import tempfile
from pathlib import Path

import certa as ct
from certa.algorithms.answers import extract_answer
from certa.algorithms.answers.clustering import majority
from certa.algorithms.signals import entropy_certainty


class Tour(ct.State):
    question: str
    plan: str = ""
    approved: bool = False
    answers: ct.Appended[list[str]] = []


g = ct.Graph(Tour, knob=ct.Knob("branches", cap=12), name="tour")


@g.step
async def plan(s: Tour, ctx: ct.Context):
    out = await ctx.gen(f"Plan how to solve: {s.question}", max_tokens=32)
    return {"plan": out.text}


@g.step
def approve(s: Tour, ctx: ct.Context):                  # a human reads the plan: the run pauses here
    verdict = ctx.interrupt({"question": s.question, "plan": s.plan})
    return {"approved": verdict == "approve"}


@g.step(fanout=3)                                       # three lanes, each looping (below)
async def sample(s: Tour, ctx: ct.Context):
    out = await ctx.gen(f"{s.plan}\n{s.question}\nPut the final answer in \\boxed{{}}.", temperature=0.7,
                        seed=ctx.branch, max_tokens=64)
    return {"answers": [extract_answer(out.text, "gsm8k") or ""]}


@g.certaindex
def agreement(s: Tour) -> float:                        # 1.0 when every sample agrees
    return entropy_certainty(s.answers, same="math") if s.approved else 0.0


@g.answer
def vote(s: Tour):
    return majority(s.answers, same="math")[0] if s.answers else None


g.sequence("plan", "approve", "sample").loop("sample")
program = g.compile(policy=ct.Watch(0.9, detect_at=3))  # stop once 3+ samples agree


def fake_model(req: ct.GenRequest) -> str:
    """The scripted backend's answers: a plan, then samples that all say 408."""
    if req.step == "plan":
        return "Plan: multiply 17 by 24."
    return f"17 * 24 = 408, so the answer is \\boxed{{408}} (sample {req.branch})."


async def crash_during_sampling(saver: ct.Checkpointer, thread_id: str, command: ct.Command) -> int:
    """Resume ``thread_id`` with ``command``, and crash (cancel the run) while one sample's request
    hangs after another sample completed: what a killed process leaves. Returns the rows saved."""
    hung, saved = asyncio.Event(), asyncio.Event()

    def latency(req: ct.GenRequest) -> float:
        if req.step == "sample" and req.branch == 4:   # the second sample lane hangs
            hung.set()
            return 3600.0
        return 0.0

    put = saver.put

    def watched_put(cp):                               # note when a sample's checkpoint is written
        put(cp)
        if cp.step == "sample":
            saved.set()

    saver.put = watched_put  # type: ignore[method-assign]
    rt = ct.Runtime(ct.ScriptedBackend(fake_model, latency=latency), checkpointer=saver)
    run = asyncio.ensure_future(rt.run(program, thread_id=thread_id, command=command))
    await hung.wait()
    await saved.wait()
    run.cancel()                                       # the crash
    try:
        await run
    except asyncio.CancelledError:
        pass
    del saver.put
    return len(saver.history(thread_id))


async def tour(db: Path, question: str = "What is 17 * 24?", out=print) -> ct.Result:
    """The whole tour on a SQLite file; ``out`` prints each finding. Returns the final Result."""
    saver = ct.SqliteCheckpointer(db)
    rt = ct.Runtime(ct.ScriptedBackend(fake_model), checkpointer=saver)

    out("1. Stream a run on a thread; pause after `plan` (interrupt_after):")
    async with rt.stream(program, mode=("updates", "values"), thread_id="t1", interrupt_after=["plan"],
                         question=question) as stream:
        async for mode, part in stream:
            out(f"   {mode}: {part.step} -> {part.update if mode == 'updates' else part.state.plan!r}")
    r = stream.result
    out(f"   exit: {r.exit_reason}, {r.interrupt}")

    out("2. A human edits the plan (validated like a step's update):")
    try:
        rt.update_state("t1", {"plan": 42})
    except ct.CertaError as exc:
        out(f"   refused: {exc.code} ({type(exc).__name__})")
    cp = rt.update_state("t1", {"plan": "Plan: 17 * 24 = 17 * 20 + 17 * 4."})
    out(f"   saved as checkpoint {cp.index} ({cp.source}): plan = {cp.state['plan']!r}")

    out("3. Resume: the `approve` step asks the human (ctx.interrupt) and the run pauses in it:")
    r = await rt.run(program, thread_id="t1")
    out(f"   exit: {r.exit_reason}, when: {r.interrupt.when}, asks: {r.interrupt.value}")

    out("4. Approve (Command(resume=...)); the run crashes while sampling:")
    rows = await crash_during_sampling(saver, "t1", ct.Command(resume="approve"))
    latest = saver.latest("t1")
    out(f"   {rows} checkpoints; the newest: status {latest.status!r}, pending {latest.next}")
    saver.close()

    out("5. Another process resumes the thread from the file (no arguments needed):")
    saver2 = ct.SqliteCheckpointer(db)
    backend = ct.ScriptedBackend(fake_model, latency=lambda req: 0.01 * (req.branch % 3))
    rt2 = ct.Runtime(backend, checkpointer=saver2)
    r = await rt2.run(program, thread_id="t1")
    resent = sorted({(q.step, q.branch) for q in backend.requests})
    out(f"   answer {r.answer}, exit {r.exit_reason} after {r.knob_used} of {r.knob_cap} samples "
        f"(~{r.tokens_saved} tokens saved); requests sent now: {resent}")
    out(f"   the early exit cancelled {r.cancelled} and aborted {len(r.aborted)} request(s)")

    out("6. State history, newest first (source, step, branch, status):")
    for c in rt2.state_history("t1")[:6]:
        out(f"   #{c.index:<2} {c.source:<6} {str(c.step):<7} {str(c.branch):<4} {c.status}")
    saver2.close()
    return r


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(tour(Path(tmp) / "threads.db"))


if __name__ == "__main__":
    main()

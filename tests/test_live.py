"""certa.viz.live.LiveTable: rows from the event stream, bounded redraws, HTML/text rendering (no Jupyter needed)."""

from __future__ import annotations

import asyncio
import io
import sys
import types

import pytest

import certa as ct
from certa.algorithms.programs.library import build
from certa.algorithms.programs.sc_mcts import sc_mcts_program
from certa.viz.live import LiveTable, Row, render_html, render_text, summary
from certa.runtime.events import EventBus


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeProgram:
    def __init__(self) -> None:
        self.knob, self.policy, self.knob_value, self.tokens = ct.Knob("iterations", cap=4), None, 0, ct.TokenUsage()


class FakeRuntime:
    """Just what LiveTable reads: an event bus and the active programs (kept like the Runtime does)."""

    def __init__(self) -> None:
        self.events = EventBus()
        self.active_programs: dict = {}

    def start(self, pid: str) -> FakeProgram:
        prog = self.active_programs[pid] = FakeProgram()
        self.events.emit("program_start", pid, name=pid.split("-")[0], knob_cap=4)
        return prog

    def exit(self, pid: str, **data) -> None:
        self.active_programs.pop(pid, None)
        self.events.emit("exit", pid, **{"reason": "cap", "tokens": 0, "tokens_saved": 0, "error": None, **data})


def test_rendering_escapes_nests_and_marks_the_threshold():
    rows = [Row("sc-0", "sc", knob_used=4, knob_cap=16, knob_unit="branches", certaindex=0.6, tau=0.55, tokens=1200),
            Row("sc-0/<mcts>-1", "<mcts>", status="certaindex", certaindex=0.95, tokens=300, tokens_saved=90),
            Row("cot-2", "cot", status="error", error="CT201 step-failed: boom")]
    out = render_html(rows)
    assert "&lt;mcts&gt;-1" in out and "<mcts>" not in out, "names are escaped"
    assert "↳" in out and "padding-left:12px" in out, "sub-programs are indented under their caller"
    assert "4/16 branches" in out and "threshold 0.55" in out and "#16a34a" in out, "0.60 ≥ 0.55: green bar"
    assert "exit: certaindex" in out and "title='CT201 step-failed: boom'" in out
    assert "1 running · 2 finished (certaindex 1, error 1)" in out
    assert "1,200 tokens" in summary(rows), "only top-level programs count (sub-program tokens roll up)"
    text = render_text(rows)
    assert len(text.splitlines()) == 3 and "0.60 (≥0.55)" in text and "exit:error" in text


def test_rendering_caps_rows_running_first():
    rows = [Row(f"p-{i}", "p", status="cap", updated=i) for i in range(30)] + [Row("run-0", "p")]
    out = render_html(rows, max_rows=5)
    assert "run-0" in out and "p-29" in out and "p-0<" not in out
    assert "26 more finished programs" in out


def test_redraws_are_rate_limited_with_a_fake_clock():
    rt, clock, out = FakeRuntime(), FakeClock(), io.StringIO()
    live = LiveTable(rt, mode="text", max_hz=2, out=out, clock=clock)
    prog = rt.start("p-0")
    assert live.renders == 1, "the first event draws at once"
    for i in range(100):
        rt.events.emit("certaindex", "p-0", value=i / 100, signals={}, knob=1)
    assert live.renders == 1, "a burst within 0.5 s does not redraw"
    clock.t = 0.6
    prog.tokens.add("main", 7)
    rt.events.emit("request_done", "p-0", "s", 0, rid="r", token_kind="main", tokens=7)
    assert live.renders == 2 and live.rows[0].certaindex == 0.99 and live.rows[0].tokens == 7
    rt.exit("p-0", reason="certaindex", tokens=7, tokens_saved=21)
    assert live.renders == 3, "the last program's exit always draws"
    rt.start("q-1")
    live.close()
    live.close()
    rt.exit("q-1")
    assert live.rows[1].status == "running", "closed tables stop listening"
    assert "exit:certaindex" in out.getvalue() and "[certa live]" in out.getvalue()


async def test_a_trailing_redraw_shows_the_last_state():
    rt, out = FakeRuntime(), io.StringIO()
    live = LiveTable(rt, mode="text", max_hz=20, out=out)
    rt.start("p-0")
    rt.start("p-1")
    rt.events.emit("certaindex", "p-1", value=0.42, signals={}, knob=2)  # within the interval: not drawn yet
    assert "0.42" not in out.getvalue()
    await asyncio.sleep(0.2)
    assert "0.42" in out.getvalue(), "a trailing redraw was scheduled on the running loop"
    live.close()


async def test_live_table_follows_a_real_batch_with_nested_programs():
    def respond(req):
        return "Yes" if "Is this step correct?" in req.prompt else "so \\boxed{4}"

    rt = ct.Runtime(ct.ScriptedBackend(responses=respond))
    out = io.StringIO()
    with LiveTable(rt, mode="text", out=out) as live:
        sc = build("sc", cap=8)
        results = await rt.run_many([(sc, {"question": "2+2?"}),
                                     (sc_mcts_program(branches_per_round=2, cap=4, iterations=2), {"question": "q"})])
    by_id = {r.program_id: r for r in live.rows}
    for res in results:
        row = by_id[res.program_id]
        assert row.status == res.exit_reason and row.tokens == res.tokens.total
        assert row.certaindex == res.final_certaindex and row.knob_used == res.knob_used
        assert row.inflight == 0 and row.steps == 0
    assert by_id[results[0].program_id].tau == getattr(sc.policy, "tau", None)  # a threshold policy shows its tau
    nested = [r for r in live.rows if r.depth == 1]
    assert nested and all(r.program_id.startswith(results[1].program_id + "/") for r in nested)
    assert rt.events.active is False, "closing unsubscribed"
    assert "[certa live] 0 running · " in out.getvalue().splitlines()[-len(live.rows) - 1]


async def test_sub_programs_cancelled_by_their_caller_show_as_cancelled():
    def respond(req):
        return "Yes" if "Is this step correct?" in req.prompt else "so \\boxed{4}"

    # the third search is slow: still running when the outer program exits (and cancels it)
    rt = ct.Runtime(ct.ScriptedBackend(responses=respond,
                                       latency=lambda req: 5.0 if "/mcts-3" in req.program_id else 0.001))
    with LiveTable(rt, mode="text", out=io.StringIO()) as live:
        r = await rt.run(sc_mcts_program(branches_per_round=3, cap=6, iterations=2,
                                         policy=ct.Threshold(1.0, detect_at=2, every=1)), question="q")
    assert r.exit_reason == "certaindex"
    status = {row.program_id: row.status for row in live.rows}
    assert status[r.program_id + "/mcts-3"] == "cancelled"
    assert "running" not in status.values()


def test_run_sync_in_a_worker_thread_updates_the_table():
    async def inside_a_loop():  # as in Jupyter: run_sync runs the program on a worker thread
        rt = ct.Runtime(ct.ScriptedBackend(responses=["\\boxed{4}"]))
        live = LiveTable(rt, mode="text", out=io.StringIO())
        r = rt.run_sync(build("sc", cap=8), question="2+2?")
        live.close()
        return live, r

    live, r = asyncio.run(inside_a_loop())
    assert live.rows[0].status == r.exit_reason == "certaindex"


def test_html_mode_updates_one_display_handle(monkeypatch):
    pytest.importorskip("IPython", reason="the HTML mode needs IPython")
    import IPython.display

    shown: list = []

    class Handle:
        display_id = "abc"

        def update(self, obj):
            shown.append(obj.data)

    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=None: shown.append(obj.data) or Handle())
    rt = ct.Runtime(ct.ScriptedBackend(responses=["\\boxed{4}"]))
    live = LiveTable(rt, mode="html")
    rt.run_sync(build("sc", cap=8), question="2+2?")
    live.close()
    assert len(shown) >= 2 and "<table" in shown[-1] and "exit: certaindex" in shown[-1]
    assert len(shown) <= 4, "a program of a few steps redraws a few times, not once per event"


def test_auto_mode_outside_jupyter_prints(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    live = LiveTable(FakeRuntime(), out=io.StringIO())
    assert live.mode == "text"
    live.close()


def test_module_example_runs():
    import doctest

    import certa.viz.live

    res = doctest.testmod(certa.viz.live)
    assert res.failed == 0 and res.attempted > 0

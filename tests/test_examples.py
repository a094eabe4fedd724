"""The examples run (on the scripted fake backend) and behave as documented."""

from __future__ import annotations

import certa as ct

from .conftest import load_example as load


def test_sc_example_exits_early_when_branches_agree():
    sc = load("sc_scripted")
    backend = ct.ScriptedBackend(responses=["The answer is \\boxed{408}."])
    r = ct.Runtime(backend).run_sync(sc.program, question="What is 17 * 24?")
    assert r.exit_reason == "certaindex" and r.knob_used == 4 and r.answer == "408"
    assert backend.live_rids() == set()


def test_sc_example_runs_to_cap_when_branches_disagree():
    sc = load("sc_scripted")
    answers = [f"\\boxed{{{i}}}" for i in range(16)]
    r = ct.Runtime(ct.ScriptedBackend(responses=answers)).run_sync(sc.program, question="q")
    assert r.exit_reason == "cap" and r.knob_used == 16


def test_the_persistence_tour_pauses_edits_crashes_resumes_and_exits_early(tmp_path):
    """examples/persistence_tour.py (issue 40 item 13): every stop of the tour does what it says."""
    import asyncio
    import subprocess
    import sys

    from .conftest import EXAMPLES

    tour = load("persistence_tour")
    lines: list[str] = []
    r = asyncio.run(tour.tour(tmp_path / "threads.db", out=lines.append))
    text = "\n".join(lines)
    assert "updates: plan -> {'plan': 'Plan: multiply 17 by 24.'}" in text   # streamed from a thread
    assert "interrupted after step 'plan'" in text and "refused: CT113" in text
    assert "when: during, asks: {'question': 'What is 17 * 24?', 'plan': 'Plan: 17 * 24 = 17 * 20 + 17 * 4.'}" in text
    assert (r.answer, r.exit_reason, r.knob_used) == ("408", "certaindex", 3) and r.cancelled and r.tokens_saved > 0
    assert r.state.approved and r.state.plan.startswith("Plan: 17 * 24 = 17 * 20")   # the human's edit and answer
    resent = text.split("requests sent now: ")[1].split("\n")[0]
    assert "'plan'" not in resent and "('sample', 2)" not in resent and "('sample', 3)" not in resent
    from certa.runtime.checkpoint_sqlite import SqliteCheckpointer
    saver = SqliteCheckpointer(tmp_path / "threads.db")
    sources = [c.source for c in reversed(saver.history("t1"))]
    saver.close()
    assert sources[:3] == ["input", "step", "update"] and sources.count("update") == 1   # plan, the human edit
    out = subprocess.run([sys.executable, "-W", "error::UserWarning", str(EXAMPLES / "persistence_tour.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "answer 408, exit certaindex after 3 of 12 samples" in out.stdout

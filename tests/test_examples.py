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

"""The examples run (on the scripted fake backend) and behave as documented."""

from __future__ import annotations

import importlib.util
import pathlib

import certa as ct

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

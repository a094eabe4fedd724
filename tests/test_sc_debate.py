"""examples/sc_debate.py: Self-Consistency over the two-agent debate (each SC branch a debate
sub-program through ctx.call), run on the scripted fake backend (issue 21)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import certa as ct
from certa.cli import app

from .conftest import EXAMPLES, load_example


@pytest.fixture
def sc_debate(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))   # it imports its neighbour debate.py, as python/certa run allow
    monkeypatch.delitem(sys.modules, "debate", raising=False)
    return load_example("sc_debate")


def agents(req) -> str:
    """alice says the debate's pick (408, or 407 in every other debate, by its sub-program id);
    bob comes round to it. (Not by the seed: a sub-program's seeds are salted with its call
    path on the wire, certa.runtime.seeds.)"""
    pick = "407" if int(req.program_id.rsplit("-", 1)[1]) % 2 else "408"
    first = "alice" in req.prompt.split(".")[0]
    return f"\\boxed{{{pick}}}" if first or pick in req.prompt else "\\boxed{1}"


def test_agreeing_debates_stop_the_vote_and_cancel_the_debates_still_running(sc_debate):
    backend = ct.ScriptedBackend(responses=lambda req: "\\boxed{408}", latency=lambda req: 0.002 * (req.seed % 3))
    r = ct.Runtime(backend).run_sync(sc_debate.program, question="What is 17 * 24?")
    assert r.exit_reason == "certaindex" and r.answer == "408" and r.knob_used == 2
    assert all(d["exit"] == "certaindex" and d["rounds"] == 1 for d in r.state.debates)   # each at its consensus
    assert all(d["program"].startswith(r.program_id + "/debate-") for d in r.state.debates)
    assert r.tokens.requests >= 2 * len(r.state.debates) and r.tokens.main > 0   # the SC steps send none: roll-up
    assert backend.live_rids() == set()   # the lanes' next debates were cancelled with their requests


def test_disagreeing_debates_run_to_the_cap_and_the_majority_wins(sc_debate):
    backend = ct.ScriptedBackend(responses=agents)
    r = ct.Runtime(backend).run_sync(sc_debate.program, question="q")
    assert r.exit_reason == "cap" and r.knob_used == sc_debate.DEBATES == len(r.state.debates)
    seeds: dict[str, set[int]] = {}
    for req in backend.requests:
        seeds.setdefault(req.program_id, set()).add(req.seed)
    assert len(seeds) == sc_debate.DEBATES and sum(map(len, seeds.values())) == len(set().union(*seeds.values()))
    # each debate samples with seeds of its own (no seed shared by two debates)
    assert sorted(r.state.answers) == ["407"] * 3 + ["408"] * 3 and r.answer in ("407", "408")
    rounds = [d["rounds"] for d in r.state.debates]
    assert all(n == 2 for n in rounds), rounds   # bob comes round in the second round: consensus
    assert r.tokens.requests == len(backend.requests) == 4 * sc_debate.DEBATES


def test_sc_debate_runs_as_a_script_and_with_certa_run(tmp_path):
    out = subprocess.run([sys.executable, "-W", "error::UserWarning", str(EXAMPLES / "sc_debate.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "answer: 408" in out.stdout and "exit: certaindex" in out.stdout
    report = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["run", f"{EXAMPLES}/sc_debate.py:program", "--dataset", "gsm8k", "--limit", "2",
                                 "--backend", "scripted", "--json", str(report)])
    assert r.exit_code == 0, r.output
    data = json.loads(report.read_text())
    assert data["n"] == 2 and all(row["error"] is None for row in data["rows"]) and data["tokens"]["main"] > 0

"""`certa run --record FILE`: what ran is written in the trace format and replays."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from certa.eval.replay_eval import Replayer
from certa.cli import app
from certa.runtime.policy import Even
from certa.eval.traces import load_traces

runner = CliRunner()
SC_FILE = '''
import certa as ct
from certa.algorithms.programs.self_consistency import sc_program
from certa.runtime.policy import Even
program = sc_program(branches_per_round=2, cap=4, policy=Even(4))
'''
COT_FILE = '''
from certa.algorithms.programs.cot_probe import cot_program
program = cot_program("high", max_tokens=200)
'''


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(3)))
    return path


def run(tmp_path, target_src, data, *extra):
    prog = tmp_path / "prog.py"
    prog.write_text(target_src)
    out = tmp_path / "rec.jsonl"
    res = runner.invoke(app, ["run", f"{prog}:program", "--dataset", str(data), "--backend", "scripted",
                              "--record", str(out), *extra])
    assert res.exit_code == 0, res.output
    return out


def test_sc_run_records_every_sample(tmp_path, data):
    out = run(tmp_path, SC_FILE, data)
    traces = load_traces(out)
    assert [p.idx for p in traces] == [0, 1, 2]
    for p in traces:
        assert p.model == "scripted" and p.interval is None and len(p.samples) == 4
        assert p.gold == str(2 * p.idx)
        for s in p.samples:
            assert s.tokens > 0 and s.finished and s.pred and s.correct == (s.pred == p.gold)
            assert "boxed" in s.text and not s.probes
        assert sorted(s.model_extra["seed"] for s in p.samples) == [0, 1, 2, 3]
    full = Replayer(traces, "sc").run(Even(4))
    assert full.main.tolist() == [sum(s.tokens for s in p.samples) for p in traces]


def test_rerun_does_not_duplicate_recorded_problems(tmp_path, data):
    out = run(tmp_path, SC_FILE, data)
    again = run(tmp_path, SC_FILE, data)
    assert again == out and [json.loads(line)["idx"] for line in out.read_text().splitlines()] == [0, 1, 2]


def test_cot_run_records_probes_at_their_positions(tmp_path, data, monkeypatch):
    from certa.runtime.backends.testing import scripted as scripted_mod
    long = "step " * 300 + "so \\boxed{7}"
    orig = scripted_mod.ScriptedBackend.__init__

    def init(self, responses=None, **kw):  # the CLI's scripted backend, made to probe natively
        orig(self, responses=[long], probe=lambda text, suffix: "7} \\]", **kw)
    monkeypatch.setattr(scripted_mod.ScriptedBackend, "__init__", init)
    out = run(tmp_path, COT_FILE, data)
    (p0, *_) = load_traces(out)
    (s,) = p0.samples
    assert p0.interval == 64 and [q.at for q in s.probes] == [64, 128]
    assert s.tokens == 128 and not s.finished  # exited early after two agreeing probes: recorded as it ran
    assert s.probes[0].answer == "7" and s.probes[0].model_extra["text"] == "7} \\]"

"""`certa bench tokens --policy/--preset`: fixed SC policies scored on the whole trace file, no
calibration, baselines beside them; figures checked against hand-computed values.

Fixture ``sc_fixed_tiny.jsonl`` (budget 400 tokens, 4 samples each, every draw order alike):
  idx 0: four "7", correct, 100 tokens each;  idx 1: four "5", wrong, 200 tokens each;
  idx 2: four "3", wrong, cut at the budget (400 tokens, finished false).
Full budget: (400 + 800 + 1600) / 3 = 933.33 tokens, accuracy 1/3.
vote(tau 0.8, no length weight, min 2): stops after 2 on idx 0 and 1; the truncated idx 2 never
gains certainty and runs all 4: (200 + 400 + 1600) / 3 = 733.33 tokens -> 11/14 = 0.7857x.
AC(0.9): stops at 3 agreeing everywhere: (300 + 600 + 1200) / 3 = 700 -> 0.75x.
even(1) already has accuracy 1/3 (233.33 tokens), so the iso ratio of the vote rule is 22/7.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

from certa.cli import app
from certa.eval.bench_fixed import DEFAULT_ORDERS, bench_fixed, load_policy
from certa.eval.traces import load_traces

DATA = pathlib.Path(__file__).parent / "data"
TINY = DATA / "sc_fixed_tiny.jsonl"
runner = CliRunner()
VOTE = {"kind": "vote", "tau": 0.8, "length_weight": 0.0, "min_samples": 2}
AC = {"kind": "adaptive_consistency", "threshold": 0.9}


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "vote.json").write_text(json.dumps({"policy": VOTE, "program": {"name": "sc"}}))  # a calibrate file
    (tmp_path / "ac.json").write_text(json.dumps(AC))  # a bare policy
    return tmp_path


def test_hand_computed_figures(files):
    report = bench_fixed(load_traces(TINY), {"vote": load_policy(files / "vote.json"),
                                             "ac": load_policy(files / "ac.json")}, reps=200)
    m = report["methods"]
    assert report["problems"] == 3 and report["orders"] == DEFAULT_ORDERS == 20 and report["final"] is False
    full = m["baseline-even"]
    assert full["tokens"] == pytest.approx(2800 / 3, abs=1e-3) and full["accuracy"] == pytest.approx(1 / 3)
    assert full["token_ratio"] == 1.0 and full["iso_token_ratio"] == 1.0, "the reference reads 1.0"
    assert m["vote"]["tokens"] == pytest.approx(2200 / 3, abs=1e-3)
    assert m["vote"]["token_ratio"] == pytest.approx(11 / 14, abs=1e-6) and m["vote"]["accuracy_delta"] == 0
    assert m["vote"]["iso_token_ratio"] == pytest.approx(22 / 7, abs=1e-5)
    assert m["vote"]["ci95"]["accuracy_delta"] == [0.0, 0.0] and m["vote"]["samples"] == pytest.approx(8 / 3, abs=1e-3)
    assert m["ac"]["tokens"] == pytest.approx(700.0) and m["ac"]["token_ratio"] == pytest.approx(0.75)
    for k in (1, 2, 3):  # every smaller budget beside them
        assert m[f"even({k})"]["tokens"] == pytest.approx(700 * k / 3, abs=1e-3)
    assert m["oracle-bound"]["oracle"] and m["oracle-bound"]["token_ratio"] == pytest.approx(0.25)
    assert {"esc", "adaptive-consistency"} <= set(m), "the shipped peers are always beside them"


def test_cli_scores_policy_files_and_presets(files):
    out = files / "fixed.json"
    res = runner.invoke(app, ["bench", "tokens", "--program", "sc", "--traces", str(TINY), "--policy",
                              str(files / "vote.json"), "--shipped", "sc-default", "--preset", "esc",
                              "--json", str(out), "--reps", "100"])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["scored"] == ["sc-default", "esc", "vote"] and report["mode"] == "fixed"
    assert report["methods"]["vote"]["token_ratio"] == pytest.approx(11 / 14, abs=1e-6)
    assert "vote" in res.output and "FINAL" not in res.output and "iso x1.000" in res.output


def test_reserved_rows_need_final_which_says_so(files):
    lines = TINY.read_text().splitlines()
    reserved = files / "reserved.jsonl"
    reserved.write_text("\n".join(lines) + "\n" + lines[0].replace('"idx": 0', '"idx": 900') + "\n")
    args = ["bench", "tokens", "--program", "sc", "--traces", str(reserved), "--preset", "sc-default",
            "--json", str(files / "r.json"), "--reps", "50"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "reserved" in refused.output
    ok = runner.invoke(app, args + ["--final"])
    assert ok.exit_code == 0, ok.output
    assert "FINAL REPORT" in ok.output and json.loads((files / "r.json").read_text())["final"] is True


def test_unknown_preset_and_cot_are_refused(files):
    base = ["bench", "tokens", "--traces", str(TINY), "--json", str(files / "x.json")]
    res = runner.invoke(app, base + ["--program", "sc", "--shipped", "nope"])
    assert res.exit_code == 2 and "sc-default" in res.output
    res = runner.invoke(app, base + ["--program", "cot", "--preset", "sc-default"])
    assert res.exit_code == 2 and "fixed SC policies" in res.output

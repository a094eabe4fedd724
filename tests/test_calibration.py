"""Calibration: seeded split, no held-out reads, no accuracy loss on calibration, bootstrap CIs,
policy files that `certa run --policy` loads, reserved splits refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import certa.eval.calibration as calibration
from certa.eval.calibration import calibrate, calibrate_split, split_problems
from certa.eval.evalstats import bootstrap_ci, compare, iso_tokens
from certa.eval.replay_eval import Replayer, Scores
from certa.cli import app
from certa.cli.run import load_policy
from certa.eval.errors import DatasetError
from certa.algorithms.policies import policy_from_dict
from certa.eval.traces import parse_trace_line

from .conftest import TINY_TRACES

runner = CliRunner()


def test_split_is_seeded_disjoint_complete_and_independent_of_file_order(tiny_problems):
    cal, held = split_problems(tiny_problems, 0.5, seed=3)
    assert len(cal) == 6 and len(held) == 6
    assert {p.idx for p in cal}.isdisjoint(p.idx for p in held)
    assert {p.idx for p in cal} | {p.idx for p in held} == {p.idx for p in tiny_problems}
    again, _ = split_problems(list(reversed(tiny_problems)), 0.5, seed=3)
    assert [p.idx for p in again] == [p.idx for p in cal]
    other, _ = split_problems(tiny_problems, 0.5, seed=4)
    assert {p.idx for p in other} != {p.idx for p in cal}
    assert len(split_problems(tiny_problems, 0.25, seed=0)[0]) == 3


def test_calibration_never_reads_the_heldout_part(tiny_problems, monkeypatch):
    """Every Replayer built before the held-out report holds calibration problems only."""
    built: list[tuple[str, set]] = []
    phase = ["calibrate"]

    class Spy(Replayer):
        def __init__(self, probs, *a, **kw):
            built.append((phase[0], {p.idx for p in probs}))
            super().__init__(probs, *a, **kw)

    real_report = calibration.report_heldout

    def report(*a, **kw):
        phase[0] = "report"
        return real_report(*a, **kw)

    monkeypatch.setattr(calibration, "Replayer", Spy)
    monkeypatch.setattr(calibration, "report_heldout", report)
    for method in ("threshold", "pareto", "esc", "adaptive-consistency"):
        built.clear()
        phase[0] = "calibrate"
        out = calibrate_split(tiny_problems, "sc", method=method, cal_fraction=0.5, seed=1, reps=50)
        cal, held = set(out["split"]["calibration_idx"]), set(out["split"]["heldout_idx"])
        assert built and all(idx <= cal for ph, idx in built if ph == "calibrate"), method
        reports = [idx for ph, idx in built if ph == "report"]
        assert reports and all(idx == held for idx in reports)


@pytest.mark.parametrize("program", ["sc", "cot"])
def test_corrupting_the_heldout_part_changes_nothing_in_the_calibration(tiny_problems, program):
    cal, held = split_problems(tiny_problems, 0.5, seed=2)
    poisoned = []
    for p in held:  # every held-out answer wrong (and unprobed samples very long)
        data = json.loads(p.model_dump_json())
        for s in data["samples"]:
            s.update(correct=False, pred="-1", tokens=s["tokens"] * (1 if s["probes"] else 3))
            for q in s.get("probes", []):
                q["answer"] = "-1"
        poisoned.append(parse_trace_line(json.dumps(data)))
    a = calibrate_split(cal + held, program, cal_fraction=0.5, seed=2, reps=50)
    b = calibrate_split(cal + poisoned, program, cal_fraction=0.5, seed=2, reps=50)
    assert a["policy"] == b["policy"] and a["program"] == b["program"] and a["calibration"] == b["calibration"]
    assert a["heldout"] != b["heldout"]


@pytest.mark.parametrize("program,method", [("sc", "threshold"), ("sc", "pareto"), ("sc", "esc"),
                                            ("sc", "adaptive-consistency"), ("cot", "probe")])
def test_choice_has_no_accuracy_loss_on_calibration_and_saves_or_keeps_budget(tiny_problems, program, method):
    cal, _ = split_problems(tiny_problems, 0.5, seed=0)
    res = calibrate(cal, program, method=method)
    s = res.summary()
    assert s["accuracy_delta"] >= 0 and s["token_ratio"] <= 1.0 and s["feasible"] <= s["candidates"]
    # the choice really is the cheapest feasible grid point
    rep = Replayer(cal, program)
    for cand in calibration.candidates(rep, method):
        sc = rep.run(cand.policy, k=cand.k, interval=cand.interval)
        if sc.correct.sum() >= res.baseline.correct.sum() - 1e-9:
            assert sc.mean_tokens >= res.scores.mean_tokens - 1e-9


def test_policy_file_loads_into_certa_run(tiny_problems, tmp_path):
    out = tmp_path / "policy.json"
    r = runner.invoke(app, ["calibrate", "--program", "sc", "--traces", str(TINY_TRACES), "--cal-fraction", "0.5",
                            "--seed", "0", "--out", str(out), "--reps", "100"])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert set(data) >= {"policy", "calibration", "heldout", "split"}
    assert set(data["heldout"]["ci95"]) == {"accuracy_delta", "token_ratio", "iso_token_ratio"}
    pol = load_policy(str(out))
    assert pol.to_dict() == data["policy"] == policy_from_dict(data["policy"]).to_dict()
    run = runner.invoke(app, ["run", "sc", "--dataset", str(tmp_path / "q.jsonl"), "--backend", "scripted",
                              "--policy", str(out)]) if _dataset(tmp_path) else None
    assert run is not None and run.exit_code == 0, run.output


def _dataset(tmp_path) -> bool:
    (tmp_path / "q.jsonl").write_text(json.dumps({"question": "What is 2+2?", "answer": "4"}) + "\n")
    return True


def test_calibrating_on_a_reserved_split_is_refused(tmp_path):
    line = {"idx": 850, "gold": "1", "dataset": "gsm8k", "samples": [{"tokens": 3, "pred": "1", "correct": True}]}
    ok = dict(line, idx=3)
    probs = [parse_trace_line(json.dumps(x)) for x in (line, ok, dict(ok, idx=4), dict(line, idx=851))]
    with pytest.raises(DatasetError, match="reserved"):
        calibrate(probs, "sc")
    dev = [parse_trace_line(json.dumps(dict(line, idx=i, dataset=None))) for i in (850, 851)]
    with pytest.raises(DatasetError):
        calibrate(dev, "sc", dataset="gsm8k")


# ---- statistics ---------------------------------------------------------------------------
def test_iso_tokens_interpolates_on_the_monotone_envelope():
    curve = [(100, 0.5), (200, 0.8), (300, 0.7), (400, 0.9)]
    assert iso_tokens(curve, 0.65) == 150.0
    assert iso_tokens(curve, 0.8) == 200.0
    assert iso_tokens(curve, 0.85) == pytest.approx(350.0)  # 300 is on the envelope at 0.8
    assert iso_tokens(curve, 0.95) is None


def test_bootstrap_ci_is_seeded_and_matches_normal_theory():
    rng = np.random.default_rng(0)
    x = (rng.random(400) < 0.5).astype(float)
    stat = lambda rows: float(x[rows].mean())  # noqa: E731
    lo, hi = bootstrap_ci(stat, len(x), reps=2000, seed=7)
    assert (lo, hi) == bootstrap_ci(stat, len(x), reps=2000, seed=7)
    se = x.std() / np.sqrt(len(x))
    assert abs((hi - lo) - 2 * 1.96 * se) < 0.2 * 2 * 1.96 * se
    assert lo < x.mean() < hi
    const = bootstrap_ci(lambda rows: 3.0, 10, reps=50)
    assert const == (3.0, 3.0)


def _scores(tokens, correct):
    t, c = np.array(tokens, float), np.array(correct, float)
    z = np.zeros_like(t)
    return Scores(idx=tuple(range(len(t))), tokens=t, correct=c, main=t, probe=z, score=z, prefill=z, knob=z)


def test_compare_ratios_and_cis():
    even = [_scores([10] * 4, [1, 0, 0, 0]), _scores([20] * 4, [1, 1, 0, 0]), _scores([40] * 4, [1, 1, 1, 0])]
    m = _scores([10, 10, 20, 10], [1, 1, 1, 0])
    out = compare(m, even, reps=300, seed=0)
    assert out["accuracy_delta"] == 0.0 and out["token_ratio"] == pytest.approx(12.5 / 40)
    assert out["iso_token_ratio"] == pytest.approx(12.5 / 40)
    lo, hi = out["ci95"]["token_ratio"]
    assert lo <= out["token_ratio"] <= hi and 0 < lo
    assert out == compare(m, even, reps=300, seed=0)  # seeded
    with pytest.raises(ValueError):
        compare(_scores([1], [1]), even)

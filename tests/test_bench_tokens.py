"""`certa bench tokens`: every method reported on the held-out split only, exact token totals,
probe tokens counted for CoT, JSON + PNG, and one-line errors on malformed trace files."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from certa.eval.bench_tokens import bench_tokens
from certa.eval.calibration import split_problems
from certa.cli import app

from .conftest import TINY_TRACES

runner = CliRunner()


@pytest.fixture(scope="module")
def sc_report(tiny_problems):
    return bench_tokens(tiny_problems, "sc", cal_fraction=0.5, seed=0, reps=200)


def test_sc_methods_and_heldout_only(tiny_problems, sc_report):
    r = sc_report
    assert set(r["methods"]) == {"baseline-even", "baseline-length", "certaindex-threshold", "pareto", "esc",
                                 "adaptive-consistency", "oracle-bound"}
    _, held = split_problems(tiny_problems, 0.5, seed=0)
    assert r["heldout_idx"] == [p.idx for p in held] and r["heldout_problems"] == len(held)
    full = sum(sum(s.tokens for s in p.samples) for p in held) / len(held)
    even = r["methods"]["baseline-even"]
    assert even["tokens"] == pytest.approx(full) and even["token_ratio"] == 1.0  # exact replay totals
    assert [p["label"] for p in even["curve"]] == [f"{b} samples" for b in range(1, 9)]
    for name, m in r["methods"].items():
        assert m["token_ratio"] == pytest.approx(m["tokens"] / even["tokens"], rel=1e-5), name
        assert m["accuracy_delta"] == pytest.approx(m["accuracy"] - even["accuracy"], abs=1e-5)
        assert set(m["ci95"]) == {"accuracy_delta", "token_ratio", "iso_token_ratio"}
        if not name.startswith(("baseline", "oracle")):
            assert m["calibration"]["accuracy_delta"] >= 0 and m["policy"]["kind"]
    oracle = r["methods"]["oracle-bound"]  # keeps every vote with the fewest samples
    assert oracle["oracle"] and oracle["accuracy_delta"] == 0 and oracle["token_ratio"] < 1.0
    assert r["targets"]["token_ratio"] == 0.45 and isinstance(r["targets"]["met"], bool)


def test_cot_counts_probe_tokens(tiny_problems):
    r = bench_tokens(tiny_problems, "cot", cal_fraction=0.5, seed=0, reps=100)
    names = set(r["methods"])
    assert {"baseline-even", "probe-calibrated"} <= names
    assert {f"dynasor-{p}" for p in ("mild", "low", "mid", "high", "crazy")} <= names
    crazy = r["methods"]["dynasor-crazy"]
    kinds = crazy["tokens_by_kind"]
    assert kinds["probe"] > 0 and kinds["probe_prefill"] > 0
    assert crazy["tokens"] == pytest.approx(kinds["main"] + kinds["probe"], abs=1e-2)
    preset, mid = r["methods"]["certa-settled"], r["methods"]["dynasor-mid"]
    assert preset["label"].startswith("certa settled (agree(3) & settled") and preset["interval"] == 64
    assert preset["tokens_by_kind"]["probe"] > 0
    assert preset["tokens"] >= mid["tokens"] - 1e-6  # mid's rule AND no hesitation: never exits earlier
    default = r["methods"]["certa-default"]  # cot_program()'s: (boxed | stated & vote), probes every 128
    assert default["label"].startswith("certa default ((boxed() | stated(answer) & vote(")
    assert default["interval"] == 64 and default["signal"]["kind"] == "any"


def test_cli_writes_json_and_png(tmp_path):
    js, png = tmp_path / "sc.json", tmp_path / "sc.png"
    res = runner.invoke(app, ["bench", "tokens", "--program", "sc", "--traces", str(TINY_TRACES), "--json", str(js),
                              "--png", str(png), "--reps", "100"])
    assert res.exit_code == 0, res.output
    data = json.loads(js.read_text())
    assert data["program"] == "sc" and "certaindex-threshold" in data["methods"]
    pytest.importorskip("matplotlib")
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("content,needle", [
    ('{"idx": 1, "samples": [{"tokens": "many"}]}\n', "samples.0.tokens"),
    ('{"idx": 1, "samples": []}\n', "samples"),
    ('not json\n', "not JSON"),
    ('{"idx": 1, "gold": "2", "samples": [{"tokens": 5}]}\n{"idx": 1, "gold": "2", "samples": [{"tokens": 5}]}\n',
     "twice"),
    ("", "no problems"),
])
@pytest.mark.parametrize("command", [["bench", "tokens", "--json", "out.json"], ["calibrate", "--out", "p.json"]])
def test_malformed_trace_file_is_a_one_line_error(tmp_path, content, needle, command):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    command = [str(tmp_path / c) if c.endswith(".json") else c for c in command]  # outputs stay in tmp_path
    res = runner.invoke(app, [*command, "--program", "sc", "--traces", str(bad)])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert lines[0].startswith("error CT304") and needle in lines[0], res.output
    assert len(lines) <= 2 and "Traceback" not in res.output


def test_cot_on_traces_without_probes_is_a_clear_error(tmp_path):
    sc_only = tmp_path / "sc.jsonl"
    sc_only.write_text("".join(json.dumps({"idx": i, "gold": "1", "samples": [{"tokens": 40, "pred": "1",
                                                                               "correct": True}] * 2}) + "\n"
                               for i in range(4)))
    res = runner.invoke(app, ["bench", "tokens", "--program", "cot", "--traces", str(sc_only), "--json",
                              str(tmp_path / "o.json")])
    assert res.exit_code == 2 and "no probed samples" in res.output
    res = runner.invoke(app, ["bench", "tokens", "--program", "sc", "--traces", str(sc_only), "--json",
                              str(tmp_path / "o.json"), "--reps", "20"])
    assert res.exit_code == 0, res.output

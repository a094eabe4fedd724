"""The CLI: help with examples, runs on the scripted backend, one-line errors with hints."""

from __future__ import annotations

import json
import pathlib

from typer.testing import CliRunner

from certa.cli import app

ROOT = pathlib.Path(__file__).parent.parent
runner = CliRunner()


def test_help_lists_commands():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0 and "run" in r.output


def test_run_example_on_scripted_backend_writes_json(tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", f"{ROOT}/examples/sc_scripted.py:program", "--dataset", "gsm8k", "--limit", "2",
                            "--backend", "scripted", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["n"] == 2 and data["tokens"]["main"] > 0
    assert all(row["certaindex"] for row in data["rows"])
    assert "accuracy" in r.output


def test_unknown_program_is_one_line_error_with_hint():
    r = runner.invoke(app, ["run", "no-such-program", "--backend", "scripted"])
    assert r.exit_code == 2
    assert "CT300" in r.output and "hint:" in r.output and "Traceback" not in r.output


def test_reserved_split_is_refused():
    r = runner.invoke(app, ["run", f"{ROOT}/examples/sc_scripted.py:program", "--dataset", "gsm8k",
                            "--idx", "900:902", "--backend", "scripted"])
    assert r.exit_code == 2 and "CT303" in r.output


def test_journal_resume_skips_finished_problems(tmp_path):
    j = tmp_path / "j.jsonl"
    args = ["run", f"{ROOT}/examples/sc_scripted.py:program", "--dataset", "gsm8k", "--backend", "scripted",
            "--journal", str(j)]
    assert runner.invoke(app, [*args, "--limit", "2"]).exit_code == 0
    again = runner.invoke(app, [*args, "--limit", "3"])
    assert again.exit_code == 2 and "--resume" in again.output
    assert runner.invoke(app, [*args, "--limit", "3", "--resume"]).exit_code == 0
    keys = [json.loads(line)["key"] for line in j.read_text().splitlines()]
    assert sorted(keys) == ["gsm8k:0", "gsm8k:1", "gsm8k:2"]

"""``certa run`` for a newcomer (issue 40): engine options, the scheduler, progress from the first
second, the closing summary, and errors that name what to type."""

from __future__ import annotations

import doctest
import importlib
import io
import json
import pathlib
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

import certa as ct
from certa.cli import app
from certa.cli.progress import RunProgress

ROOT = pathlib.Path(__file__).parent.parent
runner = CliRunner()
SC_FILE = f"{ROOT}/examples/sc_scripted.py:program"


class EngineStandIn(ct.ScriptedBackend):
    """Stands in for the llama.cpp engine: records the options ``certa run`` built it with."""

    built: list[dict] = []

    def __init__(self, model=None, **options) -> None:
        super().__init__(responses=["The answer is \\boxed{18}."])
        EngineStandIn.built.append({"model": model, **options})


@pytest.fixture
def engine(monkeypatch):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'certa[cpu]')")
    from certa.runtime.backends.llamacpp import backend
    monkeypatch.setattr(backend, "LlamaCppBackend", EngineStandIn)
    EngineStandIn.built = []
    return EngineStandIn.built


def run(*args: str):
    return runner.invoke(app, ["run", *args])


def test_threads_backend_opt_and_verbose_reach_the_engine(engine):
    r = run("sc", "--limit", "1", "--backend", "llamacpp", "--model", "qwen2.5-coder-0.5b", "--threads", "1",
            "--backend-opt", "n_seq=4", "--backend-opt", "max_batch_tokens=128", "--verbose")
    assert r.exit_code == 0, r.output
    assert engine == [{"model": "qwen2.5-coder-0.5b", "n_seq": 4, "max_batch_tokens": 128, "n_threads": 1,
                       "verbose": True}]
    r = run("sc", "--limit", "1", "--backend", "llamacpp", "--model", "qwen2.5-coder-0.5b")
    assert r.exit_code == 0 and engine[-1] == {"model": "qwen2.5-coder-0.5b", "verbose": False}, "engine defaults"


def test_threads_is_an_engine_option_and_must_be_positive():
    r = run("sc", "--limit", "1", "--backend", "scripted", "--threads", "2")
    assert r.exit_code == 2 and "--threads" in r.output and "llama.cpp" in r.output and "--backend-opt" in r.output
    r = run("sc", "--limit", "1", "--backend", "scripted", "--threads", "0")
    assert r.exit_code == 2 and "--threads" in r.output and "greater than or equal to 1" in r.output


def test_bad_backend_opt_is_one_line_naming_it():
    r = run("sc", "--limit", "1", "--backend", "scripted", "--backend-opt", "oops")
    assert r.exit_code == 2 and "expected KEY=VALUE" in r.output
    r = run("sc", "--limit", "1", "--backend", "scripted", "--backend-opt", "no_such_option=1")
    assert r.exit_code == 2 and "bad option for backend 'scripted'" in r.output and "no_such_option" in r.output
    r = run("sc", "--limit", "1", "--backend", "scripted", "--backend-opt", 'responses=["\\\\boxed{18}"]')
    assert r.exit_code == 0 and "1.000 (1/1)" in r.output, "a JSON value reaches the backend"


def test_default_threads_leave_one_core_free(monkeypatch):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'certa[cpu]')")
    from certa.runtime.backends.llamacpp import engine
    for cores, threads in ((1, 1), (2, 1), (8, 7)):
        monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert engine.default_threads() == threads


def test_run_schedules_with_certas_policy_like_serve(monkeypatch):
    from certa.runtime.build import make_runtime as real
    made = []

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr("certa.cli.run.make_runtime", spy)
    assert run(SC_FILE, "--limit", "1", "--backend", "scripted").exit_code == 0
    assert run(SC_FILE, "--limit", "1", "--backend", "scripted", "--scheduler", "fcfs").exit_code == 0
    from certa.runtime.scheduling.policies import make_policy
    assert [type(rt.scheduler.policy) for rt in made] == [type(make_policy("certa")), type(make_policy("fcfs"))]
    assert type(make_policy("certa")) is not type(make_policy("fcfs"))
    help_text = runner.invoke(app, ["run", "--help"]).output
    assert "certa's by default, as in certa serve" in " ".join(help_text.replace("│", " ").split())


def test_program_typo_gets_did_you_mean():
    r = run("scc", "--backend", "scripted")
    assert r.exit_code == 2 and "unknown program 'scc'" in r.output and "did you mean 'sc'?" in r.output
    r = run("sc", "--backend", "scriptd")
    assert r.exit_code == 2 and "did you mean 'scripted'?" in r.output
    r = run("sc", "--backend", "scripted", "--scheduler", "certaa", "--limit", "1")
    assert r.exit_code == 2 and "did you mean 'certa'?" in r.output


def test_reserved_split_refusal_names_the_cli_flag():
    r = run(SC_FILE, "--dataset", "gsm8k", "--idx", "900:902", "--backend", "scripted")
    assert r.exit_code == 2 and "CT303" in r.output
    assert "--final" in r.output and "allow_reserved" not in r.output


def test_cap_sets_a_builtin_programs_knob_cap(tmp_path):
    r = run("sc", "--limit", "1", "--backend", "scripted", "--cap", "3", "--json", str(tmp_path / "r.json"))
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r.json").read_text())["rows"][0]["knob_cap"] == 3
    r = run(SC_FILE, "--limit", "1", "--backend", "scripted", "--cap", "3")
    assert r.exit_code == 2 and "built-in program" in r.output


def test_progress_and_summary_of_a_run(engine, tmp_path):
    out = tmp_path / "r.json"
    r = run("sc", "--dataset", "gsm8k", "--limit", "2", "--backend", "llamacpp", "--model", "qwen2.5-coder-0.5b",
            "--json", str(out))
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("loading model qwen2.5-coder-0.5b ("))
    assert lines[first + 1].startswith("warming up: the first prompt of 2 problems")
    done = [line for line in lines if line.startswith("[")]
    assert len(done) == 2 and done[0].startswith("[1/2] idx ") and " ✓ (gold " in done[0] and "certaindex exit" in done[0]
    text = " ".join(r.output.split())
    for row in ("model │ qwen2.5-coder-0.5b", "program │ sc", "policy │ stable_vote(delta=0.04", "backend │ llamacpp",
                "scheduler │ certa", "wall time │", "(first answer after", "accuracy │ 0.500 (1/2)",
                "tokens spent (decoded) │", "tokens saved (est.) │", "full budget"):
        assert row in text, row
    data = json.loads(out.read_text())
    assert data["model"] == "qwen2.5-coder-0.5b" and data["backend"] == "llamacpp" and data["first_answer_s"] >= 0


class _Runtime:
    """What RunProgress reads of a runtime: its backend's stats and the programs running."""

    def __init__(self) -> None:
        self.decoded, self.active_programs = 0, {}
        self.backend = self

    def stats(self) -> dict:
        return {"main": self.decoded, "probe": 0, "score": 0}


def test_progress_status_line_through_the_phases():
    now = [0.0]
    p = RunProgress(3, Console(file=io.StringIO()), heartbeat_s=0, clock=lambda: now[0])
    p.phase("loading model m (1.1 GB, from the installed packages)")
    now[0] = 4.0
    assert p.status() == "loading model m (1.1 GB, from the installed packages) · 0:04"
    rt = _Runtime()
    p.watch(rt)
    assert p.status().startswith("warming up: the first prompt of 3 problems")
    rt.decoded, rt.active_programs, now[0] = 130, {"sc-1": 0, "sc-1/sub-2": 0, "sc-2": 0}, 75.0
    assert p.status() == "problems: 0 done, 2 running of 3 · 130 tokens so far · 1:15"
    p.update({"idx": 4, "answer": "7", "gold": "8", "correct": False, "exit_reason": "cap", "knob_used": 16,
              "knob_cap": 16, "tokens": {"total": 900}, "wall_s": 70.2})
    assert p.status() == "problems: 1 done (0 ✓ of 1 graded), 2 running of 3 · 900 tokens so far · 1:15"
    assert p.first_answer_s == 75.0


def test_plain_progress_repeats_the_status_while_quiet():
    buf = io.StringIO()
    with RunProgress(1, Console(file=buf, width=200), heartbeat_s=0.2) as p:
        p.phase("starting backend scripted")
        time.sleep(1.5)
    assert "… starting backend scripted · 0:0" in buf.getvalue()


@pytest.mark.parametrize("module", ["certa.cli.progress", "certa.cli.options", "certa.runtime.registry"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

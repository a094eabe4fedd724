"""The program library: registry, build(), docstring examples, and `certa run NAME` end to end (scripted)."""

from __future__ import annotations

import doctest
import importlib
import json

import pytest
from typer.testing import CliRunner

from certa.eval.datasets import data_dir
from certa.algorithms.programs.library import PROGRAMS, build, describe
from certa.cli import app
from certa.dsl import CompiledGraph
from certa.eval.errors import DatasetError
from certa.runtime.errors import ConfigError

MINE = [f"certa.algorithms.programs.{m}" for m in ("cot_probe", "self_consistency", "mcts", "rebase", "sc_mcts",
                                                 "library", "tree", "sc_cot")] + ["certa.algorithms.policies.stopping"]


def test_registry_builds_every_program():
    assert set(PROGRAMS) == {"cot", "sc", "mcts", "rebase", "sc-mcts", "sc-cot"}
    for name in PROGRAMS:
        prog = build(name)
        assert isinstance(prog, CompiledGraph) and "question" in prog.graph.state.model_fields
        assert "answers" in prog.graph.state.model_fields, "the answers protocol for ESC/AC/margin policies"
        assert prog.graph.signals and prog.policy is not None and describe(name)
    assert build("mcts", iterations=3, width=3).knob.cap == 3


def test_build_rejects_unknown_names_and_options():
    with pytest.raises(ConfigError, match="unknown program"):
        build("beam")
    with pytest.raises(ConfigError, match="no option 'branches'") as err:
        build("sc", branches=3)
    assert err.value.code == "CT300" and "branches_per_round" in (err.value.hint or "")
    with pytest.raises(ConfigError, match="bad option"):
        build("sc-mcts", widht=3)
    assert build("sc-mcts", w_exp=2.0, step_tokens=64).knob.unit == "branches"


@pytest.mark.parametrize("name", MINE)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no docstring example that runs"
    assert result.failed == 0


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_certa_run_completes_on_the_scripted_backend(name, tmp_path):
    try:
        data_dir()
    except DatasetError:
        pytest.skip("shared/data not found (set CERTA_DATA)")
    report = tmp_path / "report.json"
    res = CliRunner().invoke(app, ["run", name, "--dataset", "gsm8k", "--limit", "2", "--backend", "scripted",
                                   "--json", str(report)])
    assert res.exit_code == 0, res.output
    for text in ("accuracy", "tokens main", "tokens probe", "tokens score", "exit reasons", "certaindex"):
        assert text in res.output
    data = json.loads(report.read_text())
    assert data["n"] == 2 and len(data["rows"]) == 2
    for row in data["rows"]:
        assert row["error"] is None and row["answer"] is not None and isinstance(row["correct"], bool)
        assert row["certaindex"] and all(0.0 <= p["value"] <= 1.0 for p in row["certaindex"])
        assert set(row["tokens"]) >= {"main", "probe", "score"} and row["tokens"]["main"] > 0
    if name in ("mcts", "rebase", "sc-mcts"):
        assert data["tokens"]["score"] > 0, "self-evaluation rewards are counted as score tokens"

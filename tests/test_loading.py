"""``certa run FILE.py:prog`` / ``load_target``: the file's folder is importable while it loads."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from certa.cli import app
from certa.loading import load_target
from certa.runtime.errors import ConfigError

from .conftest import program_source

PROG = program_source("neighbourly", imports=("from {helper} import PROMPT, vote",), body='''
    @g.step(fanout=2)
    async def sample(s, ctx):
        out = await ctx.gen(PROMPT + s.question, max_tokens=32)
        return {{"answers": [out.text]}}

    @g.answer
    def answer(s):
        return vote(s.answers)

    program = g.compile()
''')
HELPER = 'PROMPT = "Q: "\n\ndef vote(answers):\n    return answers[0] if answers else None\n'


@pytest.fixture
def prog_dir(tmp_path):
    helper = f"helper_{tmp_path.name.replace('-', '_')}"  # unique: sys.modules keeps imported neighbours
    (tmp_path / f"{helper}.py").write_text(HELPER)
    (tmp_path / "prog.py").write_text(PROG.format(helper=helper))
    yield tmp_path
    sys.modules.pop(helper, None)


def test_file_imports_its_neighbours_and_sys_path_is_restored(prog_dir, monkeypatch):
    monkeypatch.chdir(prog_dir.parent)  # not the file's folder: only load_target can make helper importable
    before = list(sys.path)
    program = load_target(f"{prog_dir.name}/prog.py:program")
    assert program.name == "neighbourly"
    assert sys.path == before


def test_sys_path_is_restored_when_the_file_fails(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    before = list(sys.path)
    with pytest.raises(RuntimeError, match="boom"):
        load_target(f"{tmp_path}/broken.py")
    assert sys.path == before


def test_missing_attribute_is_a_config_error(prog_dir):
    with pytest.raises(ConfigError, match="no attribute 'nope'"):
        load_target(f"{prog_dir}/prog.py:nope")


def test_certa_run_a_file_that_imports_a_neighbour(prog_dir, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    r = CliRunner().invoke(app, ["run", f"{prog_dir}/prog.py:program", "--dataset", "gsm8k", "--limit", "1",
                                 "--backend", "scripted"])
    assert r.exit_code == 0, r.output
    assert "running" in r.output and str(prog_dir) not in sys.path

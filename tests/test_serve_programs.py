"""Which model name a served program gets: a file's program is served under its graph name."""

from __future__ import annotations

import pathlib
import textwrap

import pytest

from certa.cli.serve import _build_server
from certa.runtime.errors import ConfigError
from certa.serve.programs import ServedProgram, served_programs

ROOT = pathlib.Path(__file__).resolve().parent.parent


def graph_file(folder: pathlib.Path, stem: str, graph_name: str, attr: str = "program") -> pathlib.Path:
    f = folder / f"{stem}.py"
    f.write_text(textwrap.dedent(f'''
        import certa as ct

        class S(ct.State):
            question: str
            text: str = ""

        g = ct.Graph(S, knob=ct.Knob("iterations", cap=1), name={graph_name!r})

        @g.step
        async def think(s, ctx):
            return {{"text": (await ctx.gen(s.question, max_tokens=8)).text}}

        @g.answer
        def answer(s):
            return s.text

        {attr} = g.compile()
    '''))
    return f


def test_cli_serve_names_a_file_program_by_its_graph_name():
    server = _build_server([f"{ROOT}/examples/sc_scripted.py:program"], "scripted", None, None, [], "fcfs")
    assert list(server.programs) == ["sc"]  # the graph's name, not the attribute 'program'


def test_graph_name_wins_over_attribute_and_file_name(tmp_path):
    f = graph_file(tmp_path, "mine", "debate", attr="flow")
    assert list(served_programs([f"{f}:flow"])) == ["debate"]
    server = _build_server([f"{f}:flow", "sc"], "scripted", None, None, [], "fcfs")
    assert sorted(server.programs) == ["debate", "sc"]


def test_an_explicit_name_still_wins(tmp_path):
    f = graph_file(tmp_path, "mine", "debate")
    assert ServedProgram.resolve(f"{f}:program", "judge").name == "judge"
    assert ServedProgram.resolve(ServedProgram.resolve(f"{f}:program"), "judge").name == "judge"


def test_two_programs_under_one_name_are_refused(tmp_path):
    a = graph_file(tmp_path, "a", "same")
    b = graph_file(tmp_path, "b", "same")
    with pytest.raises(ConfigError, match="'same'"):
        served_programs([f"{a}:program", f"{b}:program"])

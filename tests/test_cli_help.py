"""CLI polish: every command's --help shows an example; bad input gives one error line plus a hint.

The command tree is walked at run time, so sub-apps mounted later (sim, calibrate, bench,
traces, serve, ...) are checked as soon as they exist.
"""

from __future__ import annotations

import inspect
import typing

import pytest
import typer
from typer.testing import CliRunner

from certa.cli import app, main

# Commands whose help still lacks an example, owned by other modules: expected to fail until fixed
# there (an XPASS in the summary means: drop the name from this set).
KNOWN_GAPS: set[str] = set()


def _walk(cmd, path=()):
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from _walk(sub, (*path, name))


COMMANDS = list(_walk(typer.main.get_command(app)))
LEAVES = [(p, c) for p, c in COMMANDS if p and not hasattr(c, "commands")]


def _id(item) -> str:
    return " ".join(item[0]) or "certa"


@pytest.mark.parametrize("item", COMMANDS, ids=_id)
def test_help_has_an_example(item, request):
    path, _ = item
    name = " ".join(path)
    if name in KNOWN_GAPS:
        request.applymarker(pytest.mark.xfail(reason=f"'certa {name} --help' has no example yet (owner's module)"))
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "Example" in res.output, f"'certa {name} --help' should show an example"


def _numeric(hint) -> bool:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint in (int, float) or (len(args) == 1 and args[0] in (int, float))


def _bad_args(cmd) -> list[str]:
    """Required arguments filled with a dummy, plus a bad numeric value (or an unknown option)."""
    hints = typing.get_type_hints(inspect.unwrap(cmd.callback)) if cmd.callback else {}
    args = ["x" for p in cmd.params if p.param_type_name == "argument" and p.required]
    numeric = [p for p in cmd.params if p.param_type_name == "option" and _numeric(hints.get(p.name))]
    return [*args, numeric[0].opts[0], "not-a-number"] if numeric else [*args, "--no-such-option"]


def _run_main(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return info.value.code, out.out + out.err


def _assert_one_line_error(code: int, output: str) -> None:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert code not in (0, None), output
    assert "Traceback" not in output and "╭" not in output, output
    assert lines and lines[0].startswith("error"), output
    assert len(lines) <= 2 and all(ln.lstrip().startswith("hint:") for ln in lines[1:]), output


@pytest.mark.parametrize("item", LEAVES, ids=_id)
def test_a_bad_option_value_gives_one_error_line(item, capsys):
    path, cmd = item
    _assert_one_line_error(*_run_main([*path, *_bad_args(cmd)], capsys))


@pytest.mark.parametrize("argv", [
    ["bogus-command"],
    ["run", "sc", "--concurrency", "0", "--backend", "scripted"],
    ["run", "no-such-program", "--backend", "scripted"],
    ["run", "sc", "--backend", "scripted", "--policy", "/nonexistent/policy.json"],
    ["run", "sc", "--resume", "--backend", "scripted"],
], ids=lambda a: " ".join(a))
def test_errors_are_one_line_with_a_hint(argv, capsys):
    _assert_one_line_error(*_run_main(argv, capsys))


def test_error_locations_in_brackets_are_printed_not_eaten_as_markup(capsys):
    from certa.cli.errors import fail
    from certa.dsl.errors import UnknownStepError

    with pytest.raises(typer.Exit):
        fail(UnknownStepError("edge 'a' -> 'smaple' names unknown step", program="sc", step="smaple",
                              hint="did you mean 'sample'?"), debug=False)
    err = capsys.readouterr().err
    assert "[program=sc step=smaple]" in err and "hint: did you mean 'sample'?" in err


def test_no_arguments_prints_help_and_help_exits_zero(capsys):
    code, out = _run_main([], capsys)
    assert "Usage" in out and "run" in out and "Traceback" not in out
    code, out = _run_main(["--help"], capsys)
    assert code == 0 and "Example" in out


@pytest.mark.parametrize("command", ["run", "serve"])
def test_help_lists_are_generated_from_the_registries(command):
    from certa.algorithms.programs.library import PROGRAMS
    from certa.runtime.backends.registry import BACKENDS
    from certa.runtime.scheduling.policies import POLICIES

    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "2000"})
    out = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert f"built-in program ({PROGRAMS.choices()})" in out and f"auto, {BACKENDS.choices()}" in out
    assert POLICIES.choices() in out
    for table in (PROGRAMS, BACKENDS, POLICIES):
        for name in table:
            assert f"{name} — {table.help(name)}" in out, (command, name)

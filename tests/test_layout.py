"""The tree reads as the design (issue 39): the command line in certa/cli/, pictures in
certa/viz/, and the old module names still import, with a DeprecationWarning naming the new."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys

import pytest

from certa.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_forwards_to_the_new_module_with_a_deprecation(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        module = importlib.import_module(old)
    new = importlib.import_module(MOVED[old])
    public = [n for n in vars(new) if not n.startswith("_")]
    assert public and all(getattr(module, n) is getattr(new, n) for n in public)


def test_the_moved_modules_doctest_runs():
    import certa.moved
    result = doctest.testmod(certa.moved)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("argv", [["-m", "certa", "--version"], ["-m", "certa.cli", "--version"]])
def test_python_dash_m_runs_the_command_line(argv):
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True).stdout
    assert out.startswith("certa ")

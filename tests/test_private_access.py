"""No module reaches into another module's private parts (issue 39 item 4).

A ``_name`` is private to the module that defines it: as a function, class or method, a
module or class attribute (annotated or assigned), or an attribute a method sets on ``self``
or ``cls``. Every source module of the package, the benchmarks and the examples is read with
``ast``, and it fails the test when it

- imports a private name from another certa module (``from certa.x import _y``), or
- reads or writes ``obj._name`` (``obj`` not ``self``/``cls``/``super()``) for a ``_name`` it
  does not define itself.

The second rule goes by name, not type: a module that defines ``_name`` for its own classes
may use it on any object. Each module that needs something of another gets a public name
for it (``Runtime.run_program``, ``Server.launch``, ``GraphProgram.book``, ...). Tests may
look inside what they test and are not checked.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("certa", "dsl", "algorithms", "runtime", "benchmarks", "examples")

# Underscored names that are public API of the standard library.
STDLIB_PUBLIC = {"_exit", "_replace", "_asdict", "_fields", "_field_defaults", "_make", "_getframe", "_current_frames"}

# Known accesses awaiting a fix, as (file, name) with a comment naming who fixes them. The rule
# itself is never relaxed: test_allow_list_has_no_stale_entries fails once an access is gone.
ALLOWED: set[tuple[str, str]] = set()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined(tree: ast.Module) -> set[str]:
    """The private names a module defines (see the module docstring)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            out.add(node.attr)
        elif isinstance(node, ast.alias) and node.asname:
            out.add(node.asname)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return {n for n in out if _private(n)}


def _own(value: ast.expr) -> bool:
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def violations(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, what) for each private access of another module's name in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    mine = defined(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("certa"):
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and not _own(node.value) \
                and node.attr not in mine and node.attr not in STDLIB_PUBLIC:
            found.append((node.lineno, ast.unparse(node)))
    return found


def sources() -> list[pathlib.Path]:
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]


def all_violations() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for path in sources():
        for line, what in violations(path):
            out.setdefault((str(path.relative_to(ROOT)), what), line)
    return out


def test_no_module_uses_another_modules_private_names():
    bad = {k: v for k, v in all_violations().items() if k not in ALLOWED}
    assert not bad, "private access across modules (give the owner a public name):\n" + "\n".join(
        f"  {f}:{line}: {what}" for (f, what), line in sorted(bad.items()))


def test_allow_list_has_no_stale_entries():
    assert not ALLOWED - set(all_violations()), f"remove from ALLOWED: {sorted(ALLOWED - set(all_violations()))}"


@pytest.mark.parametrize("code, expected", [
    ("from certa.runtime.runtime import _root", ["from certa.runtime.runtime import _root"]),
    ("def f(rt):\n    return rt._deadlines", ["rt._deadlines"]),
    ("class A:\n    def __init__(self):\n        self._x = 1\n    def same(self, other):\n        return other._x", []),
    ("import os\nos._exit(0)", []),
    ("class B(A):\n    def f(self):\n        return super()._g()", []),
])
def test_the_check_itself(tmp_path, code, expected):
    path = tmp_path / "m.py"
    path.write_text(code, encoding="utf-8")
    assert [what for _, what in violations(path)] == expected

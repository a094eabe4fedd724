"""Every ``certa.…`` name the docs mention resolves: imports in code blocks and dotted references in prose."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "SECURITY.md", *(ROOT / "docs").glob("*.md")])
FROM_IMPORT = re.compile(r"^\s*(?:>>>\s*)?from\s+(certa(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#]+)", re.M)
IMPORT = re.compile(r"^\s*(?:>>>\s*)?import\s+(certa(?:\.\w+)*)", re.M)
DOTTED = re.compile(r"(?<![\w./-])(certa(?:\.\w+)+)")


def resolve(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reachable from the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError:
        return False
    return True


def modules_imported(text: str) -> set[str]:
    """What ``import X`` / ``from X import …`` lines name as X: each must be a real module."""
    return {m.group(1) for m in IMPORT.finditer(text)} | {m.group(1) for m in FROM_IMPORT.finditer(text)}


def references(text: str) -> set[str]:
    found = {m.group(1) for m in IMPORT.finditer(text)}
    for m in FROM_IMPORT.finditer(text):
        names = m.group(2).strip("()").replace("\n", " ").split(",")
        found.update(f"{m.group(1)}.{name.split(' as ')[0].strip()}" for name in names if name.strip())
    found.update(m.group(1).rstrip(".") for m in DOTTED.finditer(text))
    # logger names and fields of the server's JSON `certa` object only look like modules
    return {r for r in found if not r.startswith(("certa.llamacpp", "certa.deadline", "certa.request_id"))}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_certa_name_in_the_docs_resolves(doc):
    text = doc.read_text(encoding="utf-8")
    missing = sorted({r for r in references(text) if not resolve(r)} |
                     {m for m in modules_imported(text) if not importable(m)})
    assert not missing, f"{doc.name} names what does not exist: {missing}"


def test_the_checker_catches_a_wrong_module():
    assert resolve("certa.algorithms.signals.entropy_certainty")
    assert not resolve("certa.algorithms.signals.no_such_signal")
    assert not resolve("certa.runtime.schedulers.fcfs")  # a module path from before the layout change
    assert not importable("certa.signals")  # `from certa.signals import …` fails: certa.signals is an attribute
    assert references("from certa.runtime import Runtime, Knob\n") == {"certa.runtime", "certa.runtime.Runtime",
                                                                    "certa.runtime.Knob"}

"""docs/concepts.md documents every public ``Context`` attribute, ``Graph`` method and field,
and ``ManagedSequence`` member (issue 21: ``ctx.payload``, ``ctx.branch``, ``max_fanout``,
``destinations``, ``@g.answer`` were documented only in docstrings or nowhere)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from certa.dsl.graph import Graph
from certa.runtime.context import Context, ManagedSequence

CONCEPTS = (Path(__file__).resolve().parents[1] / "docs" / "concepts.md").read_text(encoding="utf-8")


def public(cls: type) -> list[str]:
    names = {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}
    names |= set(getattr(cls, "__slots__", ()))
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    return sorted(n for n in names if not n.startswith("_"))


def documented(prefix: str, name: str) -> bool:
    return re.search(rf"`@?{prefix}\.{name}\b", CONCEPTS) is not None


@pytest.mark.parametrize("name", public(Context))
def test_context_attribute_is_documented(name):
    assert documented("ctx", name), f"docs/concepts.md does not document ctx.{name}"


@pytest.mark.parametrize("name", public(Graph))
def test_graph_member_is_documented(name):
    assert documented("g", name), f"docs/concepts.md does not document g.{name}"


@pytest.mark.parametrize("name", public(ManagedSequence))
def test_sequence_member_is_documented(name):
    assert documented("seq", name), f"docs/concepts.md does not document seq.{name}"


@pytest.mark.parametrize("option", ["fanout", "max_fanout", "knob", "writes", "max_visits", "entry", "name"])
def test_step_options_are_documented(option):
    assert option in inspect.signature(Graph.step).parameters
    assert re.search(rf"`{option}=", CONCEPTS), f"@g.step option {option}= is not documented"


@pytest.mark.parametrize("option", ["destinations", "max_fanout"])
def test_branch_options_are_documented(option):
    assert option in inspect.signature(Graph.branch).parameters
    assert re.search(rf"`{option}=", CONCEPTS)

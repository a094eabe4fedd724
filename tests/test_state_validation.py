"""State updates are validated against the state model (issue 20 item 6): wrong types and
un-awaited coroutines are coded errors naming program and step; an exception in ``@answer``,
a certaindex, a router or a reducer surfaces as CT201 naming the function that raised."""

from __future__ import annotations

import gc
import warnings
from typing import Any, Literal

import pytest

import certa as ct
from certa.dsl import errors as E
from certa.dsl.state import apply_update, reducers_of
from certa.runtime.errors import StepFailedError


class S(ct.State):
    question: str
    n: int = 0
    answer: str | None = None
    answers: ct.Appended[list[str]] = []


def _run(g: ct.Graph, **inputs: Any) -> ct.Result:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", E.CompileWarning)
        program = g.compile()
    return ct.Runtime(ct.ScriptedBackend()).run_sync(program, return_errors=True, **inputs)


def test_wrong_typed_update_is_a_coded_error_naming_program_and_step():
    g = ct.Graph(S, name="typed")

    @g.step
    def bad(s: S):
        return {"n": "not-an-int", "question": 123}

    r = _run(g, question="q")
    assert r.exit_reason == "error" and isinstance(r.error, E.InvalidUpdateError)
    assert isinstance(r.error, StepFailedError) and r.error.code == "CT113"
    assert r.error.step == "bad" and r.error.program and r.error.program.startswith("typed")
    assert "'n'" in str(r.error) and "not-an-int" in str(r.error)


def test_exact_updates_apply_and_coercible_ones_are_refused():
    """issue 40 item 12: ``"7"`` for an int field used to become ``7``; values are checked
    strictly now (CT113), no silent coercion."""
    g = ct.Graph(S, name="ok")

    @g.step
    def good(s: S):
        return {"n": 7, "answers": ["a", "b"], "answer": "x"}

    r = _run(g, question="q")
    assert r.ok and r.state.n == 7 and r.state.answers == ["a", "b"] and r.answer == "x"
    g2 = ct.Graph(S, name="coerce")
    g2.step(lambda s: {"n": "7"}, name="coerce")
    r2 = _run(g2, question="q")
    assert isinstance(r2.error, E.InvalidUpdateError) and r2.state.n == 0


def test_an_appended_item_of_the_wrong_type_is_refused():
    s = S(question="q")
    apply_update(s, {"answers": ["a"]}, reducers_of(S))
    with pytest.raises(E.InvalidUpdateError, match="answers"):   # a bare item is refused too (a list of items)
        apply_update(s, {"answers": "b"}, reducers_of(S), program="p", step="vote")
    with pytest.raises(E.InvalidUpdateError, match="answers"):
        apply_update(s, {"answers": [object()]}, reducers_of(S), program="p", step="vote")
    assert s.answers == ["a"]


def test_unawaited_coroutine_is_refused_with_a_hint_to_await():
    g = ct.Graph(S, name="noawait")

    @g.step
    async def gen(s: S, ctx: ct.Context):
        return {"answer": ctx.gen(s.question)}  # forgot await

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the coroutine is closed, never "never awaited"
        r = _run(g, question="q")
        gc.collect()
    assert r.exit_reason == "error" and isinstance(r.error, E.InvalidUpdateError)
    assert r.error.step == "gen" and "did you forget await?" in str(r.error)
    assert not any(hasattr(v, "__await__") for v in r.state.model_dump().values())


def test_awaitable_in_an_untyped_field_or_list_is_refused_too():
    class A(ct.State):
        blob: Any = None
        items: ct.Appended[list[Any]] = []

    async def later() -> int:
        return 1

    for update in ({"blob": later()}, {"items": [later()]}):
        with pytest.raises(E.InvalidUpdateError, match="did you forget await"):
            apply_update(A(), update, reducers_of(A), program="p", step="s")


def _one_step_graph(name: str) -> ct.Graph:
    """A graph whose one step, ``first``, sets ``n``; a test adds what raises."""
    g = ct.Graph(S, name=name)

    @g.step
    def first(s: S):
        return {"n": 1}

    return g


def _ct201(g: ct.Graph) -> StepFailedError:
    """The CT201 that running ``g`` ends with (an error result: no answer)."""
    r = _run(g, question="q")
    assert r.exit_reason == "error" and not r.ok and r.answer is None
    assert isinstance(r.error, StepFailedError) and r.error.code == "CT201"
    return r.error


def test_exception_in_answer_surfaces_on_the_result():
    g = _one_step_graph("ans")

    @g.answer
    def final(s: S):
        return s.answers[0]  # IndexError

    err = _ct201(g)
    assert "'final'" in str(err) and "IndexError" in str(err)


def test_ct201_names_the_certaindex_that_raised():
    g = ct.Graph(S, knob=ct.Knob("branches", cap=2), name="ci")

    @g.step(fanout=2)
    def sample(s: S):
        return {"answers": ["a"]}

    @g.certaindex
    def agreement(s: S) -> float:
        return 1 / 0

    err = _ct201(g)
    assert "certaindex 'agreement'" in str(err) and "ZeroDivisionError" in str(err)


def test_ct201_names_the_router_that_raised():
    g = _one_step_graph("rt")

    @g.step
    def second(s: S):
        return None

    def pick(s: S) -> Literal["second", "__end__"]:
        raise KeyError("route")

    g.branch("first", pick)

    err = _ct201(g)
    assert "router 'pick'" in str(err) and err.step == "first"


def test_ct201_names_the_reducer_that_raised():
    def strict_sum(old: int, new: int) -> int:
        raise ValueError("no")

    class R(ct.State):
        total: ct.Annotated[int, ct.Reducer(strict_sum)] = 0

    with pytest.raises(StepFailedError, match="reducer 'strict_sum' of field 'total'") as info:
        apply_update(R(), {"total": 1}, reducers_of(R), program="p", step="add")
    assert info.value.code == "CT201" and info.value.step == "add"


def test_constrained_field_is_validated_even_for_exact_types():
    from pydantic import Field

    class C(ct.State):
        k: ct.Annotated[int, Field(ge=0)] = 0

    with pytest.raises(E.InvalidUpdateError):
        apply_update(C(), {"k": -1}, reducers_of(C), program="p", step="s")

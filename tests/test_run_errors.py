"""Runtime.run / run_sync raise a program's coded error by default; ``return_errors=True``
returns the Result carrying it, and batch runs use that (issue 21)."""

from __future__ import annotations

import asyncio

import pytest

import certa as ct
from certa.batch import run_dataset
from certa.eval.datasets import Problem
from certa.runtime.errors import ConfigError, LimitExceededError, StepFailedError


class Q(ct.State):
    question: str
    answer: str | None = None


def failing_on(word: str) -> ct.CompiledGraph:
    """One step that answers the question, except that it raises ValueError on ``word``."""
    g = ct.Graph(Q, name="picky")

    @g.step
    async def think(s: Q, ctx: ct.Context):
        if word in s.question:
            raise ValueError(f"cannot think about {word}")
        return {"answer": (await ctx.gen(s.question)).text}

    return g.compile()


def test_a_step_exception_raises_the_coded_error_naming_program_and_step():
    rt = ct.Runtime(ct.ScriptedBackend(responses=["4"]))
    with pytest.raises(StepFailedError) as e:
        rt.run_sync(failing_on("boom"), question="boom?")
    err = e.value
    assert err.code == "CT201" and err.step == "think" and err.branch == 0 and err.program.startswith("picky-")
    assert isinstance(err.__cause__, ValueError) and "cannot think about boom" in str(err)
    assert str(err).startswith("CT201 step-failed [program=picky-")
    assert rt.run_sync(failing_on("boom"), question="fine?").answer == "4"   # and a good one still returns


def test_a_coded_error_from_a_step_keeps_its_class_and_the_async_run_raises_too():
    g = ct.Graph(Q, name="limited")

    @g.step
    def refuse(s: Q):
        raise LimitExceededError("too much")

    with pytest.raises(LimitExceededError) as e:
        asyncio.run(ct.Runtime(ct.ScriptedBackend()).run(g.compile(), question="q"))
    assert e.value.code == "CT205" and e.value.step == "refuse" and e.value.program.startswith("limited-")


def test_a_missing_input_raises_for_a_graph_and_for_a_program_class():
    with pytest.raises(ConfigError) as e:
        ct.Runtime(ct.ScriptedBackend()).run_sync(failing_on("x"))   # no question=
    assert e.value.code == "CT300" and "question" in str(e.value) and e.value.program.startswith("picky")

    class Echo(ct.Program):
        def __init__(self, q: str) -> None:
            super().__init__()
            self.state = {"q": q}

        async def execute(self, ctx):
            return False

    with pytest.raises(ConfigError, match="bad inputs for program 'Echo'") as e:
        ct.Runtime(ct.ScriptedBackend()).run_sync(Echo)
    assert isinstance(e.value.__cause__, TypeError)


def test_an_answer_function_that_raises_is_raised_chained():
    g = ct.Graph(Q, name="ans")
    g.step(name="noop")(lambda s: None)
    g.answer(lambda s: [][0])
    with pytest.raises(StepFailedError, match="IndexError") as e:
        ct.Runtime(ct.ScriptedBackend()).run_sync(g.compile(), question="q")
    assert isinstance(e.value.__cause__, IndexError)


def test_return_errors_gives_the_result_carrying_the_error():
    rt = ct.Runtime(ct.ScriptedBackend())
    r = rt.run_sync(failing_on("boom"), question="boom", return_errors=True)
    assert r.exit_reason == "error" and not r.ok and r.answer is None
    assert isinstance(r.error, StepFailedError) and r.error.step == "think" and r.error.program == r.program_id
    missing = asyncio.run(rt.run(failing_on("x"), return_errors=True))
    assert missing.exit_reason == "error" and missing.error.code == "CT300"


def test_run_many_finishes_the_rest_when_one_program_fails():
    rt = ct.Runtime(ct.ScriptedBackend(responses=["ok"]))
    results = rt.run_many_sync([(failing_on("boom"), {"question": q}) for q in ("a", "boom", "c")])
    assert [r.exit_reason for r in results] == ["done", "error", "done"]
    assert results[1].error.code == "CT201" and [r.answer for r in results] == ["ok", None, "ok"]


def test_a_dataset_run_with_one_failing_problem_finishes_the_others():
    problems = [Problem("gsm8k", i, q, "4") for i, q in enumerate(["2+2?", "boom", "1+3?"])]
    report = asyncio.run(run_dataset(failing_on("boom"), problems, ct.Runtime(ct.ScriptedBackend(responses=["4"]))))
    rows = {r["idx"]: r for r in report.rows}
    assert report.n == 3 and report.exit_reasons() == {"done": 2, "error": 1}
    assert rows[1]["error"].startswith("CT201 step-failed") and "think" in rows[1]["error"]
    assert rows[0]["correct"] and rows[2]["correct"] and rows[1]["correct"] is False

"""Shared test programs: the Self-Consistency graph most runtime tests drive, and its pieces.

``make_sc`` builds it (``from .conftest import make_sc``, or the ``sc`` fixture): ``fanout``
branches per round sample ``ctx.gen(question)``, ``agreement`` is the certaindex, ``vote``
the answer, the knob counts branches up to ``cap``.

``tiny_problems`` (fixture) holds the problems of ``TINY_TRACES``, ``tests/data/traces_tiny.jsonl``.
``stop_process(proc)`` ends a server a test started (terminate, then kill).
``program_source(name, body)`` is the text of a program file a test writes (``S``, ``g``, then ``body``).
``load_example(name)`` imports ``examples/<name>.py`` as a fresh module (``EXAMPLES`` is that folder).
"""

from __future__ import annotations

from collections import Counter
import importlib.util
import pathlib
import subprocess
import textwrap
from collections.abc import Callable
from types import ModuleType

import pytest

import certa as ct

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
TINY_TRACES = pathlib.Path(__file__).resolve().parent / "data" / "traces_tiny.jsonl"


def load_example(name: str) -> ModuleType:
    """Execute ``examples/<name>.py`` as a new module (not registered in ``sys.modules``) and return it."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STATE_SOURCES = {
    "answers": 'class S(ct.State):\n    question: str\n    answers: ct.Appended[list[str]] = []\n',  # SC's fields
    "answer": 'class S(ct.State):\n    question: str\n    answer: str = ""\n',
}


def program_source(name: str, body: str, *, state: str = "answers", knob: str = 'ct.Knob("branches", cap=2)',
                   imports: tuple[str, ...] = ()) -> str:
    """The text of a program file: ``imports``, ``import certa as ct``, the state ``S`` (``STATE_SOURCES[state]``),
    ``g = ct.Graph(S, knob=<knob>, name=<name>)``, then ``body`` dedented (the steps, and ``program = g.compile()``).
    For example ``program_source("p", "program = g.compile()")`` is a branches-knob program with no step.
    """
    head = "\n".join([*imports, "import certa as ct", "", "", STATE_SOURCES[state]])
    return f"{head}\ng = ct.Graph(S, knob={knob}, name={name!r})\n\n" + textwrap.dedent(body)


def wait_for_serve_port(proc: subprocess.Popen, timeout_s: float = 30.0) -> int:
    """Read a ``certa serve --port 0`` process's log until uvicorn names its port; the port."""
    import re
    import time

    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if m := re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line):
            return int(m.group(1))
    raise AssertionError("certa serve did not report its port:\n" + "".join(lines))


def stop_process(proc: subprocess.Popen, grace_s: float = 10.0, kill_wait_s: float = 5.0) -> None:
    """Ask ``proc`` to exit (SIGTERM); kill it if it is still there ``grace_s`` later, then reap it."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(kill_wait_s)


class SC(ct.State):
    question: str
    answers: ct.Appended[list[str]] = []


def last_word(text: str) -> str:
    """The answer a scripted response ends with (``"... the answer is 4"`` -> ``"4"``)."""
    words = text.split()
    return words[-1] if words else ""


def agreement(s: SC) -> float:
    """Share of the other answers that agree with the most common one (0 with under two)."""
    if len(s.answers) < 2:
        return 0.0
    top = Counter(s.answers).most_common(1)[0][1]
    return (top - 1) / (len(s.answers) - 1)


def never(s: ct.State) -> float:
    """A certaindex that never settles: runs go to their cap (or are cancelled)."""
    return 0.0


def vote(s: SC) -> str | None:
    """The most common answer; ties go to the smallest, so the answer does not depend on timing."""
    return min(Counter(s.answers).most_common(), key=lambda kv: (-kv[1], kv[0]))[0] if s.answers else None


def make_sc(cap: int = 8, fanout: int = 4, policy: ct.Policy | None = None, *, name: str = "sc",
            max_tokens: int = 50, pick: Callable[[str], str] = last_word,
            certaindex: Callable[[SC], float] = agreement) -> ct.CompiledGraph:
    """Self-Consistency on :class:`SC`: ``fanout`` looping lanes up to ``cap`` branches."""
    g = ct.Graph(SC, knob=ct.Knob("branches", cap=cap), name=name)

    @g.step(fanout=fanout)
    async def sample(s: SC, ctx: ct.Context):
        out = await ctx.gen(s.question, temperature=0.7, max_tokens=max_tokens)
        return {"answers": [pick(out.text)]}

    g.certaindex(certaindex, name=certaindex.__name__)
    g.answer(vote)
    g.loop("sample")
    return g.compile(policy=policy)


@pytest.fixture
def sc() -> Callable[..., ct.CompiledGraph]:
    """The :func:`make_sc` builder."""
    return make_sc


@pytest.fixture(scope="module")
def tiny_problems() -> list:
    """The 12 problems of ``TINY_TRACES`` (loaded once per test module; tests must not mutate them)."""
    from certa.eval.traces import load_traces  # on first use: most tests never read traces
    return load_traces(TINY_TRACES)

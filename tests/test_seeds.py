"""Seeds in sub-programs (issue 40 item 10): ``seed=ctx.branch`` repeated in every ``ctx.call``,
so every sub-program sampled the same text. A sub-program's seeds are now salted with its call
path: unique per (program, step, branch, call path), the same in every run and process; a
root program's seeds go out as given."""

from __future__ import annotations

import subprocess
import sys

import certa as ct
from certa.runtime.seeds import call_salt, salted


class Inner(ct.State):
    question: str
    texts: ct.Appended[list[str]] = []


class Outer(ct.State):
    question: str
    texts: ct.Appended[list[str]] = []


def by_seed(req) -> str:
    return f"sample with seed {req.seed}"


def programs() -> ct.CompiledGraph:
    inner = ct.Graph(Inner, name="inner")

    @inner.step(fanout=2)
    async def draft(s, ctx):
        return {"texts": [(await ctx.gen(s.question, temperature=0.7, seed=ctx.branch)).text]}

    inner.answer(lambda s: s.texts)
    inner_c = inner.compile()
    outer = ct.Graph(Outer, name="outer")

    @outer.step(fanout=3)
    async def sample(s, ctx):
        first = await ctx.call(inner_c, question=s.question)
        again = await ctx.call(inner_c, question=s.question)   # a second call of the same branch
        mine = await ctx.gen(s.question, temperature=0.7, seed=ctx.branch)
        return {"texts": [*first.answer, *again.answer, mine.text]}

    outer.answer(lambda s: s.texts)
    return outer.compile()


def run_once() -> tuple[list[int | None], list[int | None]]:
    b = ct.ScriptedBackend(responses=by_seed)
    ct.Runtime(b).run_sync(programs(), question="q")
    sub = sorted(r.seed for r in b.requests if "/" in r.program_id)
    root = sorted(r.seed for r in b.requests if "/" not in r.program_id)
    return sub, root


def test_sub_programs_sample_with_their_own_seeds_and_the_root_keeps_its_own():
    sub, root = run_once()
    assert len(sub) == 12 and len(set(sub)) == 12   # 3 branches x 2 calls x 2 drafts: no two alike
    assert root == [0, 1, 2]   # the root's seed=ctx.branch is sent as given
    assert run_once() == (sub, root)   # deterministic: the same tree sends the same seeds


def test_the_salt_is_stable_across_processes_and_keeps_seeds_apart():
    # a fixed value: a Python hash() (randomised per process) would break reproducibility
    assert call_salt(None, "sample", 0, 0, "inner") == 1817168004
    code = "from certa.runtime.seeds import call_salt; print(call_salt(None, 'sample', 0, 0, 'inner'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert out.stdout.strip() == "1817168004"
    salt = call_salt(call_salt(None, "a", 1, 0, "x"), "b", 2, 1, "y")   # a nested call path
    assert len({salted(s, salt) for s in range(10_000)}) == 10_000 and all(
        0 <= salted(s, salt) < 2 ** 31 for s in (-5, 0, 2 ** 40))

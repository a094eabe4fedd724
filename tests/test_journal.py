"""Journaled batch runs: `certa run --journal` survives SIGKILL and `--resume` loses and repeats nothing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from certa.batch import Journal, run_dataset
from certa.runtime.errors import ConfigError

from .conftest import program_source

N = 30
SLOW_PROGRAM = program_source("slow", imports=("import asyncio, os", "from certa.algorithms.answers import extract_answer"),
                              body='''
    @g.step(fanout=2)
    async def sample(s, ctx):
        await asyncio.sleep(float(os.environ.get("CT_STEP_DELAY", "0.04")))  # test only: a slow step
        out = await ctx.gen(s.question, temperature=0.7, seed=ctx.branch, max_tokens=64)
        return {"answers": [extract_answer(out.text, "gsm8k") or ""]}

    @g.certaindex
    def agree(s) -> float:
        return 1.0 if len(s.answers) == 2 and len(set(s.answers)) == 1 else 0.0

    @g.answer
    def vote(s):
        return min(s.answers) if s.answers else None

    g.loop("sample")
    program = g.compile()
''')


@pytest.fixture
def batch(tmp_path):
    prog = tmp_path / "slow_prog.py"
    prog.write_text(SLOW_PROGRAM)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(N)))
    return prog, data


def certa_run(prog, data, journal, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "certa", "run", f"{prog}:program", "--backend", "scripted",
                             "--dataset", str(data), "--journal", str(journal), "--concurrency", "3", *extra],
                            cwd=journal.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def complete_rows(path) -> list[dict]:
    text = path.read_text()
    lines = text.split("\n")  # the last piece is "" or a torn write
    return [json.loads(line) for line in lines[:-1] if line.strip()]


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_loses_and_repeats_nothing(batch, tmp_path, monkeypatch):
    prog, data = batch
    journal = tmp_path / "run.jsonl"
    proc = certa_run(prog, data, journal)
    try:
        deadline = time.monotonic() + 60
        while not journal.exists() or journal.read_text().count("\n") < 4:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the run never journaled anything"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    before = complete_rows(journal)
    assert 4 <= len(before) < N, f"the kill must land mid-run ({len(before)} of {N} done)"
    raw_before = journal.read_bytes()

    resumed = certa_run(prog, data, journal, "--resume")
    assert resumed.wait(timeout=120) == 0, resumed.stderr.read()
    rows = complete_rows(journal)
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)) == N, "every problem exactly once"
    assert set(keys) == {f"data:{i}" for i in range(N)}
    good = raw_before[: raw_before.rfind(b"\n") + 1]
    assert journal.read_bytes().startswith(good), "rows journaled before the kill are kept as they were"
    assert journal.read_text().endswith("\n")

    # a second resume has nothing left to do and appends nothing
    again = certa_run(prog, data, journal, "--resume")
    assert again.wait(timeout=120) == 0
    assert complete_rows(journal) == rows

    # the results equal an uninterrupted run's
    monkeypatch.setenv("CT_STEP_DELAY", "0")
    from certa.eval.datasets import load_dataset
    from certa.loading import load_target
    from certa.runtime import Runtime
    report = asyncio.run(run_dataset(load_target(f"{prog}:program"), load_dataset(str(data)), Runtime("scripted"),
                                     concurrency=8))
    reference = {r["key"]: (r["answer"], r["correct"], r["exit_reason"], r["tokens"]["main"]) for r in report.rows}
    assert {r["key"]: (r["answer"], r["correct"], r["exit_reason"], r["tokens"]["main"]) for r in rows} == reference
    print(f"\njournal: killed with {len(before)}/{N} rows journaled; after --resume {len(rows)} rows, "
          f"{len(set(keys))} distinct, 0 lost, 0 duplicated")


def test_each_row_is_fsynced_before_it_is_reported(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    j = Journal(tmp_path / "j.jsonl", resume=False)
    synced.clear()
    for i in range(5):
        j.append({"key": f"d:{i}", "answer": i})
        assert len(synced) == i + 1 and (tmp_path / "j.jsonl").read_text().count("\n") == i + 1
    j.close()


def test_resume_cuts_a_torn_tail_so_appends_stay_valid(tmp_path):
    path = tmp_path / "j.jsonl"
    rows = [json.dumps({"key": f"d:{i}", "answer": i}) for i in range(3)]
    path.write_text("\n".join(rows) + "\n" + '{"key": "d:3", "ans')  # killed mid-write
    j = Journal(path, resume=True)
    assert sorted(j.done) == ["d:0", "d:1", "d:2"]
    j.append({"key": "d:3", "answer": 3})
    j.close()
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == ["d:0", "d:1", "d:2", "d:3"]


def test_resume_cuts_trailing_garbage_but_refuses_corruption_in_the_middle(tmp_path):
    path = tmp_path / "j.jsonl"
    good = json.dumps({"key": "d:0"}) + "\n"
    path.write_bytes(good.encode() + b"\x00\x00\x00\x00\n")  # zero-filled tail after a crash
    j = Journal(path, resume=True)
    j.close()
    assert path.read_text() == good and list(j.done) == ["d:0"]
    path.write_text(good + "[" * 100_000 + "]" * 100_000 + "\n")  # nested too deep for json: garbage tail
    Journal(path, resume=True).close()
    assert path.read_text() == good
    path.write_text(good + "not json\n" + good)
    with pytest.raises(ConfigError, match="line 2"):
        Journal(path, resume=True)


def test_existing_journal_needs_resume(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps({"key": "d:0"}) + "\n")
    with pytest.raises(ConfigError, match="--resume"):
        Journal(path, resume=False)

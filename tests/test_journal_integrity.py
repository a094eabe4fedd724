"""Journal integrity (issue 20, item 7): rows of the wrong types and a directory as the journal
are coded errors; a journal written by another program is refused on resume; a problem's
trace line is durable before its journal row, so a kill between the two loses no trace."""

from __future__ import annotations

import asyncio
import json

import pytest

import certa as ct
from certa.algorithms.programs.library import build
from certa.batch import Journal, program_identity, run_dataset
from certa.eval.collect import TraceFile
from certa.eval.datasets import Problem
from certa.recording import Recorder
from certa.runtime.errors import ConfigError

PROBLEMS = [Problem("gsm8k", i, f"What is {i} + {i}?", str(2 * i)) for i in range(4)]


def runtime() -> ct.Runtime:
    return ct.Runtime(ct.ScriptedBackend(lambda req: "so \\boxed{4}"))


def run(program, journal, **kw):
    return asyncio.run(run_dataset(program, PROBLEMS, runtime(), concurrency=1, journal=journal, **kw))


@pytest.mark.parametrize("row, field", [
    ({"key": "gsm8k:0", "tokens": "many", "exit_reason": "done"}, "tokens"),
    ({"key": "gsm8k:0", "tokens": {"total": "3"}, "exit_reason": "done"}, "tokens['total']"),
    ({"key": "gsm8k:0", "tokens": {"total": 3}, "exit_reason": 7}, "exit_reason"),
    ({"key": 5, "tokens": {"total": 3}, "exit_reason": "done"}, "key"),
    ({"key": "gsm8k:0", "correct": "yes", "tokens": {"total": 3}, "exit_reason": "done"}, "correct"),
])
def test_a_row_of_the_wrong_types_is_a_coded_error(tmp_path, row, field):
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ConfigError, match=r"line 1: field|line 1: tokens") as info:
        run(build("sc", cap=4), Journal(path, resume=True))
    assert field.split("[")[0] in info.value.message


def test_a_resumed_row_missing_its_report_fields_is_a_coded_error(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps({"key": "gsm8k:1"}) + "\n")
    with pytest.raises(ConfigError, match="lacks tokens"):
        run(build("sc", cap=4), Journal(path, resume=True))


def test_a_directory_as_journal_is_a_coded_error(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        Journal(tmp_path, resume=True)
    with pytest.raises(ConfigError, match="is a directory"):
        Journal(tmp_path, resume=False)


def test_resuming_with_another_program_is_refused(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path, resume=False)
    asyncio.run(run_dataset(build("sc", cap=4), PROBLEMS[:2], runtime(), journal=j))
    j.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["program_identity"] for r in rows} == {program_identity(build("sc", cap=4))}
    for other in (build("sc", cap=8), build("cot")):
        with pytest.raises(ConfigError, match="another program"):
            run(other, Journal(path, resume=True))
    j = Journal(path, resume=True)  # the same program resumes: 2 reused, 2 run
    report = run(build("sc", cap=4), j)
    j.close()
    assert report.n == 4 and len(path.read_text().splitlines()) == 4


def test_the_trace_line_is_written_before_the_journal_row(tmp_path, monkeypatch):
    journal, traces = tmp_path / "j.jsonl", tmp_path / "traces.jsonl"
    real_append = TraceFile.append

    def killed_at_problem_2(self, row):
        if row["idx"] == 2:
            raise OSError("killed mid-write")
        real_append(self, row)

    monkeypatch.setattr(TraceFile, "append", killed_at_problem_2)
    rt = runtime()
    rec = Recorder.attach(rt, traces)
    j = Journal(journal, resume=False)
    with pytest.raises(OSError):
        asyncio.run(run_dataset(build("sc", cap=4), PROBLEMS, rt, concurrency=1, journal=j, record=rec.on_row))
    j.close()
    journaled = {json.loads(line)["idx"] for line in journal.read_text().splitlines()}
    assert journaled == {0, 1}, "problem 2's row was journaled although its trace was lost"
    monkeypatch.setattr(TraceFile, "append", real_append)
    rt = runtime()  # resume: problem 2 reruns, so its trace is written this time
    rec = Recorder.attach(rt, traces)
    j = Journal(journal, resume=True)
    asyncio.run(run_dataset(build("sc", cap=4), PROBLEMS, rt, concurrency=1, journal=j, record=rec.on_row))
    j.close()
    assert sorted(int(i) for i in TraceFile(traces).done) == [0, 1, 2, 3]
    assert len(journal.read_text().splitlines()) == 4

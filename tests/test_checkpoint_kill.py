"""SIGKILL a real process mid-program, resume its thread from SQLite here: nothing lost or repeated.

The child runs ``tests.test_checkpoint.build`` (plan -> 3 joined samples -> vote -> finish) on
the scripted backend with a SQLite checkpointer; the request of sample branch 3 never answers
and writes a marker file when it is sent. The test waits for that marker and for the rows of
the two other samples (polling the file and the database, no fixed sleep), kills the child
with SIGKILL, then resumes the thread in this process.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

import certa as ct
from certa.runtime.checkpoint_sqlite import SqliteCheckpointer

from .test_checkpoint import build, sent

ROOT = pathlib.Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import pathlib, sys
    import certa as ct
    from certa.runtime.checkpoint_sqlite import SqliteCheckpointer
    from tests.test_checkpoint import build

    db, marker, log = sys.argv[1:4]

    def latency(req):
        with open(log, "a") as fh:  # every request the child sends, for the test to count
            fh.write(f"{req.step} {req.branch}\\n")
        if (req.step, req.branch) == ("sample", 3):
            pathlib.Path(marker).write_text(req.rid)
            return 3600.0  # never answers: the child is killed while it waits
        return 0.0

    rt = ct.Runtime(ct.ScriptedBackend(latency=latency), checkpointer=SqliteCheckpointer(db))
    rt.run_sync(build(), question="q", thread_id="job-1")
    print("FINISHED")  # never reached
""")


def _wait_until(cond, proc: subprocess.Popen, what: str, limit_s: float = 120.0) -> None:
    """Poll ``cond`` until it holds; fail if the child exits first or ``limit_s`` passes."""
    deadline = time.monotonic() + limit_s
    while not cond():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the child exited ({proc.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)  # a polling interval, not a synchronisation


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_mid_program_then_resume_from_sqlite_loses_and_repeats_nothing(tmp_path):
    db, marker, log = tmp_path / "threads.db", tmp_path / "in_flight", tmp_path / "requests.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(marker), str(log)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader = SqliteCheckpointer(db)

    def samples_saved() -> bool:
        steps = {(c.step, c.branch) for c in reader.history("job-1")}
        return {("sample", 1), ("sample", 2)} <= steps

    try:
        _wait_until(marker.exists, proc, "sample 3's request was sent")
        _wait_until(samples_saved, proc, "the rows of samples 1 and 2")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    before = SqliteCheckpointer(db)  # a fresh connection: what the file holds after the kill
    newest = before.latest("job-1")
    assert newest.status == "running" and newest.next == ("sample",)
    completed = {(c.step, c.branch) for c in before.history("job-1") if c.step}
    assert completed == {("plan", 0), ("sample", 1), ("sample", 2)}
    child_sent = Counter(tuple(line.split()) for line in log.read_text().splitlines())
    assert child_sent == Counter({("plan", "0"): 1, ("sample", "1"): 1, ("sample", "2"): 1, ("sample", "3"): 1})

    rt = ct.Runtime(ct.ScriptedBackend(), checkpointer=before)
    resumed = rt.run_sync(build(), thread_id="job-1")
    ref = ct.Runtime(ct.ScriptedBackend()).run_sync(build(), question="q")
    assert sent(rt.backend) == Counter({("sample", 3): 1, ("vote", 4): 1, ("finish", 5): 1})  # only unfinished work
    assert not completed & set(sent(rt.backend))
    assert resumed.exit_reason == "done" and resumed.answer == ref.answer and resumed.state == ref.state
    assert resumed.tokens.requests == ref.tokens.requests == 6
    assert [c.step for c in reversed(before.history("job-1")) if c.step] == \
        ["plan", "sample", "sample", "sample", "vote", "finish"]

"""Ctrl-C always gives the shell back (issue 20, item 8): even when a program's cleanup stalls
(here a step that ignores its cancel and blocks for a minute), ``certa run`` exits with 130
within seconds of the Ctrl-C, and says why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import certa as ct
from certa.batch import exit_if_interrupt_stalls

from .conftest import program_source

STUBBORN = program_source("stubborn", state="answer", knob='ct.Knob("iterations", cap=1)',
                          imports=("import asyncio, os, time",), body='''
    @g.step
    async def stall(s, ctx):
        open(os.environ["CT_STARTED"], "w").close()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            time.sleep(60)  # a cleanup that never ends (a blocking call in the loop thread)
        return {"answer": "1"}

    program = g.compile()
''')


@pytest.mark.slow
def test_ctrl_c_exits_within_seconds_even_when_cleanup_stalls(tmp_path):
    (tmp_path / "prog.py").write_text(STUBBORN)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    env = dict(os.environ, CT_STARTED=str(tmp_path / "started"))
    proc = subprocess.Popen([sys.executable, "-m", "certa", "run", f"{tmp_path / 'prog.py'}:program",
                             "--backend", "scripted", "--dataset", str(data)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the program never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert took < 10, f"the shell came back {took:.1f}s after Ctrl-C"
    assert "cleanup did not finish" in err


async def test_the_watchdog_is_only_armed_by_a_ctrl_c_and_restores_the_handler():
    before = signal.getsignal(signal.SIGINT)

    async def work():
        return 7

    assert await exit_if_interrupt_stalls(work(), grace_s=0.1) == 7
    assert signal.getsignal(signal.SIGINT) is before
    from certa import batch
    assert not batch._watchdog_armed.is_set()
    assert ct is not None

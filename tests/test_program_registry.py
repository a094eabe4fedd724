"""Every registered program compiles, runs, serves and (where a trace format can) replays
(issue 39 item 2): the tests iterate :data:`~certa.algorithms.programs.library.PROGRAMS`, so a
newly registered program is tested without editing this file."""

from __future__ import annotations

import pytest

import certa as ct
from certa.algorithms.programs.library import PROGRAMS, build
from certa.simulation.synth import synth_traces

ANSWER = "so the answer is \\boxed{18}."


def scripted():
    return ct.ScriptedBackend(responses=[ANSWER], probe=lambda text, suffix: "18} done",
                              scores=lambda r: {"Yes": 0.8, "No": 0.2})


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_registered_program_compiles_and_runs(name):
    program = build(name)
    assert callable(program.new) and program.policy is not None
    r = ct.Runtime(scripted()).run_sync(program, question="What is 9 * 2?")
    assert r.error is None and r.answer == "18" and r.tokens.main > 0
    assert r.certaindex and all(0.0 <= p.value <= 1.0 for p in r.certaindex)


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_every_registered_program_serves(name):
    from certa.serve import Server
    async with Server(name, scripted(), max_knob=8) as server:
        c = await server.complete("What is 9 * 2?")
    assert server.models == [name] and c.answer == "18" and c.content == "\\boxed{18}"
    assert c.usage()["completion_tokens"] > 0 and c.exit_reason


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_registered_program_says_how_it_replays_and_does(name):
    kind = PROGRAMS.entry(name).meta["replay"]  # declared, None included: no silent gap
    if kind is None:
        pytest.skip(f"{name}: no trace format records what it needs (its entry says replay=None)")
    problems = synth_traces(4, seed=0, samples=8, probed=8)
    if kind == "sc-cot":  # the program itself, on the recorded chains
        from certa.eval.bench_sc_cot import replay_sc_cot
        scores = replay_sc_cot(problems, build(name))
    else:
        from certa.algorithms.programs.cot_probe import CERTA_INTERVAL, certa_signal
        from certa.eval.replay_eval import Replayer
        cot = {"k": certa_signal().window, "interval": CERTA_INTERVAL, "signal": certa_signal()} if kind == "cot" else {}
        scores = Replayer(problems, kind).run(build(name).policy, **cot)
    assert len(scores.idx) == 4 and scores.mean_tokens > 0 and sum(scores.exits.values()) >= 4

"""Self-calibration while serving (issue 38 item 2): explored runs show exactly what every setting
would have done, the setting moves only when certified, and ``certa serve --self-calibrate`` /
``certa run --self-calibrate`` show the threshold, change rate and explore cost (/metrics, summary)."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

import certa as ct
from certa.algorithms.programs.cot_probe import cot_program
from certa.cli import app
from certa.eval.families import PATIENCE, family, patience_signal
from certa.eval.replay_backend import ChainReplayBackend
from certa.eval.traces import parse_trace_line
from certa.selfcal import ExploreRate, OnlineCertifier, SelfCalibrating
from certa.serve import Server

from .test_labelfree import false_settle

ALWAYS = ExploreRate(1.0, 1.0)
QUESTION = "What is 3 + 4?"


def bank_problem(hold: int):
    return parse_trace_line(json.dumps({"idx": 0, "gold": "7", "model": "hand", "dataset": "math500", "interval": 64,
                                        "question": QUESTION, "samples": [false_settle(hold)]}))


@pytest.mark.parametrize("hold", [0, 6])
def test_an_explored_chain_shows_exactly_where_each_patience_setting_would_exit(hold):
    p = bank_problem(hold)
    cal = SelfCalibrating("cot", 0.2, explore=ALWAYS, max_tokens=4096, probe_tokens=32)
    r = ct.Runtime(ChainReplayBackend(p)).run_sync(cal, question=QUESTION)
    assert (r.exit_reason, r.answer, r.tokens.main) == ("done", "7", p.samples[0].tokens)  # full compute
    for i, value in enumerate(PATIENCE):  # each setting run for real on the same chain
        live = ct.Runtime(ChainReplayBackend(p)).run_sync(
            cot_program(signal=patience_signal(value), max_tokens=4096, probe_tokens=32), question=QUESTION)
        assert cal.certifier.tests[i].total == float(live.answer != "7"), value
        assert cal.certifier.token_sums[i] == live.tokens.main + live.tokens.probe, value
    assert cal.certifier.tests[PATIENCE.index(0.25)].total == float(hold == 6)


def test_the_online_certifier_moves_only_when_certified():
    fam = family("sc")
    zero = OnlineCertifier(fam, 0.05)
    cheap = [1.0 - 0.05 * i for i in range(len(fam.values))]
    for n in range(1, 80):
        zero.observe([0.0] * len(fam.values), cheap)
        assert zero.certified == (n >= 50) and zero.current == (fam.values[-1] if n >= 50 else 0.04)
    risky = OnlineCertifier(fam, 0.05)
    for _ in range(200):  # the most patient setting already changes 10% of answers: nothing is certified
        risky.observe([0.1] * len(fam.values), cheap)
    assert not risky.certified and risky.current == 0.04 and risky.change_rate == pytest.approx(0.1)


def test_a_self_calibrating_sc_program_certifies_then_serves_the_certified_setting():
    sc = SelfCalibrating("sc", 0.05, cap=8, explore=ALWAYS)
    rt = ct.Runtime(ct.ScriptedBackend(responses=["so \\boxed{18}."]))
    for n in range(1, 51):
        assert rt.run_sync(sc, question="9 * 2?").answer == "18"
        assert sc.snapshot()["certified"] == (n >= 50)  # 50 loss-free explored problems certify 5% (delta 0.1)
    snap = sc.snapshot()
    # the cheapest: every delta >= 0.06 stops at the 2nd of 8 agreeing samples; ties go to the most patient
    assert snap["threshold"] == 0.06 and snap["change_rate"] == 0.0 and snap["explored"] == 50
    assert snap["explore_cost_tokens"] > 0
    sc.explore = ExploreRate(0.0, 0.0)
    served = rt.run_sync(sc, question="9 * 2?")
    assert served.knob_used == 2 and sc.snapshot()["served"] == 1
    assert sc.with_policy(ct.Threshold(0.5, detect_at=2)).policy.tau == 0.5  # a request's own policy: as shipped


def test_certa_serve_self_calibrate_shows_threshold_change_rate_and_cost_on_metrics(monkeypatch):
    from certa.serve import launch
    servers: list = []
    monkeypatch.setattr(launch, "run", lambda server, host, port, **kw: servers.append(server))
    r = CliRunner().invoke(app, ["serve", "--backend", "scripted", "--program", "sc", "--self-calibrate", "0.01"])
    assert r.exit_code == 0, r.output
    server = servers[0]

    async def ask() -> None:
        async with server:
            for _ in range(12):
                await server.complete("What is 9 * 2?")
    asyncio.run(ask())
    text = server.prometheus()
    for name in ("certa_selfcal_threshold", "certa_selfcal_change_rate", "certa_selfcal_explore_cost_tokens_total",
                 "certa_selfcal_explored_total", "certa_selfcal_certified", "certa_selfcal_risk"):
        assert f'{name}{{program="sc"}}' in text, name
    assert 'certa_selfcal_risk{program="sc"} 0.01' in text
    assert server.metrics()["self_calibration"]["sc"]["explored"] >= 1


def test_certa_serve_policy_file_and_refusals(tmp_path, monkeypatch):
    from certa.serve import launch
    servers: list = []
    monkeypatch.setattr(launch, "run", lambda server, host, port, **kw: servers.append(server))
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"policy": {"kind": "stable_vote", "delta": 0.2}, "program": {"name": "sc"}}))
    r = CliRunner().invoke(app, ["serve", "--backend", "scripted", "--policy", str(f)])
    assert r.exit_code == 0, r.output
    assert servers[0].programs["sc"].target.policy.delta == 0.2
    r = CliRunner().invoke(app, ["serve", "--backend", "scripted", "--program", "mcts", "--self-calibrate", "0.01"])
    assert r.exit_code == 2 and "--self-calibrate runs sc or cot" in r.output


def test_certa_run_self_calibrate_prints_its_state_in_the_summary(tmp_path):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["run", "sc", "--dataset", "gsm8k", "--limit", "3", "--backend", "scripted",
                                 "--self-calibrate", "0.05", "--cap", "4", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "self-calibration" in r.output and "explore cost" in r.output
    cal = json.loads(out.read_text())["self_calibration"]
    assert cal["risk"] == 0.05 and cal["explored"] + cal["served"] == 3


@pytest.mark.model
def test_serve_self_calibrate_on_the_real_cpu_model():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'certa[cpu]')")
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")
    from certa.runtime import models
    small = models.KNOWN_MODELS["qwen2.5-coder-0.5b"]
    if models.locate(small)[0] == "missing":
        pytest.skip(f"the 0.5B model is not installed ({small.pip_hint})")
    from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    from certa.serve.launch import start_background
    backend = LlamaCppBackend("qwen2.5-coder-0.5b", n_ctx=2048, n_seq=2, n_threads=1, max_batch_tokens=128)
    sc = SelfCalibrating("sc", 0.01, explore=ExploreRate(1.0, 1.0), branches_per_round=2, cap=2, max_tokens=16)
    try:
        with start_background(Server({"sc": sc}, backend), shutdown_timeout=5) as bg:
            for _ in range(2):
                r = httpx.post(bg.base_url + "/chat/completions", timeout=120,
                               json={"model": "sc", "messages": [{"role": "user", "content": "What is 7 + 5?"}]})
                assert r.status_code == 200, r.text
            text = httpx.get(bg.url + "/metrics").text
    finally:
        backend.shutdown()
    assert 'certa_selfcal_explored_total{program="sc"} 2' in text
    assert 'certa_selfcal_threshold{program="sc"} 0.04' in text and "certa_selfcal_change_rate" in text
    assert "certa_selfcal_explore_cost_tokens_total" in text

"""One way to build a runtime (issue 39 item 3): ``make_runtime`` owns the defaults the CLI, the
server and the simulator share, and ``Runtime()`` without a backend never runs on a silent fake."""

from __future__ import annotations

import doctest
import logging

import pytest

import certa as ct
from certa.runtime import build
from certa.runtime.backends import registry


def test_runtime_without_a_backend_refuses_with_a_hint():
    with pytest.raises(ct.CertaError) as info:
        ct.Runtime()
    assert info.value.code == "CT300" and "needs a backend" in info.value.message
    assert "Runtime('auto')" in info.value.hint and "ScriptedBackend" in info.value.hint


def test_a_server_without_a_backend_refuses_too():
    from certa.serve import Server
    with pytest.raises(ct.CertaError, match="needs a backend"):
        Server("sc")


def test_auto_names_the_engine_it_picked(monkeypatch, caplog):
    monkeypatch.setattr(registry, "auto_backend", lambda: "scripted")
    with caplog.at_level(logging.INFO, logger="certa.runtime"):
        rt = ct.Runtime("auto", responses=["\\boxed{4}"])
    assert type(rt.backend).__name__ == "ScriptedBackend"
    assert "Runtime('auto'): backend scripted" in caplog.text


def test_auto_without_a_real_engine_refuses_with_a_hint(monkeypatch):
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ct.CertaError, match="no real engine is installed") as info:
        ct.Runtime("auto")
    assert "certa[cpu]" in info.value.hint


def test_make_runtime_is_what_the_cli_and_the_server_build():
    """The server's Runtime comes from make_runtime: its scheduler policy, admission limit and
    backend options are the ones make_runtime gives for the same arguments."""
    from certa.serve import Server
    server = Server("sc", "scripted", scheduler="lpm", max_inflight=3, responses=["\\boxed{4}"])
    made = build.make_runtime("scripted", scheduler="lpm", max_inflight=3, responses=["\\boxed{4}"])
    for rt in (server.runtime, made):
        assert (rt.scheduler.policy.name, rt.scheduler.limits.max_requests) == ("lpm", 3)
        assert type(rt.backend).__name__ == "ScriptedBackend"
    assert build.make_runtime("scripted").scheduler.policy.name == "certa"  # the CLI's and the server's default


def test_make_runtime_maps_model_and_url_as_the_backend_entry_says():
    with pytest.raises(ct.CertaError, match="bad option for backend 'scripted'"):
        build.make_runtime("scripted", url="http://a:1")  # the scripted backend takes no base_url
    rt = build.make_runtime("scripted", model="ignored: the scripted backend loads no model")
    assert type(rt.backend).__name__ == "ScriptedBackend"
    sched = ct.Scheduler()
    assert build.make_runtime(ct.ScriptedBackend(), scheduler=sched).scheduler is sched
    with pytest.raises(ct.CertaError, match="max_inflight configures a new Scheduler"):
        build.make_runtime("scripted", scheduler=sched, max_inflight=2)


def test_docstring_examples():
    for module in (build, registry):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0

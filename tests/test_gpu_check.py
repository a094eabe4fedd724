"""benchmarks/gpu_check.py: its GPU phases cannot run here, so ``--dry-run`` (the scripted
FAKE backend, no model) exercises the workload, measuring, serve and JSON code end to end."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("httpx", reason="gpu_check drives certa serve over HTTP (pip install 'certa[http]')")
pytest.importorskip("uvicorn", reason="gpu_check starts certa serve (pip install 'certa[serve]')")


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_dry_run_writes_the_report_from_the_stand_in(tmp_path):
    gc = _load()
    out = tmp_path / "gpu_check.json"
    gc.main(["--dry-run", "--programs", "4", "--max-tokens", "32", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["dry_run"] is True and report["stand_in"] == "scripted"
    assert report["gpu_tests"]["status"].startswith("not_run") and "test_sglang_gpu.py" in report["gpu_test_command"]
    eng = report["engine"]
    assert eng["sc"]["programs"] == eng["sc"]["ok"] == 4 and eng["sc"]["tokens"] > 0
    assert eng["sc"]["throughput_tok_s"] > 0 and eng["sc"]["tokens_saved"] >= 0
    assert 0 <= eng["abort_latency"]["max_s"] < 1.0 and eng["priority"]["requests"] == 128
    assert isinstance(eng["priority"]["honoured"], bool)
    assert report["serve"]["status"] == "ok" and report["serve"]["requests"] == 4
    assert report["serve"]["tokens_saved"] is not None
    assert sum(gc.BUDGET_S.values()) <= 8 * 60 - 60 and gc.TOTAL_S < 8 * 60  # caps + engine build fit 8 min
    assert report["elapsed_s"] < gc.TOTAL_S


def test_without_a_gpu_the_real_check_refuses_and_says_how_to_dry_run():
    gc = _load()
    with pytest.raises(SystemExit, match="--dry-run"):
        gc.run_check(None, dry_run=False, n=1, max_tokens=8)
    assert gc.preflight(None)["ready"] is False


def test_gpu_mode_commands():
    gc = _load()
    cmd = gc.serve_command("/models/m", 8123, dry_run=False)
    assert cmd[cmd.index("--backend") + 1] == "sglang" and cmd[cmd.index("--model") + 1] == "/models/m"
    assert "--backend-opt=mem_fraction_static=0.5" in cmd and gc.ENGINE_ARGS["max_running_requests"] < 128 and (ROOT / "tests" / "test_sglang_gpu.py").exists()
    assert [a for q, a in gc.questions(3)] == ["46", "56", "66"]

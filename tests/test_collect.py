"""`certa traces collect`: trace lines in the documented format, SIGKILL + rerun loses and
duplicates nothing, torn tails are cut, reserved splits refused; a tiny real-engine smoke test."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from typer.testing import CliRunner

from certa.eval.collect import CollectConfig, TraceFile, collect_traces
from certa.eval.datasets import Problem
from certa.eval.replay_eval import Replayer
from certa.cli import app
from certa.runtime.backends.testing.scripted import ScriptedBackend, words
from certa.eval.errors import DatasetError, TraceFormatError
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Threshold
from certa.eval.traces import load_traces

TEXT = "Let us add the numbers one by one and check the sum again " * 5 + "so the answer is \\boxed{{{ans}}}."


def scripted(latency: float = 0.0):
    def respond(req):
        return TEXT.format(ans=4 if (req.seed or 0) % 3 else 5)
    return lambda: ScriptedBackend(responses=respond, latency=latency, probe=lambda text, suffix: "4} \\] done")


def problems(n: int, dataset: str = "gsm8k") -> list[Problem]:
    return [Problem(dataset, i, f"What is {i} + 4 - {i}?", "4") for i in range(n)]


def test_lines_follow_the_trace_format(tmp_path):
    out = tmp_path / "t.jsonl"
    cfg = CollectConfig(samples=5, probe_samples=2, interval=16, max_tokens=512)
    rep = asyncio.run(collect_traces(problems(3), out, scripted(), cfg))
    assert rep.written == 3 and rep.idx == [0, 1, 2]
    traces = load_traces(out)  # the shared loader validates every line
    for p in traces:
        assert p.model == "scripted" and p.interval == 16 and p.gold == "4" and len(p.samples) == 5
        for j, s in enumerate(p.samples):
            assert s.tokens == len(words(TEXT.format(ans=4))) and s.finished and s.pred in ("4", "5")
            assert s.correct == (s.pred == "4")
            if j < 2:
                assert [q.at for q in s.probes] == list(range(16, s.tokens, 16))
                extra = s.probes[0].model_extra
                assert s.probes[0].answer == "4" and extra["text"] == "4} \\] done" and extra["tokens"] == 3
                assert extra["prompt_tokens"] > 0
            else:
                assert "probes" not in s.model_fields_set
        assert [s.model_extra["seed"] for s in p.samples] == [0, 1, 2, 3, 4]
    # collected traces replay
    early = Replayer(traces, "cot").run(Threshold(1.0, detect_at=1, every=1), k=2, interval=16)
    assert early.accuracy == 1.0 and early.main.mean() == 32


def test_rerun_skips_done_problems_and_cuts_a_torn_tail(tmp_path):
    out = tmp_path / "t.jsonl"
    cfg = CollectConfig(samples=2, probe_samples=1, interval=32)
    asyncio.run(collect_traces(problems(2), out, scripted(), cfg))
    with open(out, "a") as fh:
        fh.write('{"idx": 2, "gold": "4", "samples": [{"tok')  # a kill mid-write
    rep = asyncio.run(collect_traces(problems(4), out, scripted(), cfg))
    assert (rep.written, rep.skipped) == (2, 2)
    assert [json.loads(line)["idx"] for line in out.read_text().splitlines()] == [0, 1, 2, 3]
    assert asyncio.run(collect_traces(problems(4), out, lambda: pytest.fail("no backend needed"), cfg)).written == 0


def test_corruption_before_good_lines_and_another_model_are_refused(tmp_path):
    out = tmp_path / "t.jsonl"
    cfg = CollectConfig(samples=2, probe_samples=0)
    asyncio.run(collect_traces(problems(1), out, scripted(), cfg))
    good = out.read_text()
    with pytest.raises(ConfigError, match="interval"):
        other = CollectConfig(samples=2, probe_samples=0, interval=64)
        asyncio.run(collect_traces(problems(2), out, scripted(), other))
    out.write_text("garbage\n" + good)
    with pytest.raises(TraceFormatError, match="corrupt"):
        TraceFile(out)


def test_reserved_splits_are_refused(tmp_path):
    with pytest.raises(DatasetError, match="reserved"):
        asyncio.run(collect_traces([Problem("gsm8k", 800, "q", "1")], tmp_path / "t.jsonl", scripted()))
    with pytest.raises(DatasetError, match="reserved"):
        asyncio.run(collect_traces([Problem("math500", 300, "q", "1")], tmp_path / "t.jsonl", scripted()))
    res = CliRunner().invoke(app, ["traces", "collect", "--dataset", "gsm8k", "--idx", "790:810", "--backend",
                                   "scripted", "--out", str(tmp_path / "t.jsonl")])
    assert res.exit_code == 2 and "CT303" in res.output and not (tmp_path / "t.jsonl").exists()


KILLABLE = '''
    import asyncio, sys
    sys.path.insert(0, {tests!r})
    from test_collect import problems, scripted
    from certa.eval.collect import CollectConfig, collect_traces
    cfg = CollectConfig(samples=4, probe_samples=2, interval=16)
    asyncio.run(collect_traces(problems({n}), {out!r}, scripted(latency=0.01), cfg))
'''


def test_resume_after_sigkill_loses_and_duplicates_nothing(tmp_path):
    n, out = 30, tmp_path / "t.jsonl"
    script = tmp_path / "collect.py"
    script.write_text(textwrap.dedent(KILLABLE.format(tests=os.path.dirname(__file__), n=n, out=str(out))))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 3):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = out.read_text().count("\n")
    assert 3 <= done_before < n, "the kill should land mid-run"
    with open(out, "ab") as fh:  # what a kill mid-write leaves behind
        fh.write(b'{"idx": 99, "gold": "4", "samp')
    rep = asyncio.run(collect_traces(problems(n), out, scripted(), CollectConfig(samples=4, probe_samples=2,
                                                                                 interval=16)))
    idx = [json.loads(line)["idx"] for line in out.read_text().splitlines()]
    assert idx == list(range(n)) and rep.skipped == done_before and rep.written == n - done_before
    load_traces(out)


@pytest.mark.model
def test_real_engine_smoke(tmp_path):
    """Two short samples of one problem with the 0.5B model; one probed every 8 tokens."""
    pytest.importorskip("llama_cpp")
    from certa.runtime.errors import ModelNotFoundError
    from certa.runtime.models import resolve_model
    try:
        resolve_model("qwen2.5-coder-0.5b")
    except ModelNotFoundError as exc:
        pytest.skip(f"model unavailable: {exc}")
    from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    cfg = CollectConfig(samples=2, probe_samples=1, interval=8, max_tokens=24)
    out = tmp_path / "t.jsonl"
    factory = lambda: LlamaCppBackend("qwen2.5-coder-0.5b", n_seq=2, n_ctx=2048, n_threads=1)  # noqa: E731
    q = Problem("gsm8k", 0, "Janet has 3 apples and buys 4 more. How many apples does she have?", "7")
    asyncio.run(collect_traces([q], out, factory, cfg))
    (p,) = load_traces(out)
    assert p.model.startswith("qwen2.5-coder-0.5b") and [s.tokens <= 24 for s in p.samples] == [True, True]
    probed = p.samples[0]
    assert [q.at for q in probed.probes] == list(range(8, probed.tokens, 8))
    assert all(q.model_extra["tokens"] <= 20 and q.model_extra["prompt_tokens"] > 0 for q in probed.probes)


def test_levels_filter_math500_problems(tmp_path):
    from certa.eval.datasets import load_dataset
    wanted = [p.idx for p in load_dataset("math500", idx="0:20") if str(p.meta.get("level")) in ("1", "2")]
    out = tmp_path / "m.jsonl"
    res = CliRunner().invoke(app, ["traces", "collect", "--dataset", "math500", "--idx", "0:20", "--levels", "1,2",
                                   "--backend", "scripted", "--samples", "2", "--probe-samples", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert [r["idx"] for r in TraceFile(out).rows] == wanted and wanted
    res = CliRunner().invoke(app, ["traces", "collect", "--dataset", "gsm8k", "--idx", "0:2", "--levels", "1",
                                   "--backend", "scripted", "--out", str(tmp_path / "g.jsonl")])
    assert res.exit_code == 2 and "no 'level' field" in res.output


class _ConfidentScripted(ScriptedBackend):
    """The scripted fake with token logprobs: every token -0.1 except two -2.0 near the end."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.capabilities.logprobs = True

    async def generate(self, req):
        out = await super().generate(req)
        assert req.logprobs, "the collector asks for logprobs when the engine has them"
        out.token_logprobs = [-0.1] * (out.tokens - 3) + [-2.0, -2.0, -0.1]
        return out


def test_per_sample_confidence_is_recorded_where_the_engine_gives_logprobs(tmp_path):
    make = lambda: _ConfidentScripted(responses=lambda req: TEXT.format(ans=4),  # noqa: E731
                                      probe=lambda text, suffix: "4} \\]")
    cfg = CollectConfig(samples=3, probe_samples=1, interval=16, logprob_window=4)
    asyncio.run(collect_traces(problems(1), tmp_path / "c.jsonl", make, cfg))
    p = load_traces(tmp_path / "c.jsonl")[0]
    n = p.samples[1].tokens
    for s in p.samples[1:]:  # plain samples: one logprob per token
        assert s.model_extra["mean_logprob"] == pytest.approx(round((-0.1 * (n - 2) - 4.0) / n, 4))
        assert s.model_extra["min_window_logprob"] == pytest.approx(round((-4.0 - 0.2) / 4, 4))
    assert "mean_logprob" not in p.samples[0].model_extra, "the fake's sequences give no logprobs: none recorded"
    assert p.model_extra["logprob_window"] == 4
    asyncio.run(collect_traces(problems(1), tmp_path / "plain.jsonl", scripted(), cfg))
    assert all("mean_logprob" not in s.model_extra for s in load_traces(tmp_path / "plain.jsonl")[0].samples)

"""Bad input: configs, CLI options, policy files and trace files fail with one clear coded error;
oversized inputs (prompt, fan-out, tokens) are refused under limits that can be set.

(Malformed graphs and their compile error codes are covered in test_dsl_compile.py.)
"""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest
from typer.testing import CliRunner

import certa as ct
from certa.cli import app
from certa.runtime import RetryPolicy, RuntimeLimits
from certa.runtime.errors import ConfigError, LimitExceededError

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = f"{ROOT}/examples/sc_scripted.py:program"
runner = CliRunner()


class Q(ct.State):
    q: str
    out: ct.Appended[list[str]] = []


def one_step(body, name="p"):
    g = ct.Graph(Q, name=name)
    g.step(body, name="work")
    return g.compile()


def assert_limit_error(r, *, step="work"):
    assert not r.ok and isinstance(r.error, LimitExceededError), r.error
    assert r.error.code == "CT205" and r.error.program == r.program_id and r.error.step == step
    assert r.error.branch is not None and "over the limit" in str(r.error)


# ---- oversized inputs under RuntimeLimits -----------------------------------------------
@pytest.mark.parametrize("call", ["gen", "score", "sequence"])
async def test_prompt_over_max_prompt_chars_is_refused_before_sending(call):
    async def work(s, ctx):
        if call == "gen":
            await ctx.gen(s.q)
        elif call == "score":
            await ctx.score(s.q)
        else:
            await ctx.sequence(s.q)
        return {}

    b = ct.ScriptedBackend(responses=["x"])
    rt = ct.Runtime(b, limits=RuntimeLimits(max_prompt_chars=100))
    assert (await rt.run(one_step(work), q="y" * 100)).ok
    n_sent = len(b.requests)
    r = await rt.run(one_step(work), q="y" * 101, return_errors=True)
    assert_limit_error(r)
    assert len(b.requests) == n_sent, "an oversized prompt must never reach the backend"
    big = await ct.Runtime(b, limits=RuntimeLimits(max_prompt_chars=None)).run(one_step(work), q="y" * 300_000)
    assert big.ok, "None lifts the limit"


async def test_default_limits_refuse_a_huge_prompt():
    async def work(s, ctx):
        await ctx.gen(s.q)
        return {}

    r = await ct.Runtime(ct.ScriptedBackend(responses=["x"])).run(one_step(work), q="z" * 1_000_000, return_errors=True)
    assert_limit_error(r)


async def test_max_tokens_per_request_is_refused_for_gen_sequence_and_probe():
    async def gen(s, ctx):
        await ctx.gen(s.q, max_tokens=65)
        return {}

    async def seq(s, ctx):
        await ctx.sequence(s.q, max_tokens=65)
        return {}

    async def probe(s, ctx):
        async with await ctx.sequence(s.q, max_tokens=10) as sq:
            await sq.extend(5)
            await sq.probe(" answer:", max_tokens=1000)
        return {}

    b = ct.ScriptedBackend(responses=["a b c d e f g h i j"], probe=lambda t, s: "1}")
    rt = ct.Runtime(b, limits=RuntimeLimits(max_tokens_per_request=64))
    for body in (gen, seq, probe):
        assert_limit_error(await rt.run(one_step(body), q="q", return_errors=True))
    ok = await ct.Runtime(b, limits=RuntimeLimits(max_tokens_per_request=65)).run(one_step(gen), q="q")
    assert ok.ok


async def test_fanout_over_max_fanout_is_refused():
    g = ct.Graph(Q, knob=ct.Knob("branches", cap=64), name="wide")

    @g.step(fanout=lambda s: len(s.q), max_fanout=1000)
    async def work(s, ctx):
        return {"out": [(await ctx.gen("x")).text]}

    program = g.compile()
    b = ct.ScriptedBackend(responses=["x"])
    rt = ct.Runtime(b, limits=RuntimeLimits(max_fanout=8))
    assert (await rt.run(program, q="12345678")).ok
    r = await rt.run(program, q="123456789", return_errors=True)
    assert not r.ok and r.error.code == "CT205" and r.error.step == "work" and "fanout 9" in str(r.error)
    assert (await ct.Runtime(b, limits=RuntimeLimits(max_fanout=None)).run(program, q="x" * 40)).ok


async def test_send_fanout_over_max_fanout_is_refused():
    g = ct.Graph(Q, knob=ct.Knob("branches", cap=1000), name="sends")

    @g.step
    def plan(s):
        return {}

    @g.step
    async def work(s, ctx):
        return {"out": ["w"]}

    g.branch("plan", lambda s: [ct.Send("work", i) for i in range(50)], destinations=["work"], max_fanout=100)
    r = await ct.Runtime(ct.ScriptedBackend(responses=["x"]), limits=RuntimeLimits(max_fanout=8)).run(
        g.compile(), q="q", return_errors=True)
    assert not r.ok and r.error.code == "CT205"


async def test_max_concurrent_programs_caps_programs_in_flight():
    peak = 0
    rt = ct.Runtime(ct.ScriptedBackend(responses=["x"], latency=0.01), limits=RuntimeLimits(max_concurrent_programs=3))

    async def work(s, ctx):
        nonlocal peak
        peak = max(peak, len(rt.active_programs))
        await ctx.gen(s.q)
        return {}

    results = await rt.run_many([(one_step(work), {"q": str(i)}) for i in range(12)])
    assert all(r.ok for r in results) and peak == 3


@pytest.mark.parametrize("kwargs", [dict(max_prompt_chars=0), dict(max_tokens_per_request=-1),
                                    dict(max_fanout=2.5), dict(max_concurrent_programs="10"),
                                    dict(max_fanout=True)])
def test_bad_limits_are_config_errors(kwargs):
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        RuntimeLimits(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(max_attempts=0), dict(base_delay=-1.0), dict(max_delay=float("inf")),
                                    dict(max_attempts=2.5)])
def test_bad_retry_policy_is_a_config_error(kwargs):
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        RetryPolicy(**kwargs)


# ---- other configuration objects --------------------------------------------------------
def test_runtime_construction_errors_are_clear():
    with pytest.raises(ConfigError, match="unknown backend 'nope'"):
        ct.Runtime("nope")
    with pytest.raises(ConfigError, match="backend options"):
        ct.Runtime(ct.ScriptedBackend(), latency=1)
    with pytest.raises(ValueError, match="knob unit"):
        ct.Knob("furlongs")
    with pytest.raises(ValueError, match="tau must be in"):
        ct.Threshold(1.5)


@pytest.mark.parametrize("data, match", [
    ({"kind": "nope"}, "unknown policy kind"),
    ({"kind": "threshold", "tau": 0.5, "bogus": 1}, "bad arguments"),
    ({"tau": 0.5}, "unknown policy kind None"),
])
def test_policy_from_dict_errors(data, match):
    with pytest.raises(ConfigError, match=match):
        ct.policy_from_dict(data)


# ---- CLI options and files: one coded error line, exit 2, no traceback ------------------
def cli_error(args, tmp_path=None) -> str:
    r = runner.invoke(app, ["run", EXAMPLE, "--backend", "scripted", *args])
    out = r.output
    assert r.exit_code == 2, out
    assert "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("error ")]
    assert len(errors) == 1, out
    return " ".join(out.split())  # rich wraps long lines


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "What is 1+1?", "answer": "2"}) + "\n")
    return path


@pytest.mark.parametrize("args, expected", [
    (["--concurrency", "0"], "CT300 config-error: --concurrency: Input should be greater than or equal to 1"),
    (["--resume"], "CT300 config-error: --resume needs --journal FILE"),
    (["--limit", "-1"], "CT300 config-error: --limit: Input should be greater than or equal to 0"),
    (["--idx", "a:b"], "CT303 dataset-error: bad idx"),
    (["--scheduler", "fastest"], "CT300 config-error: unknown scheduling policy 'fastest'"),
])
def test_bad_cli_options(args, expected, data):
    assert expected in cli_error(["--dataset", str(data), *args])


def test_bad_backend_and_program_and_dataset(tmp_path, data):
    assert "unknown backend 'warp'" in cli_error(["--dataset", str(data), "--backend", "warp"])
    r = runner.invoke(app, ["run", str(tmp_path / "missing.py"), "--backend", "scripted", "--dataset", str(data)])
    assert r.exit_code == 2 and "CT300" in r.output and "does not exist" in " ".join(r.output.split())
    r = runner.invoke(app, ["run", f"{ROOT}/examples/sc_scripted.py:nope", "--backend", "scripted",
                            "--dataset", str(data)])
    assert r.exit_code == 2 and "has no attribute 'nope'" in " ".join(r.output.split())
    bad = tmp_path / "bad.jsonl"
    for content, expected in [('{"question": "q", "answer": 1}\n{oops\n', ":2: bad JSON"),
                              ('{"answer": 1}\n', "no 'question' or 'problem' field"),
                              ('[1, 2]\n', "expected a JSON object")]:
        bad.write_text(content)
        assert expected in cli_error(["--dataset", str(bad)])
    assert "no such dataset file" in cli_error(["--dataset", str(tmp_path / "none.jsonl")])


def test_existing_journal_without_resume(tmp_path, data):
    j = tmp_path / "j.jsonl"
    j.write_text("")
    assert "already exists" in cli_error(["--dataset", str(data), "--journal", str(j)])


@pytest.mark.parametrize("content, expected", [
    ("not json", "cannot read policy file"),
    ("[1, 2]", "<root>: expected a JSON object"),
    ('{"policy": {"tau": 0.5}}', "kind: Field required"),
    ('{"kind": "sometimes"}', "unknown policy kind 'sometimes'"),
    ('{"kind": "threshold", "tau": 2}', "threshold tau must be in [0, 1]"),
    ('{"kind": "threshold", "tau": 0.5, "colour": "red"}', "unexpected keyword argument 'colour'"),
    ('{"kind": "even", "cap": 0}', "Even cap must be >= 1"),
])
def test_bad_policy_files(content, expected, tmp_path, data):
    pol = tmp_path / "policy.json"
    pol.write_text(content)
    out = cli_error(["--dataset", str(data), "--policy", str(pol)])
    assert "CT300" in out and expected in out


def test_deeply_nested_policy_file_is_one_clear_error(tmp_path, data):
    pol = tmp_path / "policy.json"
    pol.write_text("[" * 100_000 + "]" * 100_000)
    assert "cannot read policy file" in cli_error(["--dataset", str(data), "--policy", str(pol)])


def test_deeply_nested_dataset_row_is_one_clear_error(tmp_path):
    bad = tmp_path / "deep.jsonl"
    bad.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    r = runner.invoke(app, ["run", EXAMPLE, "--backend", "scripted", "--dataset", str(bad)])
    assert r.exit_code == 2 and "CT303" in r.output


def test_good_policy_file_is_accepted(tmp_path, data):
    pol = tmp_path / "policy.json"
    pol.write_text(json.dumps({"policy": ct.Threshold(0.5, detect_at=2).to_dict(), "note": "calibrated"}))
    r = runner.invoke(app, ["run", EXAMPLE, "--backend", "scripted", "--dataset", str(data), "--policy", str(pol)])
    assert r.exit_code == 0, r.output


# ---- trace files ---------------------------------------------------------------------------
SAMPLE = {"tokens": 10, "finished": True, "pred": "1", "correct": True, "text": "...", "probes": []}


@pytest.mark.parametrize("line, expected", [
    ("{not json", "t.jsonl:2: not JSON"),
    ("[1]", "t.jsonl:2: expected a JSON object"),
    (json.dumps({"idx": 1, "gold": "1"}), "t.jsonl:2: field 'samples'"),
    (json.dumps({"idx": 1, "samples": []}), "t.jsonl:2: field 'samples'"),
    (json.dumps({"idx": 1, "samples": [{**SAMPLE, "tokens": -5}]}), "field 'samples.0.tokens'"),
    (json.dumps({"idx": 1, "samples": [{**SAMPLE, "probes": [{"at": "soon"}]}]}), "field 'samples.0.probes.0.at'"),
    (json.dumps({"idx": 1, "interval": 0, "samples": [SAMPLE]}), "field 'interval'"),
])
def test_bad_trace_files(line, expected, tmp_path):
    traces = pytest.importorskip("certa.eval.traces")
    from certa.eval.errors import TraceFormatError
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"idx": 0, "gold": "1", "samples": [SAMPLE]}) + "\n" + line + "\n")
    with pytest.raises(TraceFormatError) as e:
        traces.load_traces(path)
    assert e.value.code == "CT304" and expected in str(e.value) and "\n" not in str(e.value)


def test_missing_and_empty_trace_files(tmp_path):
    traces = pytest.importorskip("certa.eval.traces")
    from certa.eval.errors import TraceFormatError
    with pytest.raises(TraceFormatError, match="does not exist"):
        traces.load_traces(tmp_path / "none.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(TraceFormatError, match="holds no problems"):
        traces.load_traces(tmp_path / "empty.jsonl")


def test_deeply_nested_trace_line_is_a_trace_format_error(tmp_path):
    traces = pytest.importorskip("certa.eval.traces")
    from certa.eval.errors import TraceFormatError
    path = tmp_path / "big.jsonl"
    path.write_text("[" * 200_000 + "]" * 200_000 + "\n")  # deep nesting: must fail cleanly
    with pytest.raises(TraceFormatError):
        traces.load_traces(path)


def test_asyncio_is_not_left_running():  # the CLI's asyncio.run calls closed their loops
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()

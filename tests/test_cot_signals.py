"""CoT certaindex variants (issue 10): each signal's rule, AND composition, serialization,
replay with them (text at a probe, probe skipping, logprobs), and the side-by-side benchmark."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

from certa.algorithms.signals import cot as cot_signals
from certa.eval import cot_grid
from certa.eval.bench_tokens import bench_tokens
from certa.eval.calibration import calibrate_split
from certa.algorithms.signals.cot import (AllOf, ChainView, Confident, Grounded, ProbeAgreement, Progress, Settled,
                                          answer_probability, signal_from_dict)
from certa.eval.replay import ReplayCoT, run_replay
from certa.algorithms.signals import ProbeObs
from certa.eval.replay_backend import text_at
from certa.eval.errors import TraceFormatError
from certa.runtime.errors import ConfigError
from certa.simulation.synth import synth_traces
from certa.eval.traces import parse_trace_line


def view(answers, text="", tokens=0, logprobs=None):
    probes = [ProbeObs(32 * (i + 1), a, f"{a}}}", logprobs) for i, a in enumerate(answers)]
    return ChainView(probes, text, tokens)


def test_doctests():
    for mod in (cot_signals, cot_grid):
        assert doctest.testmod(mod, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.mark.parametrize("text, answer, computed, stated", [
    ("16 - 3 - 4 = 9 eggs, and 9 * 2 = 18 dollars", "18", 1.0, 1.0),
    ("9 \\times 2 = \\$18.", "18", 1.0, 1.0),
    ("The total is 1,250 + 50 = 1,300.", "1300", 1.0, 1.0),
    ("Eggs per day = 16", "16", 0.0, 1.0),  # a restated given: not computed
    ("So the answer is 42.", "42", 0.0, 1.0),
    ("3 + 4 = 7 and 7 * 2 = 14", "1", 0.0, 0.0),  # a default guess "1" is not a prefix match of 14
    ("x = \\frac{1}{2}", "\\frac{1}{2}", 0.0, 1.0),  # no operator left of the =
    ("\\frac{3}{6} = \\frac{1}{2}", "\\frac{1}{2}", 1.0, 1.0),  # \frac counts as an operator
    ("3 * 4 = 12.5 apples", "12", 0.0, 0.0),
    ("9 * 2 = 18.00 dollars", "18", 1.0, 1.0),
    ("4 + 4 = 8, so", "8.0", 1.0, 1.0),
    ("60 \\text{ m} \\times 3 = 180 \\text{ m}\n   \\]\n\n3. The total", "180", 1.0, 1.0),  # value ends at the line
    ("print(total)\n```\n```output\n12\n```\nJanet makes", "12", 1.0, 1.0),  # a code model's output block
])
def test_grounded_needs_the_answer_produced_by_the_text(text, answer, computed, stated):
    v = view([answer], text)
    assert (Grounded("computed")(v), Grounded("stated")(v)) == (computed, stated)


def test_grounded_needs_a_probe_with_an_answer():
    assert Grounded()(view([], "2 + 2 = 4")) == 0.0
    assert Grounded()(view([""], "2 + 2 = 4")) == 0.0


def test_confident_reads_the_answer_probability():
    v = view(["18"], logprobs=(-0.1, -0.2, 0.0))  # p = exp(-0.3) = 0.74
    assert answer_probability(v.probes[-1]) == pytest.approx(0.7408, abs=1e-3)
    assert (Confident(0.7)(v), Confident(0.8)(v)) == (1.0, 0.0)
    assert Confident(0.1)(view(["18"])) == 0.0  # no logprobs recorded: no evidence


def test_progress_and_settled():
    assert Progress(0.5, 300).min_tokens == 150
    assert (Progress(0.5, 300)(view(["1"], tokens=149)), Progress(0.5, 300)(view(["1"], tokens=150))) == (0.0, 1.0)
    assert Settled()(view(["1"], "so 2 + 2 = 4.")) == 1.0
    assert Settled()(view(["1"], "so 2 + 2 = 4. Wait, let me re-evaluate")) == 0.0
    assert Settled(chars=10)(view(["1"], "Hmm. " + "x" * 50)) == 1.0  # only the recent text counts
    assert Settled()(view(["1"], "the mistakes were counted")) == 1.0  # whole words only


def test_all_of_is_the_minimum_and_round_trips():
    rule = AllOf(Progress(0.5, 200), ProbeAgreement(2), Grounded("stated"), Settled(), Confident(0.5))
    assert rule.window == 2 and rule.min_tokens == 100 and rule.needs == {"logprobs"}
    good = view(["18", "18"], "answer is 18", 128, logprobs=(-0.01,))
    assert rule(good) == 1.0
    assert rule(view(["18", "18"], "answer is 18", 64, logprobs=(-0.01,))) == 0.0  # too early
    assert rule(view(["17", "18"], "answer is 18", 128, logprobs=(-0.01,))) == 0.0  # probes disagree
    spec = json.loads(json.dumps(rule.to_dict()))
    assert signal_from_dict(spec) == rule


@pytest.mark.parametrize("spec", [{"kind": "nope"}, {"kind": "agree", "k": 0}, {"kind": "grounded", "mode": "x"},
                                  {"kind": "agree", "window": 3}, "agree", {"kind": "all", "parts": []}])
def test_bad_signal_specs_are_config_errors(spec):
    with pytest.raises(ConfigError):
        signal_from_dict(spec)


LINE = {"idx": 0, "gold": "18", "interval": 32, "dataset": "gsm8k", "samples": [{
    "tokens": 100, "finished": True, "pred": "18", "correct": True,
    "text": "Janet has 16 eggs. She uses 3 + 4 = 7. 16 - 7 = 9 left, 9 * 2 = 18 dollars. \\boxed{18}",
    "probes": [{"at": 32, "answer": "16", "chars": 20, "logprobs": [-0.05, -0.05], "text": "16}", "tokens": 2},
               {"at": 64, "answer": "18", "chars": 67, "logprobs": [-0.9, -0.9], "text": "18}", "tokens": 2},
               {"at": 96, "answer": "18", "chars": 80, "logprobs": [-0.1, -0.1], "text": "18}", "tokens": 2}]}]}


def test_replay_text_at_uses_recorded_chars():
    p = parse_trace_line(json.dumps(LINE))
    s = p.samples[0]
    assert text_at(s, 32) == s.text[:20] and text_at(s, 100) == s.text
    assert text_at(s, 50) == s.text[:len(s.text) * 50 // 100]  # no probe there: the token fraction


def run(signal, k=1):
    p = parse_trace_line(json.dumps(LINE))
    prog = ReplayCoT(p, 0, k=k, interval=32, grade=lambda a: a == "18", signal=signal)
    from certa.runtime.policy import Threshold
    prog.policy = Threshold(1.0, detect_at=1, every=1)
    return run_replay(prog), prog


def test_replayed_signals_decide_on_the_recorded_evidence():
    reason, prog = run(ProbeAgreement(1))  # Dynasor with k=1 takes the default guess "16"
    assert (reason, prog.answer(), prog.is_correct(), prog.tokens.main) == ("certaindex", "16", False, 32)
    reason, prog = run(AllOf(ProbeAgreement(1), Grounded("computed")))  # "18" is computed by token 64
    assert (reason, prog.answer(), prog.tokens.main) == ("certaindex", "18", 64)
    reason, prog = run(AllOf(ProbeAgreement(1), Confident(0.5)))  # the default guess is confident too
    assert (reason, prog.answer(), prog.tokens.main) == ("certaindex", "16", 32)
    reason, prog = run(AllOf(ProbeAgreement(1), Grounded(), Confident(0.5)))  # p(18 at 64) = exp(-1.8) < 0.5
    # grounded probes are event-triggered: only at 64 has the text written a new "=" since the last probe
    assert [q.at for q in prog.state.probes] == [64]
    assert (reason, prog.answer(), prog.tokens.main, prog.tokens.probe) == ("done", "18", 100, 2)
    reason, prog = run(AllOf(ProbeAgreement(1), Confident(0.5), Settled()))  # untriggered: probes at 32, 64, 96
    assert [q.at for q in prog.state.probes] == [32] and prog.answer() == "16"


def test_progress_skips_probes_that_cannot_matter():
    reason, prog = run(AllOf(Progress(1.0, 90), ProbeAgreement(2)), k=2)
    assert [q.at for q in prog.state.probes] == [64, 96]  # window 2 ending at >= 90: 64 and 96 only
    assert (reason, prog.tokens.probe, prog.answer()) == ("certaindex", 4, "18")


def test_bench_lists_dynasor_and_every_variant_side_by_side():
    probs = synth_traces(16, seed=3, samples=4, probed=2, interval=32, mean_tokens=300, max_tokens=512)
    out = bench_tokens(probs, "cot", reps=50)
    names = set(out["methods"])
    assert {"probe-calibrated", "dynasor-mild", "dynasor-crazy", "grounded", "progress", "settled",
            "certa-cot"} <= names
    assert "logprobs" in out["methods"]["confident"]["skipped"]  # synth traces carry no probe logprobs
    for name in ("grounded", "certa-cot"):
        m = out["methods"][name]
        assert {"tokens", "accuracy_delta", "token_ratio", "tokens_by_kind"} <= set(m)
        assert "probe_prefill" in m["tokens_by_kind"] and "ci95" in json.dumps(m)


def test_calibrated_signal_is_in_the_policy_file_and_learned_on_calibration_only():
    probs = synth_traces(12, seed=1, samples=4, probed=2, interval=32, mean_tokens=300, max_tokens=512)
    out = calibrate_split(probs, "cot", method="progress", reps=50)
    cal = {p.idx for p in probs if p.idx in out["split"]["calibration_idx"]}
    typical = cot_grid.typical_length([p for p in probs if p.idx in cal])
    assert out["calibration"]["typical_tokens"] == typical
    if out["method"] != "even":
        assert signal_from_dict(out["program"]["signal"]).to_dict()["kind"] == "all"


def test_malformed_probe_fields_are_trace_format_errors():
    bad = json.loads(json.dumps(LINE))
    bad["samples"][0]["probes"][0]["chars"] = -1
    with pytest.raises(TraceFormatError, match="chars"):
        parse_trace_line(json.dumps(bad))
    bad["samples"][0]["probes"][0]["chars"] = 3
    bad["samples"][0]["probes"][0]["logprobs"] = ["x"]
    with pytest.raises(TraceFormatError, match="logprobs"):
        parse_trace_line(json.dumps(bad))


def test_calibrated_cot_policy_file_rebuilds_the_program_in_certa_run(tmp_path):
    from typer.testing import CliRunner

    from certa.cli import app
    from certa.simulation.synth import write_synth
    traces = write_synth(tmp_path / "t.jsonl", 12, seed=1, samples=4, probed=2, interval=32, mean_tokens=300,
                         max_tokens=512)
    runner = CliRunner()
    pol = tmp_path / "policy.json"
    res = runner.invoke(app, ["calibrate", "--program", "cot", "--traces", str(traces), "--method", "grounded",
                              "--out", str(pol), "--reps", "50"])
    assert res.exit_code == 0, res.output
    data = json.loads(pol.read_text())
    data["program"] = {"name": "cot", "k": 1, "interval": 32,
                       "signal": AllOf(ProbeAgreement(1), Grounded("stated")).to_dict()}
    pol.write_text(json.dumps(data))
    out = tmp_path / "run.json"
    res = runner.invoke(app, ["run", "cot", "--backend", "scripted", "--dataset", "gsm8k", "--limit", "1",
                              "--policy", str(pol), "--json", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["run", "sc", "--backend", "scripted", "--dataset", "gsm8k", "--limit", "1",
                              "--policy", str(pol)])
    assert res.exit_code == 2 and "calibrated for program 'cot'" in res.output


TRACE_SETS = sorted((Path(__file__).parents[1] / "data" / "traces").glob("*.jsonl.gz"))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_cot_calibration_is_never_worse_than_dynasors_on_the_calibration_split(seed):
    from certa.eval.calibration import calibrate
    probs = synth_traces(24, seed=seed, samples=4, probed=3, interval=32, mean_tokens=300, max_tokens=512)
    certa, dynasor = (calibrate(probs, "cot", method=m, seed=seed) for m in ("certa", "probe"))
    assert certa.scores.correct.sum() >= certa.baseline.correct.sum() - 1e-9
    assert certa.scores.mean_tokens <= dynasor.scores.mean_tokens + 1e-9


@pytest.mark.parametrize("path", TRACE_SETS, ids=lambda p: p.name)
def test_default_cot_preset_is_never_worse_than_dynasors_presets_on_real_traces(path):
    """The fixed ``certa`` preset vs each fixed Dynasor preset, over every problem: no Dynasor
    preset is at least as accurate while decoding fewer tokens (probe decode tokens counted)."""
    from certa.algorithms.programs.cot_probe import CERTA_INTERVAL, PRESETS, certa_signal
    from certa.eval.cot_grid import has_logprobs
    from certa.eval.replay_eval import Replayer
    from certa.runtime.policy import Threshold
    from certa.eval.traces import load_traces
    probs = [p for p in load_traces(path) if any(s.probes for s in p.samples)]
    if len(probs) < 20 or not has_logprobs(probs):
        pytest.skip(f"{path.name}: needs >= 20 probed problems with probe logprobs")
    rep, first = Replayer(probs, "cot"), Threshold(1.0, detect_at=1, every=1)
    default = rep.run(first, k=3, interval=CERTA_INTERVAL, signal=certa_signal())
    for name, (k, t) in PRESETS.items():
        d = rep.run(first, k=k, interval=t)
        assert not (d.accuracy >= default.accuracy - 1e-9 and d.mean_tokens < default.mean_tokens - 1e-9), \
            f"Dynasor {name}: accuracy {d.accuracy:.3f} tokens {d.mean_tokens:.1f} vs certa " \
            f"{default.accuracy:.3f} / {default.mean_tokens:.1f}"


def test_event_triggered_probing():
    assert Grounded().probe_due("so 3 + 4 = 7") and not Grounded().probe_due("Let us think step by step")
    assert not Grounded().probe_due("so 3 + 4 =") and Grounded().probe_due("so 3 + 4 =\n 7")  # value must start
    assert Grounded().probe_due("```output\n12") and not Grounded().probe_due("```output\n")
    assert Grounded("stated").probe_due("The answer is 7") and not Grounded().probe_due("The answer is 7")
    assert ProbeAgreement(2).probe_due("") and Settled().probe_due("")
    assert not AllOf(ProbeAgreement(2), Grounded()).probe_due("no result yet")


async def test_live_cot_program_probes_only_when_due():
    import certa as ct
    from certa.algorithms.programs.cot_probe import cot_program
    chain = "words " * 40 + "so 9 * 2 = 18 dollars " + "words " * 40
    b = ct.ScriptedBackend(responses=[chain], probe=lambda text, suffix: "18} \\\\]")
    prog = cot_program(interval=16, max_tokens=256, signal=AllOf(ProbeAgreement(1), Grounded()))
    r = await ct.Runtime(b).run(prog, question="9 * 2?")
    assert r.exit_reason == "certaindex" and r.answer == "18"
    assert len(r.state.probes) == 1 and r.tokens.main < 100  # one probe, right after the "= 18" chunk


def test_oracle_bound_exits_at_the_first_probe_equal_to_the_final_answer():
    from certa.eval.replay_eval import Replayer
    p = parse_trace_line(json.dumps(LINE))
    s = Replayer([p], "cot").oracle_cot()
    assert (s.tokens[0], s.main[0], s.probe[0], s.correct[0]) == (66.0, 64.0, 2.0, 1.0)
    assert s.exits == {"oracle": 1}


def test_cot_headroom_benchmark_figures_on_a_known_chain():
    import importlib.util
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "cot_headroom.py"
    spec = importlib.util.spec_from_file_location("cot_headroom_bench", bench)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    h = module.headroom([parse_trace_line(json.dumps(LINE))], intervals=(32,))
    assert h["chains"] == 1 and h["full_chain"] == {"accuracy": 1.0, "tokens": 100.0}
    assert h["final_answer_in_text"]["median"] == round(66 / 86, 3)  # "9 * 2 = 18" is written by char 66
    assert h["oracle_one_probe"]["token_ratio"] == 0.66  # exits at 64, pays that probe
    assert h["oracle_every_32"] == {"token_ratio": 0.68, "accuracy": 1.0}  # pays the probes at 32 and 64
    assert h["probes_per_chain_every_32"] == 3 and h["probe_decode_share_every_32"] == 0.06
    assert h["oracle_grounded_one_probe_every_32"]["token_ratio"] == 0.66  # "= 18" is written by 64
    assert h["ungrounded_probes"] == {"probes": 1, "equal_final_answer": 0.0, "correct": 0.0}  # the "16" guess
    assert h["in_sample_best"]["methods"]["probe"]["accuracy_delta"] >= -0.005

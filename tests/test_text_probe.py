"""Text probes: the answer a reasoning chain has committed to, read from its own text (no decode cost)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from certa.algorithms.signals import ProbeObs
from certa.algorithms.signals.cot import AllOf, ChainView, ProbeAgreement, signal_from_dict
from certa.algorithms.signals.text import (Committed, _scan, asked_quantity, committed_answer, for_problem,
                                           statements)
from certa.eval.calibration import calibrate, candidates
from certa.eval.cot_grid import forced_answer_oracle, forced_answer_run, has_text_probes
from certa.eval.importers import Tokenizer, import_traces
from certa.eval.replay_eval import Replayer
from certa.eval.traces import load_traces
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Threshold

Q = "Janet sells eggs for $2 each. She has 16 eggs and eats 7. How much in dollars does she make every day?"
STATES = "She has 16 - 7 = 9 eggs left, and 9 * 2 = 18. So the answer is 18.\n"
HESITATES = "Wait, let me double-check the eggs: 16 - 7 = 9, and 9 * 2 = 18.\n"
CONFIRMS = "Yes, so the answer is 18.\n"


def _values(text: str, **kw) -> list[tuple[str, str]]:
    return [(s.kind, s.value) for s in statements(text, dataset="gsm8k", question=Q, **kw)]


def test_statement_kinds_and_what_is_not_a_statement():
    assert _values(STATES) == [("answer", "18")]
    assert _values("So she makes 9 * 2 = 18 dollars a day.\n") == [("conclude", "18")]
    assert _values("The total is \\boxed{18}.\n") == [("boxed", "18")]
    for text in ("If the answer is 45, then no.\n",  # conditional
                 "So the answer would be 45.\n",  # hypothetical
                 "So the answer is 25? But\n",  # a question
                 "So the answer is 6000 - 300 - 200. Which\n",  # more arithmetic follows
                 "So she has 9 eggs left.\n",  # a conclusion that does not name the asked quantity
                 "So 3 + 4 = 7 eggs are used, and 16 - 7 = 9.\n"):  # an intermediate result
        assert _values(text) == [], text
    assert committed_answer(STATES + "So the answer is 19", dataset="gsm8k") == "18"  # 19 is not complete yet


def test_asked_quantity_names_the_unit():
    assert {"dollars", "$"} <= asked_quantity(Q)
    assert {"apples", "apple"} <= asked_quantity("Tom has 3 boxes. How many apples does he have?")
    assert {"%", "percent"} <= asked_quantity("What percentage of the students passed?")


def test_states_hesitates_confirms():
    rule = Committed(confirm=2).for_problem(Q, "gsm8k")
    view = lambda text: rule(ChainView([], text, len(text) // 4))  # noqa: E731
    assert view(STATES) == 0.0  # stated once: not confirmed yet
    assert view(STATES + HESITATES) == 0.0  # re-verifying
    assert view(STATES + HESITATES + CONFIRMS) == 1.0  # survived re-verification
    assert Committed(confirm=1).for_problem(Q, "gsm8k")(ChainView([], STATES, 30)) == 1.0
    assert Committed(confirm=1, quiet=200).for_problem(Q, "gsm8k")(ChainView([], STATES, 30)) == 0.0


def test_intermediate_value_never_commits():
    chain = "First, 16 - 7 = 9. So she has 9 eggs to sell. Each egg sells for $2, so"
    for kinds in ("strict", "conclude"):
        rule = Committed(kinds, confirm=1).for_problem(Q, "gsm8k")
        assert rule(ChainView([], chain, 20)) == 0.0
        assert rule.committed(chain + " she makes 9 * 2 = 18 dollars. Then she buys 3 more.") is None \
            or kinds == "conclude"


def test_answer_type_aime_and_numeric():
    aime = Committed(confirm=1).for_problem("Find m + n.", "aime")
    assert aime(ChainView([], "So the answer is 33.\n", 5)) == 1.0
    assert aime(ChainView([], "So the answer is 1234.\n", 5)) == 0.0  # AIME answers are 0..999
    assert Committed(confirm=1).for_problem(Q, "gsm8k")(ChainView([], "So the answer is x.\n", 5)) == 0.0


def test_exit_answer_must_be_the_probe_answer():
    rule = Committed(confirm=1).for_problem(Q, "gsm8k")
    assert rule(ChainView([ProbeObs(8, "18", "")], STATES, 30)) == 1.0
    assert rule(ChainView([ProbeObs(8, "9", "")], STATES, 30)) == 0.0


def test_prefix_statements_equal_a_fresh_scan():
    """The incremental cache (replay cuts chains; live streams grow them) gives the same
    statements as scanning each prefix from scratch."""
    text = (STATES + HESITATES + CONFIRMS) * 6 + "So the answer is \\boxed{18}.\n"
    rnd = random.Random(0)
    cuts = sorted(rnd.sample(range(1, len(text)), 60))
    for cut in cuts + cuts[::-1]:  # growing, then shrinking
        prefix = text[:cut]
        assert statements(prefix, dataset="gsm8k", question=Q) == \
            [s for s in _scan(prefix, "gsm8k", Q) if s.done <= len(prefix)]


def test_serialize_combine_bind():
    rule = AllOf(ProbeAgreement(2), Committed("conclude", confirm=2, quiet=60, survive=800))
    assert signal_from_dict(rule.to_dict()) == rule
    bound = for_problem(rule, Q, "gsm8k")
    assert bound.parts[1].question == Q and bound.parts[1].dataset == "gsm8k" and bound.parts[0] == rule.parts[0]
    with pytest.raises(ConfigError):
        Committed(confirm=0)
    with pytest.raises(ConfigError):
        Committed("loose")  # type: ignore[arg-type]


@pytest.fixture()
def traces(tmp_path: Path):
    out = tmp_path / "t.jsonl"
    import_traces(Path(__file__).parent / "data" / "reasoning" / "reasoning_gsm8k.jsonl", out,
                  fmt="reasoning-gsm8k", interval=8, tokenizer=Tokenizer.approximate())
    return load_traces(out)


def test_replay_exits_on_text_probes_and_pays_the_forced_answer(traces):
    rep = Replayer(traces, "cot")
    assert has_text_probes(traces)
    full = rep.run(None, k=1, interval=8)
    rule = Committed(confirm=1)
    plain = rep.run(Threshold(1.0, detect_at=1, every=1), k=1, interval=8, signal=rule)
    forced = forced_answer_run(rep, Threshold(1.0, detect_at=1, every=1), k=1, interval=8, signal=rule)
    assert plain.exits == {"certaindex": 1, "done": 1} and full.probe.sum() == 0  # text probes cost nothing
    assert plain.tokens[0] < full.tokens[0] and plain.correct[0] == 1.0  # exits at the stated 18
    # "18}": answer + closing brace; a chain that finished pays nothing
    assert (forced.tokens - plain.tokens).tolist() == [3.0, 0.0]
    assert forced.prefill.tolist() == [10.0, 0.0]
    oracle = forced_answer_oracle(rep)
    assert oracle.tokens[0] < full.tokens[0] and oracle.correct.tolist() == full.correct.tolist()


def test_text_method_calibrates_on_the_split_machinery(traces):
    grid = candidates(Replayer(traces, "cot"), "text")
    assert grid and all(isinstance(c.signal, Committed) for c in grid)
    calib = calibrate(traces, "cot", method="text")
    assert calib.scores.accuracy >= calib.baseline.accuracy and calib.tried == len(grid)


def test_statements_of_a_growing_chain_do_not_depend_on_what_was_read_before():
    """Reading a chain probe by probe (live, replay) gives the statements of a fresh scan of
    each prefix: "18." at the very end is not complete ("18.5" may follow), and a statement
    far into a long chain is found whatever prefix was scanned first."""
    q = "A pen costs $1.20 and an eraser $0.30. How much in dollars do 8 pens cost?"
    chain = ("First, 1.20 + 0.30 = 1.50. So one pen costs 1.50 dollars.\n\n" + "Let me think about it. " * 30
             + "\n\nTherefore the cost is 1.5 * 8 = 12 dollars.\nSo the answer is:\n\n12. " + "Yes. " * 150
             + "So the total cost is 12.5 dollars? No, the answer is 12.\n")
    fresh = lambda i: [s for s in _scan(chain[:i], "gsm8k", q)]  # noqa: E731
    cuts = list(range(1, len(chain) + 1, 9)) + [len(chain)]
    for order in (cuts, cuts[::-1], random.Random(0).sample(cuts, len(cuts))):
        from certa.algorithms.signals.text import _CHAINS
        _CHAINS.seen.clear()
        for i in order:
            assert statements(chain[:i], dataset="gsm8k", question=q) == fresh(i), i
    assert committed_answer("So the answer is 1.", dataset="gsm8k", question=q) == ""  # may still be "1.5"


def _text_probe_chain(idx: int, gold: str, pred: str, answers: list[str]) -> dict:
    text = "x" * 8 * (len(answers) + 1)
    probes = [{"at": 8 * (i + 1), "answer": a, "chars": 8 * (i + 1), "tokens": 0, "prompt_tokens": 0,
               "kind": "text"} for i, a in enumerate(answers)]
    return {"idx": idx, "gold": gold, "interval": 8, "dataset": "gsm8k", "samples": [{
        "tokens": 8 * (len(answers) + 1), "finished": True, "pred": pred, "correct": pred == gold, "text": text,
        "probes": probes}]}


def test_reasoning_headroom_bounds_on_known_chains():
    """The hindsight bounds of benchmarks/reasoning_headroom.py on two hand-made chains: one that
    commits to 18, leaves it for 9 and comes back (reopened), one that ends wrong."""
    import importlib.util
    import json
    from certa.eval.traces import parse_trace_line
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "reasoning_headroom.py"
    spec = importlib.util.spec_from_file_location("reasoning_headroom_bench", bench)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    problems = [parse_trace_line(json.dumps(_text_probe_chain(0, "18", "18", ["", "18", "9", "18", "18"]))),
                parse_trace_line(json.dumps(_text_probe_chain(1, "5", "7", ["7", "7", "7", "7", "7"])))]
    rep = Replayer(problems, "cot")
    a, b = (module.Chain(p, rep, 48.0, float(p.samples[0].correct)) for p in problems)  # the default: full chains
    assert a.settled() == (32 + 3, 1.0) and b.settled() == (8 + 2, 0.0)  # "18}" 3 tokens, "7}" 2
    assert a.reopened() is True and b.reopened() is False
    assert a.hold(8) == (40 + 3, 1.0)  # 18 again from 32, held 8 tokens at 40
    assert a.capped(30) == (32 + 3, 1.0) and a.capped(60) == (48.0, 1.0)
    last_not_final = parse_trace_line(json.dumps(_text_probe_chain(2, "18", "18", ["18", "18", "9", "9", "9"])))
    c = module.Chain(last_not_final, Replayer([last_not_final], "cot"), 48.0, 1.0)
    assert c.settled() == (48.0, 1.0) and c.reopened() is True  # never settles on its final answer: no exit
    h = module.headroom(problems, reps=50)
    assert h["full_chain"] == {"accuracy": 0.5, "tokens": 48.0} and h["reopened_share"] == 0.5
    assert h["oracle_first_final"]["token_ratio"] == round((16 + 3 + 8 + 2) / 96, 4)
    assert h["oracle_settled"]["token_ratio"] == round((35 + 10) / 96, 4)
    assert h["oracle_give_up"]["token_ratio"] == round((19 + 10) / 96, 4)  # the wrong chain exits at its first probe
    assert all(r["accuracy_delta_pt"] == 0.0 for r in (h["oracle_first_final"], h["oracle_settled"]))
    assert h["wrong_chain_token_share"] == 0.5
    two = _text_probe_chain(3, "18", "18", ["18"])
    two["samples"] *= 2
    with pytest.raises(ConfigError, match="one chain per problem"):
        module.headroom([parse_trace_line(json.dumps(two))])
